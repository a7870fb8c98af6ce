package limits

import "github.com/queengate/queengate/wire"

// The two-pass reading of push and transaction bodies: the whole text
// checked first (wire.CheckStored), then walked by wire's walkers over
// checked text. It was the gateway's reader before the one pass
// (producefast.go) decided every body; it stays here as the oracle the
// pass is held to, refusals' words included (FuzzProduceAgreesWithTwoPasses).

// parsePushReference is ParsePush's reading in two passes.
func parsePushReference(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	var names nameBuf
	var itemsErr error
	seen, isArray := false, false
	isObj, err := walkTop(body, "items", func(at int) int {
		b.reset()
		seen, isArray, itemsErr = true, body[at] == '[', nil
		if !isArray {
			return wire.ValueEnd(body, at)
		}
		return wire.Elements(body, at, func(at int) int {
			if itemsErr != nil {
				return wire.ValueEnd(body, at)
			}
			end, err := names.addPushItem(&b, body, at, itemRef{op: -1, item: b.Items})
			itemsErr = err
			return end
		})
	})
	if err != nil || !isObj || !seen || !isArray || itemsErr != nil {
		b.Release()
	}
	switch {
	case err != nil:
		return ProduceBatch{}, err
	case !isObj:
		return ProduceBatch{}, &BodyError{"push body must be a JSON object with an items array"}
	case !seen || !isArray:
		return ProduceBatch{}, &BodyError{"items array is required"}
	case itemsErr != nil:
		return ProduceBatch{}, itemsErr
	}
	return b, nil
}

// parseTransactionReference is ParseTransaction's reading in two passes.
func parseTransactionReference(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	var names nameBuf
	var opsErr error
	seen, isArray, ops := false, false, 0
	var positions []byte // the last "positions" member's raw value
	isObj, err := walkTopFields(body, []string{"operations", "positions"}, func(field, at int) int {
		if field == 1 {
			end := wire.ValueEnd(body, at)
			positions = body[at:end]
			return end
		}
		b.reset()
		seen, isArray, opsErr, ops = true, body[at] == '[', nil, 0
		if !isArray {
			return wire.ValueEnd(body, at)
		}
		return wire.Elements(body, at, func(at int) int {
			ops++
			if opsErr != nil {
				return wire.ValueEnd(body, at)
			}
			end, err := names.addOperation(&b, body, at, ops-1)
			opsErr = err
			return end
		})
	})
	if err != nil || !isObj || !seen || !isArray || ops == 0 || opsErr != nil {
		b.Release()
	}
	switch {
	case err != nil:
		return ProduceBatch{}, err
	case !isObj:
		return ProduceBatch{}, &BodyError{"transaction body must be a JSON object with an operations array"}
	case !seen || !isArray:
		return ProduceBatch{}, &BodyError{"operations array required"}
	case ops == 0:
		return ProduceBatch{}, &BodyError{"operations array cannot be empty"}
	case opsErr != nil:
		return ProduceBatch{}, opsErr
	}
	if positions != nil {
		if err := names.checkPositions(positions); err != nil {
			b.Release()
			return ProduceBatch{}, err
		}
	}
	return b, nil
}

// addOperation adds the items of the transaction operation at body[at]
// and returns the index just past it.
func (n *nameBuf) addOperation(b *ProduceBatch, body []byte, at, opIndex int) (int, error) {
	if body[at] != '{' {
		return wire.ValueEnd(body, at), nil // the broker rejects the transaction; nothing is stored
	}
	var v [3][]byte
	end := wire.MemberValues(body, at, []string{"type", "items", "queue"}, v[:])
	typ, items, queue := v[0], v[1], v[2]
	if n.isAck(typ) {
		return end, nil
	}
	if n.isPositionsType(typ) {
		return end, positionsOperationError(opIndex)
	}
	if len(items) > 0 && items[0] == '[' {
		return end, n.addItems(b, items, opIndex)
	}
	if queue == nil {
		return end, nil
	}
	_, err := n.addPushItem(b, body, at, itemRef{op: opIndex, item: -1})
	return end, err
}
