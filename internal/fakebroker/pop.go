package fakebroker

import (
	"net/http"
	"sort"
	"time"
)

// defaultPollInterval is how often a parked pop looks again without a wake,
// so that retry delays, lease expiries and delayed processing are noticed.
// Pushes wake parked pops at once.
const defaultPollInterval = 100 * time.Millisecond

// popRequest is a parsed pop.
type popRequest struct {
	queue      string
	partition  string // "" = any partition
	group      string
	batch      int
	partitions int
	autoAck    bool
	wait       bool
	timeout    time.Duration
	subMode    string
	// negativeBatch: the broker passes the batch to its SQL as a LIMIT,
	// which PostgreSQL refuses (sqlerrors.go).
	negativeBatch bool
}

// parsePop reads a pop's parameters the broker's way (brokerquery.go).
func parsePop(rc *reqCtx) popRequest {
	q := rc.r.URL.RawQuery
	pr := popRequest{
		queue:      rc.params["queue"],
		partition:  rc.params["partition"],
		group:      brokerParam(q, "consumerGroup"),
		batch:      brokerParamInt(q, "batch", 1),
		partitions: brokerParamInt(q, "partitions", 1),
		autoAck:    brokerParamBool(q, "autoAck", false),
		wait:       brokerParamBool(q, "wait", false),
		timeout:    time.Duration(brokerParamInt(q, "timeout", 30000)) * time.Millisecond,
		subMode:    brokerParam(q, "subscriptionMode"),
	}
	if pr.group == "" {
		pr.group = QueueMode
	}
	pr.negativeBatch = pr.batch < 0
	if pr.batch < 1 {
		pr.batch = 1
	}
	if pr.partitions < 1 {
		pr.partitions = 1
	}
	return pr
}

// handlePop serves GET /api/v1/pop/queue/:queue[/partition/:partition],
// parking long-polls (wait=true) until a push wakes them or they time out.
func (b *Broker) handlePop(rc *reqCtx) {
	pr := parsePop(rc)
	if rc.rust && pr.subMode == "" {
		// A group that names no subscription mode starts at the tail on
		// the Rust brokers (DEFAULT_SUBSCRIPTION_MODE, server/src/config.rs).
		pr.subMode = "new"
	}
	if pr.negativeBatch {
		rc.ok(pgNegativeLimitError())
		return
	}
	b.mu.Lock()
	popMaint := b.popMaint
	b.mu.Unlock()
	if popMaint {
		rc.w.Header()["Content-Type"] = nil
		rc.w.WriteHeader(http.StatusNoContent)
		return
	}
	deadline := time.Now().Add(pr.timeout)
	parked := false
	defer func() {
		if parked {
			b.parked.Add(-1)
		}
	}()
	for {
		b.mu.Lock()
		resp, final := b.tryPopLocked(b.tenantLocked(rc.tenant), pr, time.Now())
		wake := b.waitChanLocked(rc.tenant, pr.queue)
		b.mu.Unlock()
		if final {
			rc.popAnswer(resp)
			return
		}
		if !pr.wait {
			rc.popAnswer(b.emptyPopAnswer(rc.tenant, pr))
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			rc.popAnswer(obj{
				"consumerGroup": pr.group, "leaseId": nil, "messages": emptyList(),
				"partition": pr.partition, "partitionId": nil, "queue": pr.queue, "success": true,
			})
			return
		}
		if !parked {
			parked = true
			b.parked.Add(1)
		}
		timer := time.NewTimer(min(left, b.poll))
		select {
		case <-wake:
		case <-timer.C:
		case <-rc.r.Context().Done():
			timer.Stop()
			return
		case <-b.closed:
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// popAnswer sends a pop's answer. Under TenancyRust a pop that delivers
// nothing is 204 with no body: the empty pop bodies early-return on 204 in
// server/src/handlers/mod.rs (json()).
func (rc *reqCtx) popAnswer(resp obj) {
	if rc.rust {
		if msgs, _ := resp["messages"].([]any); len(msgs) == 0 {
			rc.w.Header()["Content-Type"] = nil
			rc.w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	rc.ok(resp)
}

// emptyPopAnswer is the answer to a pop that waits for nothing and found
// nothing to deliver. The broker (measured on 0.15.1) tells a pop of one
// partition apart: a partition it does not have is "partition_not_found";
// one it has, with nothing available, is claimed and answered as a success
// with no messages and a fresh lease id (none with autoAck) that holds
// nothing back. A pop of a whole queue gets "no_available_partition".
func (b *Broker) emptyPopAnswer(tenant string, pr popRequest) obj {
	if pr.partition == "" {
		return obj{"error": "no_available_partition", "messages": emptyList(), "success": false}
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var p *partition
	if q := b.tenantLocked(tenant).queues[pr.queue]; q != nil {
		p = q.parts[pr.partition]
	}
	if p == nil {
		return obj{"error": "partition_not_found", "messages": emptyList(), "success": false}
	}
	leaseID := ""
	if !pr.autoAck {
		leaseID = b.ids.v7(now)
	}
	return obj{
		"consumerGroup": pr.group, "leaseId": leaseID, "messages": emptyList(),
		"partition": p.name, "partitionId": p.id, "partitionsClaimed": 1,
		"queue": p.q.name, "success": true,
	}
}

// claim is the batch a pop takes from one partition.
type claim struct {
	p    *partition
	msgs []*message
}

// tryPopLocked makes one attempt at a pop. final=false means nothing was
// available (the caller answers "no_available_partition" or keeps waiting).
func (b *Broker) tryPopLocked(t *tenant, pr popRequest, now time.Time) (resp obj, final bool) {
	q := t.queues[pr.queue]
	if q == nil {
		return nil, false
	}
	q.sweepRetention(now)
	g := q.ensureGroup(pr.group, pr.subMode, now)

	var cands []*partition
	if pr.partition != "" {
		p := q.parts[pr.partition]
		if p == nil {
			return nil, false
		}
		if c := p.cursors[g.name]; c != nil && c.lease.activeOn(p, now) {
			return obj{"error": "lease_held", "messages": emptyList(), "success": false}, true
		}
		if !p.hasAvailable(g.name, now) {
			return nil, false
		}
		cands = []*partition{p}
	} else {
		for _, p := range b.orderedPartitions(q) {
			if c := p.cursors[g.name]; c != nil && c.lease.activeOn(p, now) {
				continue
			}
			if p.hasAvailable(g.name, now) {
				cands = append(cands, p)
				if len(cands) == pr.partitions {
					break
				}
			}
		}
		if len(cands) == 0 {
			return nil, false
		}
	}

	var claims []claim
	left := pr.batch
	for _, p := range cands {
		if left == 0 {
			break
		}
		msgs := p.collect(g, left, now)
		claims = append(claims, claim{p, msgs})
		left -= len(msgs)
	}
	return b.deliverLocked(t, q, g, claims, pr.autoAck, now), true
}

// deliverLocked leases (or, with autoAck, completes) the claimed batches and
// builds the pop answer.
func (b *Broker) deliverLocked(t *tenant, q *queue, g *group, claims []claim, autoAck bool, now time.Time) obj {
	var full []claim
	for _, c := range claims {
		if len(c.msgs) > 0 {
			full = append(full, c)
		}
	}
	leaseID := b.ids.v7(now)
	if len(full) == 0 {
		// A subscriptionMode=new group whose partition holds only older
		// messages: the broker claims the partition and returns nothing.
		first := claims[0].p
		return obj{
			"consumerGroup": g.name, "leaseId": leaseID, "messages": emptyList(),
			"partition": first.name, "partitionId": first.id, "partitionsClaimed": len(claims),
			"queue": q.name, "success": true,
		}
	}
	if autoAck {
		leaseID = ""
	} else {
		b.gcLeasesLocked(t, now)
		l := &lease{id: leaseID, group: g.name, q: q, expiresAt: now.Add(time.Duration(q.opts.leaseTime) * time.Second)}
		t.leases[leaseID] = l
		for _, c := range full {
			lp := &leasePart{p: c.p, msgIDs: make(map[string]bool), size: len(c.msgs)}
			for _, m := range c.msgs {
				lp.msgIDs[m.id] = true
			}
			l.parts = append(l.parts, lp)
			c.p.cursor(g.name).lease = l
		}
	}
	msgs := make([]any, 0)
	discard := autoAck && b.opts.DiscardCompleted && g.name == QueueMode
	for _, c := range full {
		cur := c.p.cursor(g.name)
		cur.batches++
		c.p.lastActivity = now
		for _, m := range c.msgs {
			if autoAck {
				cur.state(m.id).done = doneCompleted
				cur.consumed++
				cur.lastConsumed = now
			}
			msgs = append(msgs, obj{
				"consumerGroup": g.name, "createdAt": fmtMicro(m.createdAt), "data": m.data,
				"id": m.id, "leaseId": leaseID, "partition": c.p.name, "partitionId": c.p.id,
				"producerSub": m.producerSubJSON(), "traceId": m.traceID, "transactionId": m.txn,
			})
			if discard {
				c.p.removeMessage(m)
			}
		}
	}
	return obj{
		"consumerGroup": g.name, "leaseId": leaseID, "messages": msgs,
		"partition": full[0].p.name, "partitionId": full[0].p.id, "partitionsClaimed": len(full),
		"queue": q.name, "success": true,
	}
}

// ensureGroup returns q's consumer group name, registering it on first use.
func (q *queue) ensureGroup(name, subMode string, now time.Time) *group {
	g := q.groups[name]
	if g == nil {
		g = &group{name: name, mode: "all", createdAt: now}
		if name != QueueMode && subMode == "new" {
			g.mode = "new"
			g.subscribedAt = now
		}
		q.groups[name] = g
	}
	return g
}

// orderedPartitions returns q's partitions in the order a pop considers
// them: by partition id like the broker, or by Options.PartitionOrder.
func (b *Broker) orderedPartitions(q *queue) []*partition {
	ps := append([]*partition(nil), q.partList...)
	sort.SliceStable(ps, func(i, j int) bool { return b.partitionLess(ps[i], ps[j]) })
	return ps
}

// partitionLess orders two partitions of one queue: by id like the broker,
// or by Options.PartitionOrder.
func (b *Broker) partitionLess(x, y *partition) bool {
	if less := b.opts.PartitionOrder; less != nil {
		return less(x.q.name, x.name, y.name)
	}
	return x.id < y.id
}

// ready reports whether group g may receive m now, ignoring subscriptions.
func (p *partition) ready(g string, m *message, now time.Time) bool {
	if c := p.cursors[g]; c != nil {
		if s := c.states[m.id]; s != nil && (s.done != notDone || now.Before(s.retryAt)) {
			return false
		}
	}
	if d := p.q.opts.delayedProcessing; d > 0 && now.Before(m.createdAt.Add(time.Duration(d)*time.Second)) {
		return false
	}
	return true
}

// hasAvailable reports whether p holds a message group g may receive.
func (p *partition) hasAvailable(g string, now time.Time) bool {
	for _, m := range p.msgs {
		if p.ready(g, m, now) {
			return true
		}
	}
	return false
}

// collect takes up to n messages of p for group g, in order. Messages older
// than a subscriptionMode=new group's subscription are skipped for good.
func (p *partition) collect(g *group, n int, now time.Time) []*message {
	var out []*message
	for _, m := range p.msgs {
		if len(out) == n {
			break
		}
		if !p.ready(g.name, m, now) {
			continue
		}
		if g.mode == "new" && m.createdAt.Before(g.subscribedAt) {
			p.cursor(g.name).state(m.id).done = doneSkipped
			continue
		}
		out = append(out, m)
	}
	return out
}

// gcLeasesLocked forgets expired leases.
func (b *Broker) gcLeasesLocked(t *tenant, now time.Time) {
	for id, l := range t.leases {
		if !now.Before(l.expiresAt) {
			delete(t.leases, id)
		}
	}
}
