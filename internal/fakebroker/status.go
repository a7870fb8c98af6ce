package fakebroker

import (
	"sort"
	"time"
)

// timeRange reads the from/to query parameters (default: the last hour).
func (rc *reqCtx) timeRange(now time.Time, def time.Duration) (time.Time, time.Time) {
	from, to := now.Add(-def), now
	if v, err := time.Parse(time.RFC3339Nano, rc.query.Get("from")); err == nil {
		from = v
	}
	if v, err := time.Parse(time.RFC3339Nano, rc.query.Get("to")); err == nil {
		to = v
	}
	return from, to
}

func rangeJSON(from, to time.Time) obj {
	return obj{"from": fmtMilli(from), "to": fmtMilli(to)}
}

// cellWideLocked is the tenants a cell-wide route answers for: under
// TenancyRust every tenant of the cell, since the Rust brokers' status and
// worker metrics take no tenant (server/src/handlers/status.rs,
// handle_api_status; server/src/handlers/analytics.rs, worker-metrics);
// otherwise the caller's tenant, as the fake's other modes scope them.
func (b *Broker) cellWideLocked(rc *reqCtx) []*tenant {
	if !rc.rust {
		return []*tenant{b.tenantLocked(rc.tenant)}
	}
	ids := make([]string, 0, len(b.tenants))
	for id := range b.tenants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*tenant, 0, len(ids))
	for _, id := range ids {
		out = append(out, b.tenants[id])
	}
	return out
}

// handleStatus serves GET /api/v1/status (optional queue, from, to); under
// TenancyRust it answers for the whole cell (cellWideLocked).
func (b *Broker) handleStatus(rc *reqCtx) {
	now := time.Now()
	from, to := rc.timeRange(now, time.Hour)
	filter := rc.query.Get("queue")
	b.mu.Lock()
	queues := make([]any, 0)
	var c counts
	leases, leasedParts, leaseBatch, dlqCount := 0, 0, 0, 0
	for _, t := range b.cellWideLocked(rc) {
		for _, q := range t.sortedQueues() {
			if filter != "" && q.name != filter {
				continue
			}
			consumed := 0
			for _, p := range q.partList {
				if cur := p.cursors[QueueMode]; cur != nil {
					consumed += cur.consumed
				}
			}
			c.add(q.stats(now))
			queues = append(queues, obj{
				"id": q.id, "name": q.name, "namespace": q.namespace, "partitions": len(q.partList),
				"task": q.task, "totalConsumed": consumed,
			})
		}
		for _, l := range t.leases {
			if l.active(now) && (filter == "" || l.q.name == filter) {
				leases++
				for _, lp := range l.parts {
					if !lp.released {
						leasedParts++
						leaseBatch += lp.size
					}
				}
			}
		}
		dlqCount += len(t.dlq)
	}
	b.mu.Unlock()

	bucket := 1
	throughput := make([]any, 0)
	if rc.query.Get("from") != "" || rc.query.Get("to") != "" {
		bucket = 360
		throughput = append(throughput, obj{
			"ackFailed": 0, "avgEventLoopLagMs": nil, "avgLagMs": 0, "dbErrors": nil,
			"dbPoolActive": nil, "dbPoolIdle": nil, "dbPoolSize": nil, "dlqCount": nil,
			"ingested": c.total, "ingestedPerSecond": 0, "maxEventLoopLagMs": nil, "maxLagMs": 0,
			"minFreeSlots": nil, "popMessages": 0, "popPerSecond": 0, "processed": c.completed,
			"processedPerSecond": 0, "queenCpuSysPct": nil, "queenCpuUserPct": nil,
			"queenRssMb": nil, "timestamp": now.UTC().Truncate(time.Hour).Format(layoutBucket),
		})
	}
	msgs := c.toJSON()
	msgs["batchEfficiency"] = obj{"ack": 0, "pop": 0, "push": 0}
	msgs["requests"] = obj{"ack": 0, "pop": 0, "push": 0}
	rc.ok(obj{
		"bucketMinutes": bucket,
		"deadLetterQueue": obj{
			"affectedPartitions": 0, "topErrors": emptyList(), "totalMessages": dlqCount,
		},
		"errors": obj{"ackFailed": 0, "dbErrors": 0, "dlqMessages": dlqCount},
		"leases": obj{
			"active": leases, "partitionsWithLeases": leasedParts, "totalAcked": 0,
			"totalBatchSize": leaseBatch,
		},
		"messages": msgs, "pointCount": len(throughput), "queues": queues, "statsAge": 0,
		"throughput": throughput, "timeRange": rangeJSON(from, to), "workers": emptyList(),
	})
}

// handleStatusQueues serves GET /api/v1/status/queues.
func (b *Broker) handleStatusQueues(rc *reqCtx) {
	limit, offset := rc.queryInt("limit", 100), rc.queryInt("offset", 0)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	qs := t.sortedQueues()
	from, to := page(len(qs), offset, limit)
	list := make([]any, 0, to-from)
	for _, q := range qs[from:to] {
		list = append(list, queueSummary(q, now, nil))
	}
	b.mu.Unlock()
	rc.ok(obj{"pagination": obj{"limit": limit, "offset": offset}, "queues": list})
}

// handleStatusQueue serves GET /api/v1/status/queues/:queue.
func (b *Broker) handleStatusQueue(rc *reqCtx) {
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
	var totals counts
	for _, p := range q.partList {
		st := p.stats(now)
		totals.add(st)
		d := partitionDetail(p, now)
		consumed, batches := 0, 0
		if cur := p.cursors[QueueMode]; cur != nil {
			consumed, batches = cur.consumed, cur.batches
		}
		d["cursor"] = obj{"batchesConsumed": batches, "totalConsumed": consumed}
		d["lastActivity"] = fmtMilliOrNil(p.lastActivity)
		d["messages"] = st.toJSON()
		parts = append(parts, d)
	}
	tj := totals.toJSON()
	tj["messages"] = totals.toJSON()
	resp := obj{
		"partitions": parts,
		"queue": obj{
			"config": obj{
				"deadLetterQueue": q.opts.deadLetterQueue, "leaseTime": q.opts.leaseTime,
				"maxQueueSize": q.opts.maxSize, "retryDelay": q.opts.retryDelay,
				"retryLimit": q.opts.retryLimit, "ttl": q.opts.ttl,
			},
			"createdAt": fmtMilli(q.createdAt), "id": q.id, "name": q.name,
			"namespace": q.namespace, "priority": q.opts.priority, "task": q.task,
		},
		"totals": tj,
	}
	b.mu.Unlock()
	rc.ok(resp)
}

// handleStatusQueueMessages serves GET /api/v1/status/queues/:queue/messages:
// a bare array, newest first. The recorded broker returned more rows than
// limit asked for (10 for limit=5), so the fake ignores limit here.
func (b *Broker) handleStatusQueueMessages(rc *reqCtx) {
	offset := rc.queryInt("offset", 0)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	var found []located
	if q := t.queues[rc.params["queue"]]; q != nil {
		for _, p := range q.partList {
			for _, m := range p.msgs {
				found = append(found, located{p, m})
			}
		}
	}
	newestFirst(found)
	from, to := page(len(found), offset, -1)
	list := make([]any, 0, to-from)
	for _, l := range found[from:to] {
		list = append(list, obj{
			"createdAt": fmtMilli(l.m.createdAt), "id": l.m.id, "partition": l.p.name,
			"partitionId": l.p.id, "queue": l.p.q.name, "queuePath": l.p.q.name + "/" + l.p.name,
			"status": l.p.statusOf(QueueMode, l.m, now), "transactionId": l.m.txn,
		})
	}
	b.mu.Unlock()
	rc.ok(list)
}

// handleStatusAnalytics serves GET /api/v1/status/analytics: messages
// pushed per hour (or per minute with interval=minute) over the last day.
func (b *Broker) handleStatusAnalytics(rc *reqCtx) {
	now := time.Now().UTC()
	from, to := rc.timeRange(now, 24*time.Hour)
	interval := rc.query.Get("interval")
	step := time.Hour
	if interval == "minute" {
		step = time.Minute
	} else {
		interval = "hour"
	}
	filter := rc.query.Get("queue")
	start := from.UTC().Truncate(step)
	n := int(to.Sub(start)/step) + 1
	if n < 1 || n > 100000 {
		n = 1
	}
	buckets := make([]int, n)
	b.mu.Lock()
	for _, q := range b.tenantLocked(rc.tenant).queues {
		if filter != "" && q.name != filter {
			continue
		}
		for _, p := range q.partList {
			for _, m := range p.msgs {
				if i := int(m.createdAt.Sub(start) / step); i >= 0 && i < n && !m.createdAt.Before(from) {
					buckets[i]++
				}
			}
		}
	}
	b.mu.Unlock()
	points := make([]any, 0, n)
	for i, c := range buckets {
		points = append(points, obj{"messages": c, "timestamp": fmtMilli(start.Add(time.Duration(i) * step))})
	}
	rc.ok(obj{"dataPoints": points, "from": fmtMilli(from), "interval": interval, "to": fmtMilli(to)})
}

// handleStatusBuffers serves GET /api/v1/status/buffers.
func (b *Broker) handleStatusBuffers(rc *reqCtx) {
	rc.ok(obj{"dbHealthy": true, "failed": 0, "pending": 0, "worker": 1})
}
