package fakebroker

import (
	"encoding/json"
	"sort"
	"time"
)

// traceEvent is one recorded trace event of a message.
type traceEvent struct {
	id          string
	partitionID string
	txn         string
	group       string
	eventType   string
	names       []string
	data        json.RawMessage
	createdAt   time.Time
}

// handleTraceRecord serves POST /api/v1/traces.
func (b *Broker) handleTraceRecord(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	txn, okT := asString(m["transactionId"])
	pid, okP := asString(m["partitionId"])
	if !okT || !okP || txn == "" || pid == "" {
		badRequest(rc.w, "transactionId and partitionId are required")
		return
	}
	var names []string
	if s, ok := asString(m["traceNames"]); ok {
		names = []string{s}
	} else if arr, ok := asArray(m["traceNames"]); ok {
		for _, r := range arr {
			if s, ok := asString(r); ok {
				names = append(names, s)
			}
		}
	}
	ev := &traceEvent{
		id: newUUIDv4(), partitionID: pid, txn: txn,
		group:     asStringOr(m["consumerGroup"], QueueMode),
		eventType: asStringOr(m["eventType"], "info"),
		names:     names, data: compactJSON(m["data"]), createdAt: time.Now(),
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	t.traces = append(t.traces, ev)
	b.mu.Unlock()
	rc.ok(obj{"success": true, "traceId": ev.id})
}

func (ev *traceEvent) toJSON() obj {
	names := make([]any, 0, len(ev.names))
	for _, n := range ev.names {
		names = append(names, n)
	}
	return obj{
		"consumer_group": ev.group, "created_at": fmtMilli(ev.createdAt), "data": ev.data,
		"event_type": ev.eventType, "id": ev.id, "trace_names": names, "worker_id": "1",
	}
}

// handleTracesByMessage serves GET /api/v1/traces/:partitionId/:transactionId.
func (b *Broker) handleTracesByMessage(rc *reqCtx) {
	pid, txn := rc.params["partitionId"], rc.params["transactionId"]
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	list := make([]any, 0)
	for _, ev := range t.traces {
		if ev.partitionID == pid && ev.txn == txn {
			list = append(list, ev.toJSON())
		}
	}
	b.mu.Unlock()
	rc.ok(obj{"traces": list})
}

// handleTracesByName serves GET /api/v1/traces/by-name/:traceName.
func (b *Broker) handleTracesByName(rc *reqCtx) {
	name := rc.params["traceName"]
	limit, offset := rc.queryInt("limit", 100), rc.queryInt("offset", 0)
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	var found []*traceEvent
	for _, ev := range t.traces {
		for _, n := range ev.names {
			if n == name {
				found = append(found, ev)
				break
			}
		}
	}
	from, to := page(len(found), offset, limit)
	list := make([]any, 0, to-from)
	for _, ev := range found[from:to] {
		o := ev.toJSON()
		o["partition_id"], o["transaction_id"] = ev.partitionID, ev.txn
		o["message_payload"], o["partition_name"], o["queue_name"] = nil, nil, nil
		if p, m := t.findMessage(ev.partitionID, ev.txn); m != nil {
			o["message_payload"], o["partition_name"], o["queue_name"] = m.data, p.name, p.q.name
		}
		list = append(list, o)
	}
	b.mu.Unlock()
	rc.ok(obj{"pagination": obj{"limit": limit, "offset": offset}, "total": len(found), "traces": list})
}

// handleTraceNames serves GET /api/v1/traces/names, most recently seen first.
func (b *Broker) handleTraceNames(rc *reqCtx) {
	limit, offset := rc.queryInt("limit", 100), rc.queryInt("offset", 0)
	type nameStats struct {
		name     string
		traces   int
		messages map[string]bool
		last     time.Time
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	byName := map[string]*nameStats{}
	for _, ev := range t.traces {
		for _, n := range ev.names {
			s := byName[n]
			if s == nil {
				s = &nameStats{name: n, messages: map[string]bool{}}
				byName[n] = s
			}
			s.traces++
			s.messages[ev.partitionID+"/"+ev.txn] = true
			if ev.createdAt.After(s.last) {
				s.last = ev.createdAt
			}
		}
	}
	b.mu.Unlock()
	all := make([]*nameStats, 0, len(byName))
	for _, s := range byName {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].last.Equal(all[j].last) {
			return all[i].last.After(all[j].last)
		}
		return all[i].name < all[j].name
	})
	from, to := page(len(all), offset, limit)
	list := make([]any, 0, to-from)
	for _, s := range all[from:to] {
		list = append(list, obj{
			"last_seen": fmtMilli(s.last), "message_count": len(s.messages),
			"trace_count": s.traces, "trace_name": s.name,
		})
	}
	rc.ok(obj{"pagination": obj{"limit": limit, "offset": offset}, "total": len(all), "trace_names": list})
}
