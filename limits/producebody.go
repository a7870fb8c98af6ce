package limits

import (
	"errors"
	"strconv"

	"github.com/queengate/queengate/wire"
)

// The produce bodies are read here, once, and what is read is what
// admission, the limits and billing all use. The rule is the gateway's
// fail-closed rule: a body is either read exactly as the broker (0.15.1)
// reads it, or refused (the caller answers 400 and forwards nothing). So:
//
//   - the body must pass wire.CheckStored's rules: well-formed JSON, valid
//     UTF-8 (the broker crashes on anything else), no byte-order mark,
//     nesting within wire.DefaultMaxDepth, no \u0000 (the broker's
//     database cannot store it). A push or a transaction is checked in the
//     one pass that reads it (producefast.go); every other body is checked
//     first and then read in place by wire's walkers, without decoding or
//     copying it;
//   - object keys match exactly and the last of duplicated keys wins, as in
//     the broker's JSON library;
//   - an item without "payload" is an item: the broker stores it with an
//     empty object as its payload, so it is counted, capped and billed like
//     any other, with the 2 bytes of "{}" as its size;
//   - a shape the broker refuses with its own 400 is refused here too, with
//     a message that names the item and what is wrong with it;
//   - so is a value the broker takes but its schema cannot hold (schema.go):
//     the broker would answer "buffered" and retry the batch forever.

// BodyError is a produce body of a shape the gateway refuses (400).
type BodyError struct{ Message string }

func (e *BodyError) Error() string { return e.Message }

// missingPayloadBytes is the size of the payload the broker stores for an
// item without one: the empty object, "{}".
const missingPayloadBytes = 2

// walkTop checks body and walks its top-level object in one pass, calling
// read with the index of the value of every member named field (the last
// one is what counts, as at the broker); read returns the index just past
// the value. isObject is false when the body is valid JSON but not an
// object.
func walkTop(body []byte, field string, read func(at int) int) (isObject bool, err error) {
	return walkTopFields(body, []string{field}, func(_, at int) int { return read(at) })
}

// walkTopFields is walkTop for several fields: read is told which one
// (its index in fields).
func walkTopFields(body []byte, fields []string, read func(field, at int) int) (isObject bool, err error) {
	if err := wire.CheckStored(body); err != nil {
		return false, err
	}
	return walkCheckedTop(body, fields, read), nil
}

// walkCheckedTop is walkTopFields over a body that passed wire.Check.
func walkCheckedTop(body []byte, fields []string, read func(field, at int) int) (isObject bool) {
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return false
	}
	wire.Members(body, i, func(k []byte, at int) int {
		for f, name := range fields {
			if wire.UnescapedIs(k, name) {
				return read(f, at)
			}
		}
		return wire.ValueEnd(body, at)
	})
	return true
}

// checkStoredWalkable reports whether body may be walked (it passes
// wire.Check, refused if at all only for U+0000), and wire.CheckStored's
// refusal of it. A reader whose caller decides from a body's structure reads
// that structure even when the body is refused for what the broker cannot
// store, so that no step's verdict depends on where a U+0000 is.
func checkStoredWalkable(body []byte) (walkable bool, err error) {
	err = wire.CheckStored(body)
	if err == nil {
		return true, nil
	}
	var syntax *wire.SyntaxError
	return errors.As(err, &syntax) && syntax.Problem == wire.ProblemNUL && wire.Check(body) == nil, err
}

// itemRef names a push item in a refusal: "item 3", "operation 1, item 0",
// "operation 2" for a flat transaction operation, or "push_items[4]" for a
// streams cycle's sink item (sink set). It is formatted only when something
// is refused.
type itemRef struct {
	op, item int
	sink     bool
}

func (r itemRef) String() string {
	switch {
	case r.sink:
		return "push_items[" + strconv.Itoa(r.item) + "]"
	case r.op < 0:
		return "item " + strconv.Itoa(r.item)
	case r.item < 0:
		return "operation " + strconv.Itoa(r.op)
	}
	return "operation " + strconv.Itoa(r.op) + ", item " + strconv.Itoa(r.item)
}

// ParsePush reads a POST /api/v1/push body: an object with an "items"
// array, each item an object with a string "queue", an optional string
// "partition" (absent or null: "Default"), an optional string
// "transactionId" and an optional "payload" (any value). Other members are
// ignored. Anything else is a *BodyError or a *wire.SyntaxError.
func ParsePush(body []byte) (ProduceBatch, error) {
	var r produceReader
	return r.batch(r.push(body))
}

// ParseTransaction reads a POST /api/v1/transaction body: an object with
// a non-empty "operations" array. An operation whose "type" is "ack" adds
// nothing; otherwise an operation with an "items" array adds each item
// (push items as in ParsePush); otherwise one with a "queue" is one item
// of its own (the flat form: a string queue, an optional partition and
// payload); anything else adds nothing. Items are numbered across
// operations. A "positions" member beside "operations" adds nothing but
// must be what the broker takes (checkPositions), and an operation typed
// as a position is refused.
func ParseTransaction(body []byte) (ProduceBatch, error) {
	var r produceReader
	return r.batch(r.transaction(body))
}

// addPushItem reads the push item at body[at], counts it, and returns the
// index just past it; ref names it in a refusal.
func (n *nameBuf) addPushItem(b *ProduceBatch, body []byte, at int, ref itemRef) (int, error) {
	if body[at] != '{' {
		return wire.ValueEnd(body, at), &BodyError{ref.String() + " is not an object"}
	}
	var v pushFields
	end := wire.MemberValues(body, at, wire.PushItemMembers[:], v[:])
	return end, n.countPushItem(b, &v, 0, ref)
}

// addItems counts the checked array items of operation op's push items,
// stopping at the first refused.
func (n *nameBuf) addItems(b *ProduceBatch, items []byte, op int) error {
	var err error
	wire.Elements(items, 0, func(at int) int {
		if err != nil {
			return wire.ValueEnd(items, at)
		}
		var e int
		e, err = n.addPushItem(b, items, at, itemRef{op: op, item: b.Items})
		return e
	})
	return err
}

// The bits of countPushItem's plain.
const (
	plainQueue     uint8 = 1 << 0
	plainPartition uint8 = 1 << 1
	// canonicalTrace: the traceId is a canonical uuid in quotes, which
	// the broker stores.
	canonicalTrace uint8 = 1 << 2
)

// pushFields are the raw values (nil when absent) of a push item's
// queue, partition, transactionId, payload and traceId.
type pushFields [len(wire.PushItemMembers)][]byte

// countPushItem counts the push item whose members are v, or says why the
// broker would refuse it or could not store it. plain says which of the
// queue (bit 0) and partition (bit 1) are known to be checked strings
// without escapes, whose text is their raw bytes, and whether the traceId
// is known to be a canonical uuid (bit 2).
func (n *nameBuf) countPushItem(b *ProduceBatch, v *pushFields, plain uint8, ref itemRef) error {
	queue, part, txn, payload, trace := v[0], v[1], v[2], v[3], v[4]
	if queue == nil {
		return &BodyError{ref.String() + " has no queue"}
	}
	q, isString := queue, true
	if plain&plainQueue != 0 {
		q = queue[1 : len(queue)-1]
	} else {
		q, isString = n.text(0, queue)
	}
	if !isString {
		return &BodyError{ref.String() + ": queue must be a string"}
	}
	p := part
	if plain&plainPartition != 0 {
		p = part[1 : len(part)-1]
	} else {
		p, isString = n.partition(part)
	}
	if !isString {
		return &BodyError{ref.String() + ": partition must be a string"}
	}
	if txn != nil && !isNull(txn) && txn[0] != '"' {
		return &BodyError{ref.String() + ": transactionId must be a string"}
	}
	if plain&canonicalTrace != 0 {
		trace = nil // storable, as traceIDStorable would find again
	}
	if err := storableIDs(ref, q, p, txn, trace); err != nil {
		return err
	}
	size := len(payload)
	if payload == nil {
		size = missingPayloadBytes
	}
	if len(txn) > 2 && txn[0] == '"' {
		b.Identified++
	}
	b.add(q, p, size, b.Items)
	return nil
}

// storableIDs applies the schema's rules to an item's decoded queue and
// partition and its raw transactionId and traceId (nil when absent).
func storableIDs(ref itemRef, queue, partition, txn, trace []byte) *BodyError {
	switch {
	case nameTooLong(queue):
		return tooLongRefusal(ref, "queue")
	case nameTooLong(partition):
		return tooLongRefusal(ref, "partition")
	case txn != nil && txn[0] == '"' && rawStringTooLong(txn):
		return tooLongRefusal(ref, "transactionId")
	case !traceIDStorable(trace):
		return &BodyError{ref.String() + ": traceId must be a UUID (or empty), as the broker stores it"}
	}
	return nil
}

func isNull(v []byte) bool { return string(v) == "null" }

// ParseEphemeral reads a POST /api/v1/ephemeral/push body
// ({queue, partition?, messages:[...]}): each element of "messages" is an
// item, whose size is the length of its raw JSON text (the whole message,
// since what a newer broker keeps of it is not known; no smaller measure is
// safe). The batch has no pairs: ephemeral queues take no admission.
func ParseEphemeral(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	isArray := false
	isObj, err := walkTop(body, "messages", func(at int) int {
		b.reset()
		isArray = body[at] == '['
		if !isArray {
			return wire.ValueEnd(body, at)
		}
		return wire.Elements(body, at, func(at int) int {
			end := wire.ValueEnd(body, at)
			b.count(end-at, b.Items)
			return end
		})
	})
	switch {
	case err != nil:
		return ProduceBatch{}, err
	case !isObj || !isArray:
		return ProduceBatch{}, &BodyError{"ephemeral push body must be a JSON object with a messages array"}
	}
	return b, nil
}

// ReadOperations reads a POST /api/v1/kv or /api/v1/timers batch: a bare
// JSON array of operations, or an object with an "operations" array (the
// last one, as at the broker). Each operation is an item; its size is that
// of its largest member's raw JSON text (the value it stores, whatever the
// member is called: "value" for KV, the payload of a timer; a duplicated
// member's discarded values count too), or of the whole element when it is
// not an object. Any other body is refused: what the broker would store
// from it is not known.
//
// A caller that decides on the operations themselves (tenancy's carve-out
// and push-block rules) reads them in the same walk: each is called once
// for every operation, in order, with values[k] holding the raw text of
// the operation's last member named members[k] (nil when absent, or when
// the operation is not an object). isBatch reports that the body is JSON the
// gateway reads (wire.Check) and a batch, each called for every one of its
// operations; it is so for a batch refused only for U+0000 too, so that
// nothing decided from the operations depends on whether a value holds
// what the broker cannot store.
func ReadOperations(body []byte, members []string, values [][]byte, each func()) (b ProduceBatch, isBatch bool, err error) {
	walkable, err := checkStoredWalkable(body)
	if !walkable {
		return ProduceBatch{}, false, err
	}
	at := operationsAt(body)
	if at < 0 {
		if err == nil {
			err = errNotABatch
		}
		return ProduceBatch{}, false, err
	}
	b.reset()
	wire.Elements(body, at, func(at int) int {
		clear(values)
		end, size := at, 0
		if body[at] == '{' {
			end = wire.Members(body, at, func(name []byte, at int) int {
				e := wire.ValueEnd(body, at)
				size = max(size, e-at)
				for k, member := range members {
					if wire.UnescapedIs(name, member) {
						values[k] = body[at:e]
						break
					}
				}
				return e
			})
		} else {
			end = wire.ValueEnd(body, at)
			size = end - at
		}
		b.count(size, b.Items)
		if each != nil {
			each()
		}
		return end
	})
	if err != nil {
		b.Release()
		return ProduceBatch{}, true, err
	}
	return b, true, nil
}

// errNotABatch refuses a KV or timers body of another shape.
var errNotABatch = &BodyError{"a batch must be a JSON array of operations or an object with an operations array"}

// operationsAt is where the array of operations of a batch opens (a bare
// array, or the last "operations" member of an object, when it is an
// array), or -1. body has passed wire.Check.
func operationsAt(body []byte) int {
	i := wire.SkipSpace(body, 0)
	switch body[i] {
	case '[':
		return i
	case '{':
		at := -1
		wire.Members(body, i, func(name []byte, v int) int {
			if wire.UnescapedIs(name, "operations") {
				at = v
				if body[v] != '[' {
					at = -1
				}
			}
			return wire.ValueEnd(body, v)
		})
		return at
	}
	return -1
}

// ParseStoredValue reads a PUT /api/v1/kv/{ns}/{key} body: the value, one
// item of its own length. It need not be JSON, but it must not carry
// U+0000, raw or escaped, which the broker's database cannot store.
func ParseStoredValue(body []byte) (ProduceBatch, error) {
	if err := StoredTextError(body); err != nil {
		return ProduceBatch{}, err
	}
	var b ProduceBatch
	b.reset()
	b.count(len(body), 0)
	return b, nil
}

// StoredTextError refuses a body no walker reads that would hand the
// broker U+0000 (wire.NULAt); it returns nil for any other body.
func StoredTextError(body []byte) error {
	if at := wire.NULAt(body); at >= 0 {
		return &wire.SyntaxError{Problem: wire.ProblemNUL, Offset: int64(at)}
	}
	return nil
}

// ReadCycle reads the sink items of a POST /streams/v1/cycle body
// ("push_items"), and the size of the largest value its state_ops upsert,
// in one walk; it refuses a consumer_group longer than MaxNameChars. Sink
// items are read the way the broker packs them: each element on its own, so
// a bad element is skipped and its neighbours kept. An element counts when
// it is an object with a non-empty string "queue"; its partition is a
// non-empty string "partition", else "Default"; its payload size is the raw
// length of "payload", else of "data" (the broker's alias), else 0.
// Heaviest.Index is the element's position in push_items, skipped elements
// included. A cycle that is not an object, or has no push_items (or null),
// pushes nothing; push_items of another type is refused, since what the
// broker would do with it is not known.
//
// grows reports whether the cycle may push sink messages, for a push
// block: its push_items is a non-empty array (whatever its elements hold)
// or anything but absent, null or an array. It is read from a cycle
// refused for its items, its consumer_group or U+0000 too; a body that is
// not JSON the gateway reads grows, one that is not an object does not.
func ReadCycle(body []byte) (b ProduceBatch, grows bool, err error) {
	walkable, err := checkStoredWalkable(body)
	if !walkable {
		return ProduceBatch{}, true, err
	}
	b.reset()
	var names nameBuf
	kind := byte(0) // the first byte of the last push_items, 0 when absent
	elements := 0   // the elements of the last push_items
	var itemsErr error
	var group []byte           // the last consumer_group
	state := sizeRecord{-1, 0} // the largest state value of the last state_ops
	walkCheckedTop(body, cycleFields[:], func(field, at int) int {
		switch field {
		case 1:
			group = body[at:wire.ValueEnd(body, at)]
			return at + len(group)
		case 2:
			state = sizeRecord{-1, 0}
			if body[at] != '[' {
				return wire.ValueEnd(body, at)
			}
			pos := 0
			return wire.Elements(body, at, func(at int) int {
				pos++
				if body[at] != '{' {
					return wire.ValueEnd(body, at)
				}
				var v [1][]byte
				end := wire.MemberValues(body, at, []string{"value"}, v[:])
				if size := len(v[0]); v[0] != nil && size > state.bytes {
					state = sizeRecord{pos - 1, size}
				}
				return end
			})
		}
		b.reset()
		kind, elements = body[at], 0
		if kind != '[' {
			return wire.ValueEnd(body, at)
		}
		itemsErr = nil
		return wire.Elements(body, at, func(at int) int {
			elements++
			if itemsErr != nil {
				return wire.ValueEnd(body, at)
			}
			end, err := names.addSinkItem(&b, body, at, elements-1)
			itemsErr = err
			return end
		})
	})
	grows = kind == '[' && elements > 0 || kind != 0 && kind != '[' && kind != 'n'
	switch {
	case err != nil:
	case kind == '[' && itemsErr != nil:
		err = itemsErr
	case kind != 0 && kind != '[' && kind != 'n':
		err = &BodyError{"push_items must be an array"}
	case len(group) > 0 && group[0] == '"' && rawStringTooLong(group):
		err = &BodyError{"consumer_group is longer than " + strconv.Itoa(MaxNameChars) +
			" characters, more than the broker can store"}
	}
	if err != nil {
		b.Release()
		return ProduceBatch{}, grows, err
	}
	if kind != '[' {
		b.reset()
	}
	b.stateHeaviest = state
	return b, grows, nil
}

// cycleFields are the members of a cycle ReadCycle reads, by index:
// push_items (0), consumer_group (1; partition_consumers.consumer_group is
// varchar(255)) and state_ops (2; each op's value is a stored client value).
var cycleFields = [...]string{"push_items", "consumer_group", "state_ops"}

// addSinkItem counts the element of a cycle's push_items at body[at]
// (position pos) and returns the index just past it. An element the broker
// skips is skipped; one it pushes must hold only what its schema can store.
func (n *nameBuf) addSinkItem(b *ProduceBatch, body []byte, at, pos int) (int, error) {
	if body[at] != '{' {
		return wire.ValueEnd(body, at), nil
	}
	var v [6][]byte
	end := wire.MemberValues(body, at, []string{"queue", "partition", "payload", "data", "transactionId", "traceId"}, v[:])
	queue, part, payload, alias, txn, trace := v[0], v[1], v[2], v[3], v[4], v[5]
	q, isString := n.text(0, queue)
	if !isString || len(q) == 0 {
		return end, nil
	}
	p, isString := n.text(1, part)
	if !isString || len(p) == 0 {
		p = defaultPartition
	}
	if err := storableIDs(itemRef{item: pos, sink: true}, q, p, txn, trace); err != nil {
		return end, err
	}
	if payload == nil {
		payload = alias
	}
	b.add(q, p, len(payload), pos)
	return end, nil
}

// traceLimits are the columns a POST /api/v1/traces body's strings land in
// (record_trace in procedures/011_traces.sql): message_traces.transaction_id
// and consumer_group varchar(255), event_type varchar(100), worker_id
// varchar(255).
var traceLimits = [...]struct {
	field string
	chars int
}{{"transactionId", MaxNameChars}, {"consumerGroup", MaxNameChars}, {"eventType", 100}, {"workerId", MaxNameChars}}

// ParseTrace reads a POST /api/v1/traces body in one walk: an object whose
// strings must fit their columns (traceLimits); it is one item, whose size
// is that of its "data" (the value record_trace stores; absent, the 2
// bytes of the "{}" it stores instead). Any other body is refused: the
// broker stores nothing from it.
func ParseTrace(body []byte) (ProduceBatch, error) {
	var b ProduceBatch
	b.reset()
	if err := wire.CheckStored(body); err != nil {
		return ProduceBatch{}, err
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return ProduceBatch{}, &BodyError{"a trace must be a JSON object"}
	}
	var values [len(traceLimits)][]byte
	size := missingPayloadBytes
	wire.Members(body, i, func(k []byte, at int) int {
		e := wire.ValueEnd(body, at)
		if wire.UnescapedIs(k, "data") {
			size = e - at
		}
		for f := range traceLimits {
			if wire.UnescapedIs(k, traceLimits[f].field) {
				values[f] = body[at:e]
			}
		}
		return e
	})
	for f, v := range values {
		if len(v) > 0 && v[0] == '"' && len(v)-2 > traceLimits[f].chars && wire.StringChars(v) > traceLimits[f].chars {
			return ProduceBatch{}, &BodyError{traceLimits[f].field + " is longer than " + strconv.Itoa(traceLimits[f].chars) +
				" characters, more than the broker can store"}
		}
	}
	b.count(size, 0)
	return b, nil
}
