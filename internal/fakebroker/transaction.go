package fakebroker

import (
	"encoding/json"
	"time"
)

// txOp is one validated operation of a transaction.
type txOp struct {
	typ   string
	ack   ackRequest
	items []pushItem
}

// handleTransaction serves POST /api/v1/transaction: ack and push
// operations applied all together or not at all.
func (b *Broker) handleTransaction(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	raw, ok := asArray(m["operations"])
	if !ok {
		badRequest(rc.w, "operations array required")
		return
	}
	if len(raw) == 0 {
		badRequest(rc.w, "operations array cannot be empty")
		return
	}
	txID := newUUIDv4()
	ops := make([]txOp, 0, len(raw))
	for i, r := range raw {
		om, _ := asObject(r)
		op := txOp{typ: asStringOr(om["type"], "")}
		switch op.typ {
		case "ack":
			op.ack = ackRequest{
				txn:         asStringOr(om["transactionId"], ""),
				partitionID: asStringOr(om["partitionId"], ""),
				leaseID:     asStringOr(om["leaseId"], ""),
				status:      asStringOr(om["status"], "completed"),
				errMsg:      asStringOr(om["error"], ""),
				group:       asStringOr(om["consumerGroup"], QueueMode),
			}
		case "push":
			// An operation without an items array is itself the item (the
			// flat form), as the broker reads it.
			items, hasItems := asArray(om["items"])
			if !hasItems {
				items = []json.RawMessage{r}
			}
			parsed, msg := parsePushItems(items, rc.producerSub)
			if msg != "" {
				rc.ok(txFailure(txID, "PUSH operation failed: "+msg, obj{
					"error": msg, "index": i, "success": false, "type": "push",
				}))
				return
			}
			op.items = parsed
		default:
			rc.ok(txFailure(txID, "Unknown operation type: "+op.typ, obj{
				"error": "Unknown operation type", "index": i, "success": false, "type": op.typ,
			}))
			return
		}
		ops = append(ops, op)
	}

	// The raft-storage brokers' cursor writes ride beside the operations
	// (rustpositions.go); 0.15.1 ignores the member.
	var positions []positionOp
	if raw, present := m["positions"]; present && rc.rust {
		var msg string
		if positions, msg = parsePositions(raw); msg != "" {
			rustPositionsRefusal(rc, "bad_request", msg)
			return
		}
	}

	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	if q := t.missingPositionQueue(positions); q != "" {
		b.mu.Unlock()
		rustPositionsRefusal(rc, "queue_not_found", "queue "+q+" does not exist")
		return
	}
	now := time.Now()
	resp := b.applyTransactionLocked(t, txID, ops, now)
	if resp["success"] == true {
		t.applyPositionsLocked(positions, now)
	}
	b.mu.Unlock()
	rc.ok(resp)
}

// duplicateKeyError is the broker's answer to a transaction that pushes a
// transaction id its partition already holds (or holds twice): PostgreSQL's
// unique violation, which rolls the whole transaction back.
const duplicateKeyError = `duplicate key value violates unique constraint "messages_partition_transaction_unique"`

// applyTransactionLocked applies all operations or none, as the broker's
// single SQL function does (measured on 0.15.1): results are numbered in
// the order the operations' items are applied, and a failing ack or a
// duplicate push rolls everything back; the failure lists the results
// before it (their ids were rolled back too).
func (b *Broker) applyTransactionLocked(t *tenant, txID string, ops []txOp, now time.Time) obj {
	if failure := t.transactionFailure(ops); failure != nil {
		failure["transactionId"] = txID
		return failure
	}
	results := make([]any, 0, len(ops))
	for _, op := range ops {
		switch op.typ {
		case "ack":
			r := b.ackLocked(t, op.ack, now)
			results = append(results, obj{
				"dlq": r.dlq, "error": nil, "index": len(results), "success": true,
				"transactionId": op.ack.txn, "type": "ack",
			})
		case "push":
			for j := range op.items {
				it := &op.items[j]
				msg, p, _ := b.enqueueLocked(t, it, now)
				b.wakeLocked(t.id, it.queue)
				results = append(results, obj{
					"index": len(results), "messageId": msg.id, "partitionId": p.id, "queueName": it.queue,
					"success": true, "transactionId": msg.txn, "type": "push",
				})
			}
		}
	}
	return obj{"results": results, "success": true, "transactionId": txID}
}

// transactionFailure is the answer (less its transactionId) of a
// transaction the broker would roll back, or nil: the first ack of a
// message it does not have, or the first push of a transaction id the
// partition holds or that the transaction repeats. Its results are those
// before the failure, as the broker lists them.
func (t *tenant) transactionFailure(ops []txOp) obj {
	seen := map[[3]string]bool{}
	var before []any
	failAt := -1 // results before the failure
	errMsg := ""
	var failed obj
	n := 0
scan:
	for _, op := range ops {
		switch op.typ {
		case "ack":
			if _, msg := t.findMessage(op.ack.partitionID, op.ack.txn); msg == nil {
				failAt, errMsg = n, "ACK operation failed: Message not found"
				failed = obj{"dlq": false, "error": "Message not found", "index": n, "success": false,
					"transactionId": op.ack.txn, "type": "ack"}
				break scan
			}
			n++
		case "push":
			for _, it := range op.items {
				if it.txn != "" {
					key := [3]string{it.queue, it.partition, it.txn}
					if seen[key] || t.holdsTxn(it.queue, it.partition, it.txn) {
						failAt, errMsg = n, duplicateKeyError
						break scan
					}
					seen[key] = true
				}
				n++
			}
		}
	}
	if failAt < 0 {
		return nil
	}
	// The results before the failure, with the ids the rolled-back
	// operations were given.
	for _, op := range ops {
		if len(before) == failAt {
			break
		}
		switch op.typ {
		case "ack":
			before = append(before, obj{"dlq": false, "error": nil, "index": len(before), "success": true,
				"transactionId": op.ack.txn, "type": "ack"})
		case "push":
			for _, it := range op.items {
				if len(before) == failAt {
					break
				}
				pid := newUUIDv4()
				if q := t.queues[it.queue]; q != nil && q.parts[it.partition] != nil {
					pid = q.parts[it.partition].id
				}
				txn := it.txn
				if txn == "" {
					txn = newUUIDv4()
				}
				before = append(before, obj{"index": len(before), "messageId": newUUIDv4(), "partitionId": pid,
					"queueName": it.queue, "success": true, "transactionId": txn, "type": "push"})
			}
		}
	}
	if failed != nil {
		before = append(before, failed)
	}
	return obj{"error": errMsg, "results": before, "success": false}
}

// holdsTxn reports whether the named partition already holds a message with
// transaction id txn.
func (t *tenant) holdsTxn(queue, partition, txn string) bool {
	q := t.queues[queue]
	if q == nil || q.parts[partition] == nil {
		return false
	}
	return q.parts[partition].byTxn[txn] != nil
}

func txFailure(txID, errMsg string, result obj) obj {
	return obj{"error": errMsg, "results": []any{result}, "success": false, "transactionId": txID}
}
