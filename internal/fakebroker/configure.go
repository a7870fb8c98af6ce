package fakebroker

import "time"

// handleConfigure serves POST /api/v1/configure: it creates or updates a
// queue (and its Default partition) and answers with the full option set.
// Without options the broker answers 200 with a JSON-library error, yet the
// queue exists afterwards (C7 created cat-empty), so the fake creates it too.
func (b *Broker) handleConfigure(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	name, ok := asString(m["queue"])
	if !ok || name == "" {
		badRequest(rc.w, "queue is required")
		return
	}
	if rustNameTooLong(rc, name) {
		return
	}
	optsRaw, hasOpts := asObject(m["options"])
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	now := time.Now()
	q := t.queues[name]
	if q == nil {
		q = b.newQueueLocked(t, name, now)
		q.namespace = ""
	}
	p := t.partitionLocked(q, "Default", now)
	if !hasOpts {
		b.mu.Unlock()
		rc.ok(obj{"error": "[json.exception.type_error.306] cannot use value() with null"})
		return
	}
	q.namespace = asStringOr(m["namespace"], "")
	q.task = asStringOr(m["task"], "")
	q.opts = optionsFrom(optsRaw)
	resp := obj{
		"configured": true, "namespace": q.namespace, "options": q.opts.toJSON(),
		"partitionId": p.id, "queue": q.name, "queueId": q.id, "task": q.task,
	}
	b.mu.Unlock()
	rc.ok(resp)
}
