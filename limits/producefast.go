package limits

import (
	"github.com/queengate/queengate/wire"
)

// The push and transaction bodies are read here, in one pass that checks
// and counts at once: the structure the gateway reads (the top-level
// object, the items, their members) with wire's cursor, every other value
// by wire.SkipValid, which also ends a payload where its size is read.
// Every item is counted by countPushItem.
//
// The pass also decides every refusal, in the order the two-pass reading
// (check the whole text, then walk it) has: a text the broker cannot read
// or store (wire.CheckStored's refusal, which names the first bad byte)
// before the body's shape, and the shape before its items. So where the
// pass meets a bad byte, or refuses the shape, CheckStored looks for the
// body's first bad byte once more; an item's refusal is kept while the
// rest of the body is checked, and a later items or operations member
// replaces it, as the broker keeps the last of a repeated member.
// FuzzProduceAgreesWithTwoPasses holds the pass to that two-pass reading
// (kept in the tests as the oracle), refusals' words included, and
// FuzzParseProduce holds both to the broker model.

// Depths of the values the pass hands to wire.SkipValid: the containers
// open around them (the top-level object is 1).
const (
	topValueDepth    = 1 // a member of the top-level object
	pushValueDepth   = 3 // a member of a push item: top, items, item
	opValueDepth     = 3 // a member of an operation: top, operations, operation
	opItemValueDepth = 5 // a member of an operation's item: ..., items, item
	topElementDepth  = 2 // an element of a top-level member's array
	noOperation      = -1
)

// errUnreadable is the refusal of a body the pass stopped in but
// wire.CheckStored accepts: never expected (the two use one grammar), and
// refused rather than guessed at.
var errUnreadable = &BodyError{"the body could not be read"}

// The refusals of a body of another shape, made once: top takes one on
// every reading.
var (
	errPushNotObject        = &BodyError{"push body must be a JSON object with an items array"}
	errTransactionNotObject = &BodyError{"transaction body must be a JSON object with an operations array"}
)

// produceReader is one pass over a push or transaction body.
// It holds the batch and the names itself, and takes the body as an
// argument of its methods: the body leaks to wire's scanner and the
// names' buffers to the heap, and a pointer to the batch beside them in
// one struct would take the batch to the heap with them.
type produceReader struct {
	b     ProduceBatch
	names nameBuf
	// refused is the first refused item of the items (or operations)
	// being read; the items after it are only checked.
	refused error
	// deferItems counts an operation's items only once the operation is
	// read to its end. The pass counts them as they come when the type
	// came first (as the SDKs write it); an operation that repeats its
	// type or its items after that makes the pass start over this way.
	deferItems, startOver bool
}

// refusal is the refusal of a body the pass did not accept: the first
// bad byte of its text when it has one, else shape.
func refusal(body []byte, shape error) error {
	if err := wire.CheckStored(body); err != nil {
		return err
	}
	return shape
}

// top reads the body's top-level object: the value of each member named
// fields[k] by read(k, at), which returns the index just past it (-1 at a
// bad byte, or when the pass must start over); every other value is
// checked. It returns nil when the body is that object, read to its end
// (or the pass is to start over), and otherwise its refusal (notObject
// when it is JSON of another kind).
func (r *produceReader) top(body []byte, fields []string, notObject error, read func(field, at int) int) error {
	i := wire.SkipSpace(body, 0)
	if wire.At(body, i) != '{' {
		return refusal(body, notObject)
	}
	for i, more := wire.FirstIn(body, i, '}'); ; {
		if !more {
			if i < 0 || wire.SkipSpace(body, i) != len(body) {
				return refusal(body, errUnreadable)
			}
			return nil
		}
		name, escaped, at := wire.MemberName(body, i)
		if at < 0 {
			return refusal(body, errUnreadable)
		}
		field := -1
		for k, word := range fields {
			if wire.NameIs(name, escaped, word) {
				field = k
				break
			}
		}
		var end int
		if field >= 0 {
			end = read(field, at)
		} else {
			end = wire.SkipValid(body, at, topValueDepth, true)
		}
		if end < 0 {
			if r.startOver {
				return nil // the caller reads the body again
			}
			return refusal(body, errUnreadable)
		}
		if i, more = wire.NextIn(body, end, '}'); i < 0 {
			return refusal(body, errUnreadable)
		}
	}
}

var (
	pushTop        = []string{"items"}
	transactionTop = []string{"operations", "positions"}
)

// batch is what a reading that ended with err gives its caller: the
// batch read, or no batch and err.
func (r *produceReader) batch(err error) (ProduceBatch, error) {
	if err != nil {
		r.b.Release()
		return ProduceBatch{}, err
	}
	return r.b, nil
}

// push reads a push body (ParsePush).
func (r *produceReader) push(body []byte) error {
	r.b.reset()
	seen, isArray := false, false
	err := r.top(body, pushTop, errPushNotObject, func(_, at int) int {
		r.b.reset()
		r.refused = nil
		seen, isArray = true, wire.At(body, at) == '['
		if !isArray {
			return wire.SkipValid(body, at, topValueDepth, true)
		}
		return r.items(body, at, pushValueDepth, noOperation)
	})
	switch {
	case err != nil:
		return err
	case !seen || !isArray:
		return &BodyError{"items array is required"}
	}
	return r.refused
}

// transaction reads a transaction body (ParseTransaction), twice when
// the first pass must start over.
func (r *produceReader) transaction(body []byte) error {
	r.b.reset()
	err := r.transactionPass(body)
	if r.startOver {
		r.b.reset()
		r.refused, r.startOver, r.deferItems = nil, false, true
		err = r.transactionPass(body)
	}
	return err
}

func (r *produceReader) transactionPass(body []byte) error {
	seen, isArray, ops := false, false, 0
	var positions []byte // the last "positions" member's raw value
	err := r.top(body, transactionTop, errTransactionNotObject, func(field, at int) int {
		if field == 1 {
			end := wire.SkipValid(body, at, topValueDepth, true)
			positions = body[at:max(end, at)]
			return end
		}
		r.b.reset()
		r.refused = nil
		seen, isArray, ops = true, wire.At(body, at) == '[', 0
		if !isArray {
			return wire.SkipValid(body, at, topValueDepth, true)
		}
		var end int
		end, ops = r.operations(body, at)
		return end
	})
	switch {
	case r.startOver:
		return nil
	case err != nil:
		return err
	case !seen || !isArray:
		return &BodyError{"operations array required"}
	case ops == 0:
		return &BodyError{"operations array cannot be empty"}
	case r.refused != nil:
		return r.refused
	case positions != nil:
		return r.names.checkPositions(positions)
	}
	return nil
}

// items counts the push items of the array at body[i], whose members'
// values are at depth; op is the operation they belong to (noOperation in
// a push). It returns the index just past the array, or -1.
func (r *produceReader) items(body []byte, i, depth, op int) int {
	for i, more := wire.FirstIn(body, i, ']'); ; {
		if !more {
			return i
		}
		var end int
		switch {
		case r.refused != nil:
			end = wire.SkipValid(body, i, depth-1, true)
		case wire.At(body, i) != '{':
			r.refused = &BodyError{itemRef{op: op, item: r.b.Items}.String() + " is not an object"}
			end = wire.SkipValid(body, i, depth-1, true)
		default:
			var v pushFields
			var plain uint8
			if end = pushItem(body, i, depth, &v, &plain); end >= 0 {
				r.refused = r.names.countPushItem(&r.b, &v, plain, itemRef{op: op, item: r.b.Items})
			}
		}
		if end < 0 {
			return -1
		}
		if wire.CommaThen(body, end, '{') {
			i, more = end+1, true // the next item, as the SDKs write it
			continue
		}
		if i, more = wire.NextIn(body, end, ']'); i < 0 {
			return -1
		}
	}
}

// pushItem checks the object at body[i], whose values are at depth, sets
// v to its push item members (the last of a repeated one) and plain to
// which of its queue and partition are strings without escapes and
// whether its traceId is a canonical uuid (as countPushItem takes them),
// and returns the index just past it, or -1.
func pushItem(body []byte, i, depth int, v *pushFields, plain *uint8) int {
	for i, more := wire.FirstIn(body, i, '}'); ; {
		if !more {
			return i
		}
		f, at := wire.PushItemMember(body, i)
		if at < 0 {
			name, escaped, nameAt := wire.MemberName(body, i)
			if nameAt < 0 {
				return -1
			}
			f, at = wire.PushItemMemberNamed(name, escaped), nameAt
		}
		if c := wire.At(body, at); c <= ' ' {
			at = wire.SkipSpace(body, at)
		}
		var end int
		escaped, uuid := true, false
		if wire.At(body, at) == '"' {
			if f == 2 && wire.PlainString36(body, at) {
				// The transactionId every SDK writes (a uuid): 36 bytes no
				// string must escape, in one look instead of the loop.
				end, escaped = at+quotedUUIDLen, false
			} else if uuid = f == 4 && quotedCanonicalUUID(body, at); uuid {
				// The traceId: a canonical uuid, which the broker stores too.
				end, escaped = at+quotedUUIDLen, false
			} else if e := wire.ShortPlainEnd(body, at); e > 0 {
				end, escaped = e, false
			} else {
				end, escaped = wire.SkipValidString(body, at, true)
			}
		} else {
			end = wire.SkipValid(body, at, depth, true)
		}
		if end < 0 {
			return -1
		}
		if f >= 0 {
			v[f] = body[at:end]
			if f == 4 {
				*plain &^= canonicalTrace
				if uuid {
					*plain |= canonicalTrace
				}
			}
			if f <= 1 { // the queue or the partition: plainQueue, plainPartition
				bit := uint8(1) << f
				*plain &^= bit
				if !escaped {
					*plain |= bit
				}
			}
		}
		if wire.CommaThen(body, end, '"') {
			i, more = end+1, true // the next member, as the SDKs write it
			continue
		}
		if i, more = wire.NextIn(body, end, '}'); i < 0 {
			return -1
		}
	}
}

// operations counts the items of the operations array at body[i] and
// returns the index just past it (-1 at a bad byte, or to start over) and
// the number of operations.
func (r *produceReader) operations(body []byte, i int) (end, ops int) {
	for i, more := wire.FirstIn(body, i, ']'); ; {
		if !more {
			return i, ops
		}
		ops++
		var end int
		if r.refused == nil && wire.At(body, i) == '{' {
			end = r.operation(body, i, ops-1)
		} else {
			end = wire.SkipValid(body, i, topElementDepth, true) // adds nothing
		}
		if end < 0 {
			return -1, ops
		}
		if i, more = wire.NextIn(body, end, ']'); i < 0 {
			return -1, ops
		}
	}
}

// operation counts the items of the operation object at body[i], and
// returns the index just past it, or -1. An operation whose "type" is
// "ack" adds nothing; otherwise one with an "items" array adds each item;
// otherwise one with a "queue" is one item of its own (the flat form: a
// string queue, an optional partition and payload); anything else adds
// nothing. One typed as a position is refused. When its type comes
// before its items, as the SDKs write it, the items are counted as they
// are read; otherwise they are checked, and counted once the operation's
// last type is known.
func (r *produceReader) operation(body []byte, i, op int) int {
	var v pushFields
	var typ, items []byte
	types, counted := 0, false
	for i, more := wire.FirstIn(body, i, '}'); ; {
		if !more {
			if !counted {
				r.settleOperation(op, typ, items, &v)
			}
			return i
		}
		name, escaped, at := wire.MemberName(body, i)
		if at < 0 {
			return -1
		}
		var end int
		switch {
		case wire.NameIs(name, escaped, "type"):
			if counted {
				// A type after the counted items could make them an ack's.
				r.startOver = true
				return -1
			}
			types++
			end = wire.SkipValid(body, at, opValueDepth, true)
			typ = body[at:max(end, at)]
		case wire.NameIs(name, escaped, "items"):
			if counted {
				r.startOver = true // the last items are the operation's
				return -1
			}
			if !r.deferItems && wire.At(body, at) == '[' && types == 1 && !r.names.isAck(typ) && !r.names.isPositionsType(typ) {
				end = r.items(body, at, opItemValueDepth, op)
				counted = true
			} else {
				end = wire.SkipValid(body, at, opValueDepth, true)
			}
			items = body[at:max(end, at)]
		default:
			end = wire.SkipValid(body, at, opValueDepth, true)
			if f := wire.PushItemMemberNamed(name, escaped); f >= 0 && end >= 0 {
				v[f] = body[at:end]
			}
		}
		if end < 0 {
			return -1
		}
		if i, more = wire.NextIn(body, end, '}'); i < 0 {
			return -1
		}
	}
}

// settleOperation counts an operation whose items (if any) were not
// counted as they were read, once it is read to its end.
func (r *produceReader) settleOperation(op int, typ, items []byte, v *pushFields) {
	switch {
	case r.names.isAck(typ):
	case r.names.isPositionsType(typ):
		r.refused = positionsOperationError(op)
	case len(items) > 0 && items[0] == '[':
		r.refused = r.names.addItems(&r.b, items, op)
	case v[0] != nil: // the flat form
		r.refused = r.names.countPushItem(&r.b, v, 0, itemRef{op: op, item: -1})
	}
}

// isAck reports whether the raw type of an operation is the string "ack".
func (n *nameBuf) isAck(typ []byte) bool {
	t, isString := n.text(0, typ)
	return isString && string(t) == "ack"
}

// quotedUUIDLen is the length of a canonical uuid in quotes.
const quotedUUIDLen = 38

// quotedCanonicalUUID reports whether body[at:] starts with a canonical
// uuid in quotes: 36 bytes of hex digits and hyphens, none of which a
// string must escape, so the string ends at the quote after them.
func quotedCanonicalUUID(body []byte, at int) bool {
	return len(body)-at >= quotedUUIDLen && body[at+quotedUUIDLen-1] == '"' &&
		wire.CanonicalUUID(body[at+1:at+quotedUUIDLen-1])
}
