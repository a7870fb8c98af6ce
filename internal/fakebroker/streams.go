package fakebroker

import (
	"encoding/json"
	"sort"
	"time"
)

// streamQuery is a registered streaming query and its per-partition state.
type streamQuery struct {
	id         string
	name       string
	configHash string
	state      map[string]map[string]*stateRow // partition id -> key -> row
}

type stateRow struct {
	value     json.RawMessage
	updatedAt time.Time
}

// queryByID finds a tenant's stream query by id.
func (t *tenant) queryByID(id string) *streamQuery {
	for _, s := range t.streams {
		if s.id == id {
			return s
		}
	}
	return nil
}

// handleStreamRegister serves POST /streams/v1/queries.
func (b *Broker) handleStreamRegister(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	name, ok := asString(m["name"])
	if !ok || name == "" {
		badRequest(rc.w, "name is required")
		return
	}
	hash := asStringOr(m["config_hash"], "")
	reset := asBool(m["reset"], false)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	s := t.streams[name]
	fresh := s == nil
	if fresh {
		s = &streamQuery{id: newUUIDv4(), name: name, configHash: hash, state: map[string]map[string]*stateRow{}}
		t.streams[name] = s
	} else if s.configHash != hash {
		if !reset {
			b.mu.Unlock()
			rc.ok(obj{
				"error": "config_hash mismatch: operator chain changed for queryId '" + name +
					"'. Pass reset:true to wipe existing state, or use a new queryId.",
				"name": name, "query_id": s.id, "success": false,
			})
			return
		}
		s.configHash = hash
		s.state = map[string]map[string]*stateRow{}
	}
	id := s.id
	b.mu.Unlock()
	rc.ok(obj{"config_hash": hash, "fresh": fresh, "name": name, "query_id": id, "reset": reset, "success": true})
}

// handleStreamCycle serves POST /streams/v1/cycle: state operations, sink
// pushes and a source ack applied together, or not at all when the ack fails.
func (b *Broker) handleStreamCycle(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	qid, pid, ok := streamTarget(rc, m)
	if !ok {
		return
	}
	ops, _ := asArray(m["state_ops"])
	rawItems, _ := asArray(m["push_items"])
	items, msg := parsePushItems(rawItems, rc.producerSub)
	if msg != "" {
		badRequest(rc.w, msg)
		return
	}
	group := asStringOr(m["consumer_group"], QueueMode)
	ackBody, hasAck := asObject(m["ack"])

	b.mu.Lock()
	resp := b.cycleLocked(b.tenantLocked(rc.tenant), cycleRequest{
		queryID: qid, partitionID: pid, group: group, ops: ops, items: items,
		ack: ackBody, hasAck: hasAck,
	}, time.Now())
	b.mu.Unlock()
	rc.ok(resp)
}

// cycleRequest is a validated streams cycle.
type cycleRequest struct {
	queryID, partitionID, group string
	ops                         []json.RawMessage
	items                       []pushItem
	ack                         map[string]json.RawMessage
	hasAck                      bool
}

// cycleLocked runs a streams cycle; a failing ack leaves nothing applied.
func (b *Broker) cycleLocked(t *tenant, cr cycleRequest, now time.Time) obj {
	resp := obj{
		"ack_result": nil, "partition_id": cr.partitionID, "push_results": emptyList(),
		"query_id": cr.queryID, "queueName": nil, "state_ops_applied": len(cr.ops), "success": false,
	}
	p := t.parts[cr.partitionID]
	if p != nil {
		resp["queueName"] = p.q.name
	}
	var target *message
	if cr.hasAck {
		if p != nil {
			target = p.byTxn[asStringOr(cr.ack["transactionId"], "")]
		}
		if target == nil {
			resp["error"] = "Message not found"
			return resp
		}
	}
	s := t.queryByID(cr.queryID)
	if s == nil {
		resp["error"] = "Query not found"
		return resp
	}
	rows := s.state[cr.partitionID]
	if rows == nil {
		rows = map[string]*stateRow{}
		s.state[cr.partitionID] = rows
	}
	for _, raw := range cr.ops {
		om, _ := asObject(raw)
		key := asStringOr(om["key"], "")
		if asStringOr(om["type"], "") == "delete" {
			delete(rows, key)
		} else {
			rows[key] = &stateRow{value: compactJSON(om["value"]), updatedAt: now}
		}
	}
	results, _ := b.pushLocked(t, cr.items, now)
	resp["push_results"] = results
	if target != nil {
		status := asStringOr(cr.ack["status"], "completed")
		count, released, dlq := b.ackThroughLocked(t, p, target, cr.group, status, now)
		resp["ack_result"] = obj{"count": count, "dlq": dlq, "lease_released": released, "success": true}
	}
	resp["success"] = true
	return resp
}

// ackThroughLocked acknowledges target and every earlier message of p that
// group g has not finished, as a streams cycle does (it acks up to a
// position). It returns how many messages it acknowledged.
func (b *Broker) ackThroughLocked(t *tenant, p *partition, target *message, g, status string, now time.Time) (count int, released, dlq bool) {
	for _, m := range p.msgs {
		if p.doneWith(g, m) == notDone || m == target {
			r := b.ackLocked(t, ackRequest{txn: m.txn, partitionID: p.id, status: status, group: g}, now)
			count++
			released = released || r.leaseReleased
			dlq = dlq || r.dlq
		}
		if m == target {
			break
		}
	}
	if c := p.cursors[g]; c != nil && !c.lease.activeOn(p, now) {
		released = true
	}
	return count, released, dlq
}

// handleStreamStateGet serves POST /streams/v1/state/get.
func (b *Broker) handleStreamStateGet(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	qid, pid, ok := streamTarget(rc, m)
	if !ok {
		return
	}
	var keys []string
	if arr, ok := asArray(m["keys"]); ok {
		for _, r := range arr {
			if k, ok := asString(r); ok {
				keys = append(keys, k)
			}
		}
	}
	b.mu.Lock()
	var rows map[string]*stateRow
	if s := b.tenantLocked(rc.tenant).queryByID(qid); s != nil {
		rows = s.state[pid]
	}
	if keys == nil {
		for k := range rows {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	list := make([]any, 0, len(keys))
	for _, k := range keys {
		if r := rows[k]; r != nil {
			list = append(list, obj{"key": k, "updated_at": r.updatedAt.UTC().Format(layoutOffset), "value": r.value})
		}
	}
	b.mu.Unlock()
	rc.ok(obj{"rows": list, "success": true})
}

// streamTarget reads the query_id and partition_id every stream route
// requires, answering 400 when one is missing.
func streamTarget(rc *reqCtx, m map[string]json.RawMessage) (qid, pid string, ok bool) {
	qid, _ = asString(m["query_id"])
	if qid == "" {
		badRequest(rc.w, "query_id is required")
		return "", "", false
	}
	pid, _ = asString(m["partition_id"])
	if pid == "" {
		badRequest(rc.w, "partition_id is required")
		return "", "", false
	}
	return qid, pid, true
}
