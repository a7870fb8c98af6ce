package fakebroker

import (
	"sort"
	"time"
)

// lagInfo is how far a group is behind on one partition.
type lagInfo struct {
	offset       int
	oldest       time.Time // createdAt of the oldest message the group has not finished
	timeLagSecs  int
	lastConsumed time.Time
}

// lagOf measures group g's lag on p.
func (p *partition) lagOf(g string, now time.Time) lagInfo {
	var li lagInfo
	for _, m := range p.msgs {
		if p.doneWith(g, m) == notDone {
			if li.offset == 0 {
				li.oldest = m.createdAt
			}
			li.offset++
		}
	}
	if li.offset > 0 {
		li.timeLagSecs = int(now.Sub(li.oldest) / time.Second)
	}
	if c := p.cursors[g]; c != nil {
		li.lastConsumed = c.lastConsumed
	}
	return li
}

// workerID is the lease id holding p for group g, or nil.
func workerID(p *partition, g string, now time.Time) any {
	if c := p.cursors[g]; c != nil && c.lease.activeOn(p, now) {
		return c.lease.id
	}
	return nil
}

// sortedQueuesByName returns t's queues by name.
func (t *tenant) sortedQueuesByName() []*queue {
	qs := make([]*queue, 0, len(t.queues))
	for _, q := range t.queues {
		qs = append(qs, q)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].name < qs[j].name })
	return qs
}

// partitionsByName returns q's partitions by name.
func (q *queue) partitionsByName() []*partition {
	ps := append([]*partition(nil), q.partList...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	return ps
}

// handleGroupList serves GET /api/v1/consumer-groups: one row per consumer
// group and queue, queue mode included, or an empty body when there is none.
func (b *Broker) handleGroupList(rc *reqCtx) {
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	type row struct {
		group, queue string
		o            obj
	}
	var rows []row
	for _, q := range t.queues {
		for _, name := range q.groupNames() {
			g := q.groups[name]
			members, withLag, maxLag := 0, 0, 0
			for _, p := range q.partList {
				if p.cursors[name] == nil {
					continue
				}
				members++
				if li := p.lagOf(name, now); li.offset > 0 {
					withLag++
					maxLag = max(maxLag, li.timeLagSecs)
				}
			}
			var mode, subAt any
			if g.mode == "new" {
				mode, subAt = g.mode, fmtMilli(g.subscribedAt)
			}
			rows = append(rows, row{name, q.name, obj{
				"maxTimeLag": maxLag, "members": members, "name": name, "partitionsWithLag": withLag,
				"queueName": q.name, "state": "Stable", "subscriptionCreatedAt": subAt,
				"subscriptionMode": mode, "subscriptionTimestamp": subAt, "topics": []any{q.name},
				"totalLag": nil,
			}})
		}
	}
	b.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].group != rows[j].group {
			return rows[i].group < rows[j].group
		}
		return rows[i].queue < rows[j].queue
	})
	list := make([]any, 0, len(rows))
	for _, r := range rows {
		list = append(list, r.o)
	}
	if len(list) == 0 {
		writeEmptyJSON(rc.w) // the broker's answer when no group has consumed (measured on 0.15.1)
		return
	}
	rc.ok(list)
}

// handleGroupLagging serves GET /api/v1/consumer-groups/lagging: partitions
// where a group's oldest unfinished message is more than minLagSeconds
// (default 3600) old, by group and partition id. Like the broker it answers
// an empty body when there are none.
func (b *Broker) handleGroupLagging(rc *reqCtx) {
	minLag := rc.queryInt("minLagSeconds", 3600)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	type row struct {
		group string
		p     *partition
		o     obj
	}
	var rows []row
	for _, q := range t.queues {
		for _, name := range q.groupNames() {
			for _, p := range q.partList {
				if p.cursors[name] == nil {
					continue
				}
				li := p.lagOf(name, now)
				if li.offset == 0 || li.timeLagSecs <= minLag {
					continue
				}
				rows = append(rows, row{name, p, obj{
					"consumer_group": name, "lag_hours": li.timeLagSecs / 3600,
					"last_consumed_at": fmtMilliOrNil(li.lastConsumed), "offset_lag": li.offset,
					"oldest_unconsumed_at": fmtMilli(li.oldest), "partition_id": p.id,
					"partition_name": p.name, "queue_name": q.name, "time_lag_seconds": li.timeLagSecs,
					"worker_id": workerID(p, name, now),
				}})
			}
		}
	}
	b.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].group != rows[j].group {
			return rows[i].group < rows[j].group
		}
		if rows[i].p.q != rows[j].p.q {
			return rows[i].p.q.name < rows[j].p.q.name
		}
		return b.partitionLess(rows[i].p, rows[j].p)
	})
	list := make([]any, 0, len(rows))
	for _, r := range rows {
		list = append(list, r.o)
	}
	if len(list) == 0 {
		writeEmptyJSON(rc.w)
		return
	}
	rc.ok(list)
}

// handleGroupDetail serves GET /api/v1/consumer-groups/:group: the group's
// partitions per queue, or an empty body for an unknown group.
func (b *Broker) handleGroupDetail(rc *reqCtx) {
	name := rc.params["group"]
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	resp := obj{}
	for _, q := range t.sortedQueuesByName() {
		if q.groups[name] == nil {
			continue
		}
		parts := make([]any, 0)
		for _, p := range q.partitionsByName() {
			c := p.cursors[name]
			if c == nil {
				continue
			}
			li := p.lagOf(name, now)
			parts = append(parts, obj{
				"lastConsumedAt": fmtMilliOrNil(c.lastConsumed), "leaseActive": c.lease.activeOn(p, now),
				"offsetLag": li.offset, "partition": p.name, "timeLagSeconds": li.timeLagSecs,
				"totalConsumed": c.consumed, "workerId": workerID(p, name, now),
			})
		}
		resp[q.name] = obj{"partitions": parts}
	}
	b.mu.Unlock()
	if len(resp) == 0 {
		writeEmptyJSON(rc.w)
		return
	}
	rc.ok(resp)
}

// handleGroupDelete serves DELETE /api/v1/consumer-groups/:group and
// DELETE /api/v1/consumer-groups/:group/queues/:queue.
func (b *Broker) handleGroupDelete(rc *reqCtx) {
	name, only := rc.params["group"], rc.params["queue"]
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	deleted := 0
	for _, q := range t.queues {
		if only != "" && q.name != only {
			continue
		}
		for _, p := range q.partList {
			if p.cursors[name] != nil {
				delete(p.cursors, name)
				deleted++
			}
		}
		delete(q.groups, name)
		for id, l := range t.leases {
			if l.q == q && l.group == name {
				delete(t.leases, id)
			}
		}
	}
	b.mu.Unlock()
	resp := obj{"consumerGroup": name, "deletedPartitions": deleted, "metadataDeleted": true, "success": true}
	if only != "" {
		resp["queueName"] = only
	}
	rc.ok(resp)
}

// handleGroupSubscription serves POST /api/v1/consumer-groups/:group/subscription:
// it moves the subscription time of the group's subscriptionMode=new queues.
func (b *Broker) handleGroupSubscription(rc *reqCtx) {
	name := rc.params["group"]
	m := rc.lenientObject()
	raw, ok := asString(m["subscriptionTimestamp"])
	if !ok {
		badRequest(rc.w, "Missing subscriptionTimestamp in request body")
		return
	}
	ts, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		badRequest(rc.w, "Invalid subscriptionTimestamp")
		return
	}
	b.mu.Lock()
	rows := 0
	for _, q := range b.tenantLocked(rc.tenant).queues {
		if g := q.groups[name]; g != nil && g.mode == "new" {
			g.subscribedAt = ts
			rows++
		}
	}
	b.mu.Unlock()
	rc.ok(obj{"consumerGroup": name, "newTimestamp": raw, "rowsUpdated": rows, "success": true})
}

// seekCursor moves group g's cursor on p: to the end (everything finished)
// or so that messages from ts on are delivered again.
func seekCursor(p *partition, g string, toEnd bool, ts time.Time) {
	c := p.cursor(g)
	for _, m := range p.msgs {
		if toEnd || m.createdAt.Before(ts) {
			if s := c.state(m.id); s.done == notDone {
				s.done = doneSkipped
			}
		} else {
			delete(c.states, m.id)
		}
	}
}

// handleGroupSeek serves POST /api/v1/consumer-groups/:group/queues/:queue/seek.
func (b *Broker) handleGroupSeek(rc *reqCtx) {
	name, qName := rc.params["group"], rc.params["queue"]
	m := rc.lenientObject()
	toEnd := asBool(m["toEnd"], false)
	tsRaw, hasTS := asString(m["timestamp"])
	var ts time.Time
	if hasTS {
		var err error
		if ts, err = time.Parse(time.RFC3339Nano, tsRaw); err != nil {
			hasTS = false
		}
	}
	if !toEnd && !hasTS {
		badRequest(rc.w, "Must specify either 'toEnd': true or 'timestamp'")
		return
	}
	b.mu.Lock()
	updated := 0
	if q := b.tenantLocked(rc.tenant).queues[qName]; q != nil {
		for _, p := range q.partList {
			if p.cursors[name] != nil {
				seekCursor(p, name, toEnd, ts)
				updated++
			}
		}
		b.wakeLocked(rc.tenant, qName)
	}
	b.mu.Unlock()
	var target any
	if !toEnd {
		target = fmtMilli(ts)
	}
	rc.ok(obj{
		"consumerGroup": name, "partitionsUpdated": updated, "queueName": qName,
		"seekToEnd": toEnd, "success": true, "targetTimestamp": target,
	})
}

// handlePartitionSeek serves
// POST /api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek:
// it moves the group's cursor on the partition to its end.
func (b *Broker) handlePartitionSeek(rc *reqCtx) {
	name, qName, pName := rc.params["group"], rc.params["queue"], rc.params["partition"]
	b.mu.Lock()
	var p *partition
	if q := b.tenantLocked(rc.tenant).queues[qName]; q != nil {
		p = q.parts[pName]
	}
	if p == nil {
		b.mu.Unlock()
		rc.ok(obj{"error": "Partition not found", "success": false})
		return
	}
	seekCursor(p, name, true, time.Time{})
	var movedTo any
	if n := len(p.msgs); n > 0 {
		movedTo = fmtMilli(p.msgs[n-1].createdAt)
	}
	b.mu.Unlock()
	rc.ok(obj{
		"consumerGroup": name, "cursorMovedTo": movedTo, "partitionName": pName,
		"queueName": qName, "success": true, "updated": true,
	})
}
