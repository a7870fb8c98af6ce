package fakebroker

import (
	"sort"
	"time"
)

// queueSummary is a queue as the queue listings show it. retainedBytes is
// this fake's extension (see the package documentation).
func queueSummary(q *queue, now time.Time, retained *int64) obj {
	c := q.stats(now)
	o := obj{
		"createdAt": fmtMilli(q.createdAt), "id": q.id,
		"messages": obj{"pending": c.pending, "processing": c.processing, "total": c.total},
		"name":     q.name, "namespace": q.namespace, "partitions": len(q.partList), "task": q.task,
	}
	if retained != nil {
		o["retainedBytes"] = *retained
	}
	return o
}

// handleQueueList serves GET /api/v1/resources/queues, newest queue first.
func (b *Broker) handleQueueList(rc *reqCtx) {
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	list := make([]any, 0, len(t.queues))
	for _, q := range t.sortedQueues() {
		q.sweepRetention(now)
		retained := b.retainedBytesLocked(q, now)
		list = append(list, queueSummary(q, now, &retained))
	}
	resp := obj{"queues": list}
	if b.opts.ReportKVTimerBytes {
		resp["kvBytes"], resp["kvRows"] = t.kvBytes, 0
		resp["timerBytes"], resp["timerRows"] = t.timerBytes, 0
	}
	b.mu.Unlock()
	rc.ok(resp)
}

// partitionDetail is a partition as the queue detail shows it.
func partitionDetail(p *partition, now time.Time) obj {
	var oldest, newest any
	if n := len(p.msgs); n > 0 {
		oldest, newest = fmtMilli(p.msgs[0].createdAt), fmtMilli(p.msgs[n-1].createdAt)
	}
	return obj{
		"createdAt": fmtMilli(p.createdAt), "id": p.id, "name": p.name,
		"newestMessage": newest, "oldestMessage": oldest, "stats": p.stats(now).toJSON(),
	}
}

// handleQueueDetail serves GET /api/v1/resources/queues/:queue.
func (b *Broker) handleQueueDetail(rc *reqCtx) {
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	q := t.queues[rc.params["queue"]]
	if q == nil {
		b.mu.Unlock()
		rc.ok(obj{"error": "Queue not found"})
		return
	}
	parts := make([]any, 0, len(q.partList))
	for _, p := range q.partList {
		parts = append(parts, partitionDetail(p, now))
	}
	resp := obj{
		"createdAt": fmtMilli(q.createdAt), "id": q.id, "name": q.name, "namespace": q.namespace,
		"partitions": parts, "task": q.task, "totals": q.stats(now).toJSON(),
	}
	b.mu.Unlock()
	rc.ok(resp)
}

// handleQueueDelete serves DELETE /api/v1/resources/queues/:queue.
func (b *Broker) handleQueueDelete(rc *reqCtx) {
	name := rc.params["queue"]
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	q := t.queues[name]
	if q != nil {
		t.deleteQueueLocked(q)
	}
	b.mu.Unlock()
	rc.ok(obj{"deleted": true, "existed": q != nil, "queue": name})
}

// groupTotals aggregates queues by namespace or task.
type groupTotals struct {
	queues, partitions, pending, total int
}

func (b *Broker) aggregate(tenantID string, key func(*queue) string) (map[string]*groupTotals, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenantLocked(tenantID)
	now := time.Now()
	agg := make(map[string]*groupTotals)
	var names []string
	for _, q := range t.queues {
		k := key(q)
		if k == "" {
			continue
		}
		g := agg[k]
		if g == nil {
			g = &groupTotals{}
			agg[k] = g
			names = append(names, k)
		}
		c := q.stats(now)
		g.queues++
		g.partitions += len(q.partList)
		g.pending += c.pending
		g.total += c.total
	}
	sort.Strings(names)
	return agg, names
}

// handleNamespaces serves GET /api/v1/resources/namespaces.
func (b *Broker) handleNamespaces(rc *reqCtx) {
	agg, names := b.aggregate(rc.tenant, func(q *queue) string { return q.namespace })
	list := make([]any, 0, len(names))
	for _, n := range names {
		g := agg[n]
		list = append(list, obj{
			"messages": obj{"pending": g.pending, "total": g.total}, "namespace": n,
			"partitions": g.partitions, "queues": g.queues,
		})
	}
	rc.ok(obj{"namespaces": list})
}

// handleTasks serves GET /api/v1/resources/tasks.
func (b *Broker) handleTasks(rc *reqCtx) {
	agg, names := b.aggregate(rc.tenant, func(q *queue) string { return q.task })
	list := make([]any, 0, len(names))
	for _, n := range names {
		g := agg[n]
		list = append(list, obj{
			"messages": obj{"pending": g.pending, "total": g.total}, "partitions": g.partitions,
			"queues": g.queues, "task": n,
		})
	}
	rc.ok(obj{"tasks": list})
}

// handleOverview serves GET /api/v1/resources/overview.
func (b *Broker) handleOverview(rc *reqCtx) {
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	var c counts
	partitions := 0
	namespaces := map[string]bool{}
	tasks := map[string]bool{}
	for _, q := range t.queues {
		c.add(q.stats(now))
		partitions += len(q.partList)
		if q.namespace != "" {
			namespaces[q.namespace] = true
		}
		if q.task != "" {
			tasks[q.task] = true
		}
	}
	resp := obj{
		"lag": obj{
			"offset": obj{"avg": 0, "max": 0, "median": 0, "min": 0},
			"time":   obj{"avg": 0, "max": 0, "median": 0, "min": 0},
		},
		"messages":   c.toJSON(),
		"namespaces": len(namespaces), "partitions": partitions, "queues": len(t.queues),
		"statsAge": 0, "tasks": len(tasks),
		"throughput": obj{"ingestedPerSecond": 0, "processedPerSecond": 0},
		"timestamp":  fmtMilli(now),
	}
	b.mu.Unlock()
	rc.ok(resp)
}
