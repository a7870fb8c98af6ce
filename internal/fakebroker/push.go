package fakebroker

import (
	"encoding/json"
	"net/http"
	"time"
)

// PushOutcome is what the broker does with one pushed item.
type PushOutcome int

const (
	// PushQueued stores the item: status "queued", or "duplicate" when its
	// transaction id is already in the partition. This is the normal outcome.
	PushQueued PushOutcome = iota
	// PushBuffered is push-maintenance mode: the item is answered
	// {"status":"buffered","queue","partition","transactionId"?} and the
	// request gets HTTP 201. The fake stores the message at once.
	PushBuffered
	// PushBufferedFailover is the database-failover buffer: the item is
	// answered {"status":"buffered","queue"} with HTTP 200. The fake stores
	// the message at once.
	PushBufferedFailover
	// PushFailed is a failed buffer write: the item is answered
	// {"status":"failed","queue","partition","error":"File buffer write failed"},
	// the message is not stored and the request gets HTTP 500.
	PushFailed
)

// PushItem describes one item of a push request to a push hook.
type PushItem struct {
	Tenant        string
	Queue         string
	Partition     string
	TransactionID string // as sent by the client; "" when the broker generates it
	Index         int    // position in the request's items
}

// SetPushMode sets the outcome of every pushed item (PushQueued restores
// normal operation). POST /api/v1/system/maintenance switches between
// PushQueued and PushBuffered too.
func (b *Broker) SetPushMode(m PushOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pushMode = m
}

// SetPushHook installs a function that decides the outcome of each pushed
// item, overriding SetPushMode; nil removes it. The hook runs with the
// broker locked and must not call the broker.
func (b *Broker) SetPushHook(h func(PushItem) PushOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pushHook = h
}

// pushItem is a validated item of a push request.
type pushItem struct {
	queue       string
	partition   string
	txn         string
	clientTxn   bool
	traceID     any
	payload     json.RawMessage
	producerSub string
}

// parsePushItems validates a push body's items the way the broker does
// before touching the database. It returns the 400 message on failure.
// producerSub (the pusher's verified JWT sub, or "") is stamped on every
// item; a producerSub in the body is ignored.
func parsePushItems(items []json.RawMessage, producerSub string) ([]pushItem, string) {
	out := make([]pushItem, 0, len(items))
	for _, raw := range items {
		m, ok := asObject(raw)
		if !ok {
			return nil, "Queue must be a string"
		}
		qn, ok := asString(m["queue"])
		if !ok || qn == "" {
			return nil, "Queue must be a string"
		}
		it := pushItem{queue: qn, partition: "Default", payload: compactJSON(m["payload"]), producerSub: producerSub}
		if _, given := m["payload"]; !given {
			it.payload = json.RawMessage("{}") // the broker stores a missing payload as an empty object
		}
		if !absent(m["partition"]) {
			s, ok := asString(m["partition"])
			if !ok {
				return nil, "Partition must be a string"
			}
			it.partition = s
		}
		if !absent(m["transactionId"]) {
			s, ok := asString(m["transactionId"])
			if !ok {
				return nil, "TransactionId must be a string"
			}
			it.txn, it.clientTxn = s, true
		}
		if s, ok := asString(m["traceId"]); ok {
			it.traceID = s
		}
		out = append(out, it)
	}
	return out, ""
}

// enqueueLocked stores one item. It returns the stored (or original, for a
// duplicate) message and its partition.
func (b *Broker) enqueueLocked(t *tenant, it *pushItem, now time.Time) (m *message, p *partition, dup bool) {
	q := t.queues[it.queue]
	if q == nil {
		q = b.newQueueLocked(t, it.queue, now)
	}
	q.sweepRetention(now)
	p = t.partitionLocked(q, it.partition, now)
	if it.txn == "" {
		it.txn = newUUIDv4()
	}
	if orig := p.byTxn[it.txn]; orig != nil {
		return orig, p, true
	}
	m = &message{
		id:          b.ids.v7(now),
		txn:         it.txn,
		traceID:     it.traceID,
		data:        it.payload,
		createdAt:   now,
		producerSub: it.producerSub,
	}
	p.msgs = append(p.msgs, m)
	p.byTxn[m.txn] = m
	p.lastActivity = now
	b.msgTotal++
	t.stored++
	return m, p, false
}

// pushResult is the per-item answer of a push with outcome PushQueued.
func pushResult(i int, q string, m *message, p *partition, dup bool) obj {
	if dup {
		return obj{"index": i, "message_id": m.id, "queueName": q, "status": "duplicate", "transaction_id": m.txn}
	}
	return obj{
		"index": i, "message_id": m.id, "partition_id": p.id, "queueName": q,
		"status": "queued", "trace_id": m.traceID, "transaction_id": m.txn,
	}
}

// pushLocked runs a validated push and returns the per-item results and the
// HTTP status. Woken queues are woken before it returns.
func (b *Broker) pushLocked(t *tenant, items []pushItem, now time.Time) ([]any, int) {
	results := make([]any, 0, len(items))
	status := http.StatusOK
	for i := range items {
		it := &items[i]
		outcome := b.pushMode
		if b.pushHook != nil {
			outcome = b.pushHook(PushItem{Tenant: t.id, Queue: it.queue, Partition: it.partition, TransactionID: it.txn, Index: i})
		}
		switch outcome {
		case PushFailed:
			status = http.StatusInternalServerError
			results = append(results, obj{"status": "failed", "queue": it.queue, "partition": it.partition, "error": "File buffer write failed"})
			continue
		case PushBuffered:
			if status == http.StatusOK {
				status = http.StatusCreated
			}
			r := obj{"status": "buffered", "queue": it.queue, "partition": it.partition}
			if it.clientTxn {
				r["transactionId"] = it.txn
			}
			results = append(results, r)
		case PushBufferedFailover:
			results = append(results, obj{"status": "buffered", "queue": it.queue})
		}
		m, p, dup := b.enqueueLocked(t, it, now)
		if outcome == PushQueued {
			results = append(results, pushResult(i, it.queue, m, p, dup))
		}
		if !dup {
			b.wakeLocked(t.id, it.queue)
		}
	}
	return results, status
}

// handlePush serves POST /api/v1/push.
func (b *Broker) handlePush(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	raw, ok := asArray(m["items"])
	if !ok {
		badRequest(rc.w, "items array is required")
		return
	}
	if len(raw) == 0 {
		writeJSON(rc.w, http.StatusCreated, emptyList())
		return
	}
	items, msg := parsePushItems(raw, rc.producerSub)
	if msg != "" {
		badRequest(rc.w, msg)
		return
	}
	for _, it := range items {
		if rustNameTooLong(rc, it.queue) {
			return
		}
	}
	b.mu.Lock()
	results, status := b.pushLocked(b.tenantLocked(rc.tenant), items, time.Now())
	b.mu.Unlock()
	if rc.rust && status == http.StatusOK {
		// The raft-storage broker answers a stored push 201
		// (dispatch_push in server/src/handlers/raft.rs).
		status = http.StatusCreated
	}
	writeJSON(rc.w, status, results)
}
