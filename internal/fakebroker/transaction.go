package fakebroker

import "time"

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
			items, _ := asArray(om["items"])
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

	b.mu.Lock()
	resp := b.applyTransactionLocked(b.tenantLocked(rc.tenant), txID, ops, time.Now())
	b.mu.Unlock()
	rc.ok(resp)
}

// applyTransactionLocked checks every ack first, so that a failing one
// leaves nothing applied, then applies all operations.
func (b *Broker) applyTransactionLocked(t *tenant, txID string, ops []txOp, now time.Time) obj {
	for i, op := range ops {
		if op.typ != "ack" {
			continue
		}
		if _, msg := t.findMessage(op.ack.partitionID, op.ack.txn); msg == nil {
			return txFailure(txID, "ACK operation failed: Message not found", obj{
				"dlq": false, "error": "Message not found", "index": i, "success": false,
				"transactionId": op.ack.txn, "type": "ack",
			})
		}
	}
	results := make([]any, 0, len(ops))
	for i, op := range ops {
		switch op.typ {
		case "ack":
			r := b.ackLocked(t, op.ack, now)
			results = append(results, obj{
				"dlq": r.dlq, "error": nil, "index": i, "success": true,
				"transactionId": op.ack.txn, "type": "ack",
			})
		case "push":
			for j := range op.items {
				it := &op.items[j]
				msg, p, _ := b.enqueueLocked(t, it, now)
				b.wakeLocked(t.id, it.queue)
				results = append(results, obj{
					"index": i, "messageId": msg.id, "partitionId": p.id, "queueName": it.queue,
					"success": true, "transactionId": msg.txn, "type": "push",
				})
			}
		}
	}
	return obj{"results": results, "success": true, "transactionId": txID}
}

func txFailure(txID, errMsg string, result obj) obj {
	return obj{"error": errMsg, "results": []any{result}, "success": false, "transactionId": txID}
}
