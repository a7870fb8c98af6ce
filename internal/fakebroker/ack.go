package fakebroker

import (
	"encoding/json"
	"time"

	"github.com/queengate/queengate/internal/uuidtext"
)

// ackRequest is one acknowledgment.
type ackRequest struct {
	txn         string
	partitionID string
	leaseID     string
	status      string // completed, failed or dlq
	errMsg      string
	group       string
}

// ackResult is the outcome of one acknowledgment.
type ackResult struct {
	txn           string
	success       bool
	dlq           bool
	leaseReleased bool
	errStr        any // string or nil
	partitionName any // string or nil
	queueName     any // string or nil
	queue         string
}

func (r ackResult) toJSON(index int) obj {
	return obj{
		"dlq": r.dlq, "error": r.errStr, "index": index, "leaseReleased": r.leaseReleased,
		"partitionName": r.partitionName, "queueName": r.queueName, "success": r.success,
		"transactionId": r.txn,
	}
}

// parseAck reads one acknowledgment; group is the default consumer group.
// It returns the 400 message when a required field is not a string. Like
// the broker (measured on 0.15.1) it checks transactionId before
// partitionId and only that each is a string: an empty transactionId is a
// message that is not found, an empty partitionId reaches the database
// (which refuses it as a uuid). inBatch selects the wording of
// /api/v1/ack/batch.
func parseAck(m map[string]json.RawMessage, group string, inBatch bool) (ackRequest, string) {
	a := ackRequest{
		leaseID: asStringOr(m["leaseId"], ""),
		status:  asStringOr(m["status"], "completed"),
		errMsg:  asStringOr(m["error"], ""),
		group:   asStringOr(m["consumerGroup"], group),
	}
	if a.group == "" {
		a.group = QueueMode
	}
	var ok bool
	if a.txn, ok = asString(m["transactionId"]); !ok {
		if inBatch {
			return a, "Each acknowledgment must have a valid transactionId string"
		}
		return a, "transactionId is required"
	}
	if a.partitionID, ok = asString(m["partitionId"]); !ok {
		if inBatch {
			return a, "Each acknowledgment must have a valid partitionId string to ensure message uniqueness"
		}
		return a, "partitionId is required to ensure message uniqueness"
	}
	return a, ""
}

// ackLocked applies one acknowledgment.
func (b *Broker) ackLocked(t *tenant, a ackRequest, now time.Time) ackResult {
	res := ackResult{txn: a.txn}
	p, m := t.findMessage(a.partitionID, a.txn)
	if p == nil || m == nil {
		res.errStr = "Message not found"
		if p != nil {
			res.partitionName, res.queueName = p.name, p.q.name
		}
		return res
	}
	res.success = true
	res.partitionName, res.queueName, res.queue = p.name, p.q.name, p.q.name
	c := p.cursor(a.group)
	var l *lease
	if a.leaseID != "" {
		l = t.leases[a.leaseID]
	} else if c.lease.activeOn(p, now) {
		l = c.lease
	}

	st := c.state(m.id)
	o := p.q.opts
	switch a.status {
	case "failed":
		st.retries++
		st.lastError = a.errMsg
		if st.retries > o.retryLimit {
			if o.dlqAfterMaxRetries {
				b.deadLetterLocked(t, p, m, a.group, a.errMsg, st.retries-1, now)
				res.dlq = true
			} else {
				st.done = doneFailed
			}
		} else {
			st.retryAt = now.Add(time.Duration(o.retryDelay) * time.Millisecond)
		}
	case "dlq":
		b.deadLetterLocked(t, p, m, a.group, a.errMsg, st.retries, now)
		res.dlq = true
	default:
		if st.done != doneCompleted {
			st.done = doneCompleted
			c.consumed++
		}
		c.lastConsumed = now
	}

	if c.lease.activeOn(p, now) {
		if lp := c.lease.part(p); lp.msgIDs[m.id] {
			lp.acked++
			if lp.acked >= lp.size {
				lp.released = true
			}
		}
	}
	res.leaseReleased = !res.dlq && l != nil && !l.activeOn(p, now)
	if a.status == "failed" || !c.lease.activeOn(p, now) {
		b.wakeLocked(t.id, p.q.name)
	}
	return res
}

// deadLetterLocked moves m to the dead-letter queue for group g.
func (b *Broker) deadLetterLocked(t *tenant, p *partition, m *message, g, errMsg string, retries int, now time.Time) {
	p.cursor(g).state(m.id).done = doneDeadLettered
	t.dlq = append(t.dlq, &dlqEntry{
		group: g, msg: m, p: p, queueName: p.q.name,
		errMessage: errMsg, failedAt: now, retryCount: retries,
	})
}

// handleAck serves POST /api/v1/ack: one acknowledgment, answered with an
// array of one result.
func (b *Broker) handleAck(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	a, msg := parseAck(m, QueueMode, false)
	if msg != "" {
		badRequest(rc.w, msg)
		return
	}
	if !uuidtext.Valid(a.partitionID) {
		rc.ok(pgUUIDError(a.partitionID, "PL/pgSQL function queen.ack_messages_v2(jsonb) line 14 at FOR over SELECT rows"))
		return
	}
	b.mu.Lock()
	res := b.ackLocked(b.tenantLocked(rc.tenant), a, time.Now())
	b.mu.Unlock()
	rc.ok([]any{res.toJSON(0)})
}

// handleAckBatch serves POST /api/v1/ack/batch. Like the recorded broker it
// never answers an empty acknowledgments array: the request hangs until the
// client goes away.
func (b *Broker) handleAckBatch(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	raw, ok := asArray(m["acknowledgments"])
	if !ok {
		badRequest(rc.w, "acknowledgments array is required")
		return
	}
	if len(raw) == 0 {
		select {
		case <-rc.r.Context().Done():
		case <-b.closed:
		}
		return
	}
	group := asStringOr(m["consumerGroup"], QueueMode)
	acks := make([]ackRequest, 0, len(raw))
	for _, item := range raw {
		im, _ := asObject(item)
		a, msg := parseAck(im, group, true)
		if msg != "" {
			badRequest(rc.w, msg)
			return
		}
		acks = append(acks, a)
	}
	for _, a := range acks {
		if !uuidtext.Valid(a.partitionID) {
			rc.ok(pgUUIDError(a.partitionID, "PL/pgSQL function queen.ack_messages_v2(jsonb) line 14 at FOR over SELECT rows"))
			return
		}
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	out := make([]any, 0, len(acks))
	for i, a := range acks {
		out = append(out, b.ackLocked(t, a, now).toJSON(i))
	}
	b.mu.Unlock()
	rc.ok(out)
}
