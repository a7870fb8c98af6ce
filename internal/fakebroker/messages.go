package fakebroker

import (
	"sort"
	"time"

	"github.com/queengate/queengate/internal/uuidtext"
)

// located is a message with the partition that holds it.
type located struct {
	p *partition
	m *message
}

// newestFirst sorts messages newest first: by message id, which is a
// time-ordered UUIDv7 (as the broker does).
func newestFirst(ms []located) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].m.id > ms[j].m.id })
}

// page applies offset and limit to n items and returns the bounds.
func page(n, offset, limit int) (int, int) {
	if offset < 0 {
		offset = 0
	}
	if offset > n {
		offset = n
	}
	end := n
	if limit >= 0 && offset+limit < n {
		end = offset + limit
	}
	return offset, end
}

// handleMessageList serves GET /api/v1/messages (filters: queue, partition,
// status; limit, offset), newest first.
func (b *Broker) handleMessageList(rc *reqCtx) {
	qName, pName, status := rc.query.Get("queue"), rc.query.Get("partition"), rc.query.Get("status")
	limit, offset := rc.queryInt("limit", 50), rc.queryInt("offset", 0)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	var found []located
	bus, hasQueueMode := 0, false
	for _, q := range t.queues {
		if qName != "" && q.name != qName {
			continue
		}
		bus += q.busGroups()
		if q.groups[QueueMode] != nil {
			hasQueueMode = true
		}
		for _, p := range q.partList {
			if pName != "" && p.name != pName {
				continue
			}
			for _, m := range p.msgs {
				if status == "" || p.statusOf(QueueMode, m, now) == status {
					found = append(found, located{p, m})
				}
			}
		}
	}
	newestFirst(found)
	from, to := page(len(found), offset, limit)
	list := make([]any, 0, to-from)
	for _, l := range found[from:to] {
		list = append(list, messageRow(l.p, l.m, now))
	}
	b.mu.Unlock()
	rc.ok(obj{"messages": list, "mode": modeJSON(bus, hasQueueMode)})
}

// messageRow is a message as GET /api/v1/messages lists it.
func messageRow(p *partition, m *message, now time.Time) obj {
	q := p.q
	consumedBy := 0
	for name, c := range p.cursors {
		if name == QueueMode {
			continue
		}
		if s := c.states[m.id]; s != nil && s.done != notDone {
			consumedBy++
		}
	}
	status := p.statusOf(QueueMode, m, now)
	return obj{
		"busStatus": obj{"consumedBy": consumedBy, "totalGroups": q.busGroups()},
		"createdAt": fmtMilli(m.createdAt), "id": m.id, "leaseExpiresAt": leaseExpiry(p, QueueMode, m, now),
		"namespace": q.namespace, "partition": p.name, "partitionId": p.id, "producerSub": m.producerSubJSON(),
		"queue": q.name, "queuePath": q.name + "/" + p.name, "queuePriority": q.opts.priority,
		"queueStatus": status, "status": status, "task": q.task, "traceId": m.traceID,
		"transactionId": m.txn,
	}
}

// leaseExpiry is when group g's lease on m ends, or nil.
func leaseExpiry(p *partition, g string, m *message, now time.Time) any {
	if p.leasedBy(g, m, now) {
		return fmtMilli(p.cursors[g].lease.expiresAt)
	}
	return nil
}

// handleMessageGet serves GET /api/v1/messages/:partitionId/:transactionId.
func (b *Broker) handleMessageGet(rc *reqCtx) {
	pid, txn := rc.params["partitionId"], rc.params["transactionId"]
	if !uuidtext.Valid(pid) {
		rc.ok(pgUUIDError(pid, "unnamed portal parameter $1 = '...'"))
		return
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	p, m := t.findMessage(pid, txn)
	if m == nil {
		b.mu.Unlock()
		rc.ok(obj{"error": "Message not found"})
		return
	}
	q := p.q
	groups := make([]any, 0, len(q.groups))
	consumedByGroups := 0
	for _, name := range q.groupNames() {
		done := p.doneWith(name, m) != notDone
		if done && name != QueueMode {
			consumedByGroups++
		}
		groups = append(groups, obj{"consumed": done, "leaseExpiresAt": leaseExpiry(p, name, m, now), "name": name})
	}
	var retryCount, errMsg any
	if c := p.cursors[QueueMode]; c != nil {
		if s := c.states[m.id]; s != nil && s.retries > 0 {
			retryCount, errMsg = s.retries, s.lastError
		}
	}
	mode := modeJSON(q.busGroups(), q.groups[QueueMode] != nil)
	mode["consumedByGroups"] = consumedByGroups
	resp := obj{
		"consumerGroups": groups, "createdAt": fmtMilli(m.createdAt), "errorMessage": errMsg,
		"id": m.id, "isEncrypted": false, "leaseExpiresAt": leaseExpiry(p, QueueMode, m, now),
		"mode": mode, "namespace": q.namespace, "partition": p.name, "partitionId": p.id,
		"payload": m.data, "producerSub": m.producerSubJSON(), "queue": q.name,
		"queueConfig": obj{
			"leaseTime": q.opts.leaseTime, "priority": q.opts.priority, "retryDelay": q.opts.retryDelay,
			"retryLimit": q.opts.retryLimit, "ttl": q.opts.ttl,
		},
		"queuePath": q.name + "/" + p.name, "retryCount": retryCount,
		"status": p.statusOf(QueueMode, m, now), "task": q.task, "traceId": m.traceID,
		"transactionId": m.txn,
	}
	b.mu.Unlock()
	rc.ok(resp)
}

// handleMessageDelete serves DELETE /api/v1/messages/:partitionId/:transactionId.
func (b *Broker) handleMessageDelete(rc *reqCtx) {
	pid, txn := rc.params["partitionId"], rc.params["transactionId"]
	if !uuidtext.Valid(pid) {
		rc.ok(pgUUIDError(pid, "unnamed portal parameter $1 = '...'"))
		return
	}
	b.mu.Lock()
	p, m := b.tenantLocked(rc.tenant).findMessage(pid, txn)
	if m != nil {
		p.removeMessage(m)
	}
	b.mu.Unlock()
	if m == nil {
		rc.ok(obj{"message": "Message not found", "partitionId": pid, "success": false, "transactionId": txn})
		return
	}
	rc.ok(obj{"message": "Message deleted successfully", "partitionId": pid, "success": true, "transactionId": txn})
}

// handleDLQ serves GET /api/v1/dlq (filters: queue, consumerGroup,
// partition; offset), most recently failed first. limit (default 100) is
// echoed but, as in the recording (2 rows for limit=1), not applied.
func (b *Broker) handleDLQ(rc *reqCtx) {
	qName, group, pName := rc.query.Get("queue"), rc.query.Get("consumerGroup"), rc.query.Get("partition")
	limit, offset := rc.queryInt("limit", 100), rc.queryInt("offset", 0)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	var found []*dlqEntry
	for i := len(t.dlq) - 1; i >= 0; i-- {
		e := t.dlq[i]
		if (qName != "" && e.queueName != qName) || (group != "" && e.group != group) || (pName != "" && e.p.name != pName) {
			continue
		}
		found = append(found, e)
	}
	from, to := page(len(found), offset, -1)
	list := make([]any, 0, to-from)
	for _, e := range found[from:to] {
		list = append(list, obj{
			"consumerGroup": e.group, "createdAt": fmtMilli(e.msg.createdAt), "data": e.msg.data,
			"errorMessage": e.errMessage, "failedAt": fmtMilli(e.failedAt), "id": e.msg.id,
			"partition": e.p.name, "partitionId": e.p.id, "producerSub": e.msg.producerSubJSON(), "queue": e.queueName,
			"retryCount": e.retryCount, "transactionId": e.msg.txn,
		})
	}
	b.mu.Unlock()
	rc.ok(obj{"messages": list, "pagination": obj{"limit": limit, "offset": offset}})
}
