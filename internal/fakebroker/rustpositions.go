package fakebroker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// positionOp is one cursor write of a transaction's "positions" rider,
// as the raft-storage brokers take it (server/src/rsm/planner/positions.rs,
// parse_position_ops, and server/src/rsm/consume/txn.rs, which serves it).
type positionOp struct {
	queue, partition, group string
	offset                  *uint64 // nil forgets the position
}

// parsePositions reads the rider as parse_position_ops does: an array of
// at most 16384 objects with a non-empty string queue and consumerGroup, a
// required offset that is null or an unsigned integer below 2^63, and a
// metadata absent, null or a string of at most 4096 bytes; a partition or
// subscriptionMode that is no string is the default. msg is the refusal.
func parsePositions(raw json.RawMessage) (ops []positionOp, msg string) {
	items, ok := asArray(raw)
	if !ok {
		return nil, "positions must be an array"
	}
	if len(items) > 16384 {
		return nil, fmt.Sprintf("%d positions in one call, the ceiling is 16384", len(items))
	}
	for i, r := range items {
		bad := func(detail string) ([]positionOp, string) {
			return nil, "positions[" + strconv.Itoa(i) + "]: " + detail
		}
		m, ok := asObject(r)
		if !ok {
			return bad("a position is an object")
		}
		op := positionOp{
			queue:     asStringOr(m["queue"], ""),
			group:     asStringOr(m["consumerGroup"], ""),
			partition: asStringOr(m["partition"], ""),
		}
		if op.queue == "" {
			return bad("queue is required")
		}
		if op.group == "" {
			return bad("consumerGroup is required")
		}
		if op.partition == "" {
			op.partition = "Default"
		}
		off, present := m["offset"]
		switch {
		case !present:
			return bad("offset is required (null forgets the position)")
		case string(bytes.TrimSpace(off)) != "null":
			u, err := strconv.ParseUint(string(bytes.TrimSpace(off)), 10, 64)
			if err != nil || u > 1<<63-1 {
				return bad("offset is a non-negative integer or null")
			}
			op.offset = &u
		}
		if md, present := m["metadata"]; present && string(bytes.TrimSpace(md)) != "null" {
			s, isString := asString(md)
			if !isString {
				return bad("metadata is a string")
			}
			if len(s) > 4096 {
				return bad("metadata exceeds 4096 bytes")
			}
		}
		ops = append(ops, op)
	}
	return ops, ""
}

// rustPositionsRefusal is the answer to a transaction whose rider the
// receiver refuses: a client refusal in the raft-era {"error","code"}
// envelope. NOT CONFIRMED: the status; 400 is modelled.
func rustPositionsRefusal(rc *reqCtx, code, msg string) {
	writeJSON(rc.w, http.StatusBadRequest, obj{"code": code, "error": msg})
}

// missingPositionQueue is the first queue the positions name that t does
// not have, or "": a position never creates a queue.
func (t *tenant) missingPositionQueue(ops []positionOp) string {
	for _, op := range ops {
		if t.queues[op.queue] == nil {
			return op.queue
		}
	}
	return ""
}

// applyPositionsLocked writes the positions in order, as
// server/src/rsm/consume/txn.rs does: an offset is the next message the
// group reads on the partition (the messages before it are done for the
// group, any lease is released), creating the partition and registering
// the group on first contact; a null offset forgets the group's cursor.
// In the fake a partition's offsets are its messages' push order.
func (t *tenant) applyPositionsLocked(ops []positionOp, now time.Time) {
	for _, op := range ops {
		q := t.queues[op.queue]
		if op.offset == nil {
			if p := q.parts[op.partition]; p != nil {
				delete(p.cursors, op.group)
			}
			continue
		}
		p := t.partitionLocked(q, op.partition, now)
		c := &cursor{states: make(map[string]*msgState)}
		for i, m := range p.msgs {
			if uint64(i) >= *op.offset {
				break
			}
			c.state(m.id).done = doneSkipped
		}
		p.cursors[op.group] = c
		// The cursor row decides where the group reads from here on, so
		// it is registered as reading all (a "new" group would also skip
		// what the position left it).
		q.ensureGroup(op.group, "all", now)
	}
}
