package fakebroker

import (
	"encoding/json"
	"time"
)

// lease is a consumer group's claim on the batches it popped from one or more
// partitions of a queue.
type lease struct {
	id        string
	group     string
	q         *queue
	parts     []*leasePart
	expiresAt time.Time
}

// leasePart is a lease's batch on one partition. The broker counts acks
// against the batch size (repeated acks count too) and releases the
// partition when the count reaches it.
type leasePart struct {
	p        *partition
	msgIDs   map[string]bool
	size     int
	acked    int
	released bool
}

func (l *lease) part(p *partition) *leasePart {
	for _, lp := range l.parts {
		if lp.p == p {
			return lp
		}
	}
	return nil
}

// activeOn reports whether l still holds p.
func (l *lease) activeOn(p *partition, now time.Time) bool {
	if l == nil || !now.Before(l.expiresAt) {
		return false
	}
	lp := l.part(p)
	return lp != nil && !lp.released
}

// active reports whether l still holds any partition.
func (l *lease) active(now time.Time) bool {
	if !now.Before(l.expiresAt) {
		return false
	}
	for _, lp := range l.parts {
		if !lp.released {
			return true
		}
	}
	return false
}

// handleLeaseExtend serves POST /api/v1/lease/:leaseId/extend: the lease
// then expires the given seconds (default 60) from now.
func (b *Broker) handleLeaseExtend(rc *reqCtx) {
	id := rc.params["leaseId"]
	var body map[string]json.RawMessage
	if len(rc.body) > 0 {
		var ok bool
		if body, ok = rc.object(); !ok {
			return
		}
	}
	seconds := asInt(body["seconds"], 60)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	l := t.leases[id]
	if l == nil || !l.active(now) {
		b.mu.Unlock()
		rc.ok([]any{obj{"error": "Lease not found", "expiresAt": nil, "index": 0, "leaseId": id, "success": false}})
		return
	}
	l.expiresAt = now.Add(time.Duration(seconds) * time.Second)
	expires := l.expiresAt
	b.mu.Unlock()
	rc.ok([]any{obj{"error": nil, "expiresAt": fmtMilli(expires), "index": 0, "leaseId": id, "success": true}})
}
