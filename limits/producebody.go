package limits

import (
	"strconv"

	"github.com/queengate/queengate/internal/jsonscan"
)

// The produce bodies are read here, once, and what is read is what
// admission, the limits and billing all use. The rule is the gateway's
// fail-closed rule: a body is either read exactly as the broker (0.15.1)
// reads it, or refused (the caller answers 400 and forwards nothing). So:
//
//   - the body must pass jsonscan.Check first: well-formed JSON, valid UTF-8
//     (the broker crashes on anything else), no byte-order mark, nesting
//     within jsonscan.DefaultMaxDepth. After that the walkers in jsonscan
//     read it in place without decoding or copying it;
//   - object keys match exactly and the last of duplicated keys wins, as in
//     the broker's JSON library;
//   - an item without "payload" is an item: the broker stores it with an
//     empty object as its payload, so it is counted, capped and billed like
//     any other, with the 2 bytes of "{}" as its size;
//   - a shape the broker refuses with its own 400 is refused here too, with
//     a message that names the item and what is wrong with it.

// BodyError is a produce body of a shape the gateway refuses (400).
type BodyError struct{ Message string }

func (e *BodyError) Error() string { return e.Message }

// missingPayloadBytes is the size of the payload the broker stores for an
// item without one: the empty object, "{}".
const missingPayloadBytes = 2

// topLevel checks body and returns the raw text of the last member named
// field of its top-level object (nil when absent). isObject is false when
// the body is valid JSON but not an object.
func topLevel(body []byte, field string) (value []byte, isObject bool, err error) {
	if err := jsonscan.Check(body); err != nil {
		return nil, false, err
	}
	i := jsonscan.SkipSpace(body, 0)
	if body[i] != '{' {
		return nil, false, nil
	}
	for it := jsonscan.Object(body[i:]); ; {
		k, v, more := it.Next()
		if !more {
			return value, true, nil
		}
		if keyIs(k, field) {
			value = v
		}
	}
}

func isArray(v []byte) bool  { return len(v) > 0 && v[0] == '[' }
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }
func isNull(v []byte) bool   { return string(v) == "null" }

// ParsePush reads a POST /api/v1/push body: an object with an "items"
// array, each item an object with a string "queue", an optional string
// "partition" (absent or null: "Default"), an optional string
// "transactionId" and an optional "payload" (any value). Other members are
// ignored. Anything else is a *BodyError or a *jsonscan.SyntaxError.
func ParsePush(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	items, isObj, err := topLevel(body, "items")
	if err != nil {
		return ProduceBatch{}, err
	}
	if !isObj {
		return ProduceBatch{}, &BodyError{"push body must be a JSON object with an items array"}
	}
	if !isArray(items) {
		return ProduceBatch{}, &BodyError{"items array is required"}
	}
	var names nameBuf
	for it := jsonscan.Array(items); ; {
		elem, more := it.Next()
		if !more {
			return b, nil
		}
		if err := names.addPushItem(&b, elem, "item "+strconv.Itoa(b.Items)); err != nil {
			return ProduceBatch{}, err
		}
	}
}

// ParseTransaction reads a POST /api/v1/transaction body: an object with
// an "operations" array. An operation whose "type" is "ack" adds nothing;
// otherwise an operation with an "items" array adds each item (push items
// as in ParsePush); otherwise one with a "queue" is one item of its own
// (the flat form: a string queue, an optional partition and payload);
// anything else adds nothing. Items are numbered across operations.
func ParseTransaction(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	ops, isObj, err := topLevel(body, "operations")
	if err != nil {
		return ProduceBatch{}, err
	}
	if !isObj {
		return ProduceBatch{}, &BodyError{"transaction body must be a JSON object with an operations array"}
	}
	if !isArray(ops) {
		return ProduceBatch{}, &BodyError{"operations array required"}
	}
	if it := jsonscan.Array(ops); !hasElement(&it) {
		return ProduceBatch{}, &BodyError{"operations array cannot be empty"}
	}
	var names nameBuf
	opIndex := 0
	for it := jsonscan.Array(ops); ; opIndex++ {
		op, more := it.Next()
		if !more {
			return b, nil
		}
		if err := names.addOperation(&b, op, opIndex); err != nil {
			return ProduceBatch{}, err
		}
	}
}

// addOperation adds the items of one transaction operation.
func (n *nameBuf) addOperation(b *ProduceBatch, op []byte, opIndex int) error {
	if !isObject(op) {
		return nil // the broker rejects the transaction; nothing is stored
	}
	var typ, items, queue []byte
	for it := jsonscan.Object(op); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "type"):
			typ = v
		case keyIs(k, "items"):
			items = v
		case keyIs(k, "queue"):
			queue = v
		}
	}
	if t, isString := n.text(0, typ); isString && string(t) == "ack" {
		return nil
	}
	where := "operation " + strconv.Itoa(opIndex)
	if isArray(items) {
		for it := jsonscan.Array(items); ; {
			elem, more := it.Next()
			if !more {
				return nil
			}
			if err := n.addPushItem(b, elem, where+", item "+strconv.Itoa(b.Items)); err != nil {
				return err
			}
		}
	}
	if queue == nil {
		return nil
	}
	return n.addPushItem(b, op, where)
}

// addPushItem reads one push item and counts it; where names it in a
// refusal.
func (n *nameBuf) addPushItem(b *ProduceBatch, item []byte, where string) error {
	if !isObject(item) {
		return &BodyError{where + " is not an object"}
	}
	var queue, part, txn, payload []byte
	for it := jsonscan.Object(item); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "queue"):
			queue = v
		case keyIs(k, "partition"):
			part = v
		case keyIs(k, "transactionId"):
			txn = v
		case keyIs(k, "payload"):
			payload = v
		}
	}
	if queue == nil {
		return &BodyError{where + " has no queue"}
	}
	q, isString := n.text(0, queue)
	if !isString {
		return &BodyError{where + ": queue must be a string"}
	}
	p, isString := n.partition(part)
	if !isString {
		return &BodyError{where + ": partition must be a string"}
	}
	if txn != nil && !isNull(txn) && txn[0] != '"' {
		return &BodyError{where + ": transactionId must be a string"}
	}
	size := len(payload)
	if payload == nil {
		size = missingPayloadBytes
	}
	b.add(q, p, size, b.Items)
	return nil
}

// ParseEphemeralCount reads a POST /api/v1/ephemeral/push body
// ({queue, partition?, messages:[...]}) and returns the number of elements
// of "messages"; the elements are not inspected.
func ParseEphemeralCount(body []byte) (int, error) {
	messages, isObj, err := topLevel(body, "messages")
	if err != nil {
		return 0, err
	}
	if !isObj || !isArray(messages) {
		return 0, &BodyError{"ephemeral push body must be a JSON object with a messages array"}
	}
	count := 0
	for it := jsonscan.Array(messages); ; count++ {
		if _, more := it.Next(); !more {
			return count, nil
		}
	}
}

// ParseCycle reads the sink items of a POST /streams/v1/cycle body
// ("push_items") the way the broker packs them: each element on its own, so
// a bad element is skipped and its neighbours kept. An element counts when
// it is an object with a non-empty string "queue"; its partition is a
// non-empty string "partition", else "Default"; its payload size is the raw
// length of "payload", else of "data" (the broker's alias), else 0.
// Heaviest.Index is the element's position in push_items, skipped elements
// included. A cycle that is not an object, or has no push_items (or null),
// pushes nothing; push_items of another type is refused, since what the
// broker would do with it is not known.
func ParseCycle(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	items, isObj, err := topLevel(body, "push_items")
	switch {
	case err != nil:
		return ProduceBatch{}, err
	case !isObj || items == nil || isNull(items):
		return b, nil
	case !isArray(items):
		return ProduceBatch{}, &BodyError{"push_items must be an array"}
	}
	var names nameBuf
	pos := 0
	for it := jsonscan.Array(items); ; pos++ {
		elem, more := it.Next()
		if !more {
			return b, nil
		}
		names.addSinkItem(&b, elem, pos)
	}
}

// addSinkItem counts one element of a cycle's push_items at position pos.
func (n *nameBuf) addSinkItem(b *ProduceBatch, elem []byte, pos int) {
	if !isObject(elem) {
		return
	}
	var queue, part, payload, alias []byte
	for it := jsonscan.Object(elem); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "queue"):
			queue = v
		case keyIs(k, "partition"):
			part = v
		case keyIs(k, "payload"):
			payload = v
		case keyIs(k, "data"):
			alias = v
		}
	}
	q, isString := n.text(0, queue)
	if !isString || len(q) == 0 {
		return
	}
	p, isString := n.text(1, part)
	if !isString || len(p) == 0 {
		p = defaultPartition
	}
	if payload == nil {
		payload = alias
	}
	b.add(q, p, len(payload), pos)
}

// hasElement reports whether an array iterator has an element left.
func hasElement(it *jsonscan.ArrayIter) bool {
	_, more := it.Next()
	return more
}
