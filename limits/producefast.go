package limits

import (
	"github.com/queengate/queengate/wire"
)

// The one-pass readers of push and transaction bodies. The reference
// readers (parsePushReference, parseTransactionReference) check the whole
// body first and then walk it again to count its items; these check and
// count in the same pass: the structure the gateway reads (the top-level
// object, the items, their members) by hand, every other value by
// wire.SkipValid, which also ends a payload where its size is read.
// Every item is counted by the same countPushItem as in the reference.
//
// They only accept. On anything they are not sure of — a refusal of any
// kind, an escaped member name, a duplicated items or operations member,
// an operation whose type comes after its items twice over — they say so
// and the caller reads the body again with the reference reader, which
// decides and words the refusal. So a body is never read differently,
// only faster: FuzzFastProduceAgrees holds them to the reference on every
// input (same verdict, same counts), and FuzzParseProduce holds both to
// the broker model.

// Depths of the values these readers hand to wire.SkipValid: the
// containers open around them (the top-level object is 1).
const (
	topValueDepth    = 1 // a member of the top-level object
	pushValueDepth   = 3 // a member of a push item: top, items, item
	opValueDepth     = 3 // a member of an operation: top, operations, operation
	opItemValueDepth = 5 // a member of an operation's item: ..., items, item
	topElementDepth  = 2 // an element of a top-level member's array
	noOperation      = -1
)

// byteAt is b[i], or 0 (which starts no JSON token) past the end.
func byteAt(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// memberName reads the member name at body[i] and the colon after it,
// and returns the name's raw text and where its value starts; at is -1
// when the text there is not a name and a colon, or the name holds an
// escape (which the reference reader decodes).
func memberName(body []byte, i int) (name []byte, at int) {
	end, escaped := wire.SkipValidString(body, i, true)
	if end < 0 || escaped {
		return nil, -1
	}
	name = body[i+1 : end-1]
	if byteAt(body, end) != ':' {
		end = wire.SkipSpace(body, end)
		if byteAt(body, end) != ':' {
			return nil, -1
		}
	}
	at = end + 1
	if c := byteAt(body, at); c <= ' ' {
		at = wire.SkipSpace(body, at)
	}
	return name, at
}

// nextMember moves past the value that ended at body[i]: more is true
// after a comma (i is then the next element or member), false after the
// closing bracket (i is then just past it); i is -1 when neither follows.
func nextMember(body []byte, i int, closing byte) (next int, more bool) {
	if c := byteAt(body, i); c <= ' ' {
		i = wire.SkipSpace(body, i)
	}
	switch byteAt(body, i) {
	case ',':
		i++
		if c := byteAt(body, i); c <= ' ' {
			i = wire.SkipSpace(body, i)
		}
		return i, true
	case closing:
		return i + 1, false
	}
	return -1, false
}

// firstMember moves past the opening bracket at body[i]: more is false
// for an empty container (i is then just past it).
func firstMember(body []byte, i int, closing byte) (next int, more bool) {
	i++
	if c := byteAt(body, i); c <= ' ' {
		i = wire.SkipSpace(body, i)
	}
	if byteAt(body, i) == closing {
		return i + 1, false
	}
	return i, true
}

// knownPushField recognises, by their bytes, the push item members as
// the SDKs write them: a name without escapes and a colon right after it.
// It returns the field's index in pushFields and where its value starts,
// or at -1 for any other text there (which memberName then reads).
func knownPushField(body []byte, i int) (field, at int) {
	rest := body[i:]
	if len(rest) < 16 {
		return -1, -1
	}
	switch rest[1] {
	case 'q':
		if string(rest[:8]) == `"queue":` {
			return 0, i + 8
		}
	case 'p':
		if string(rest[:12]) == `"partition":` {
			return 1, i + 12
		}
		if string(rest[:10]) == `"payload":` {
			return 3, i + 10
		}
	case 't':
		if string(rest[:16]) == `"transactionId":` {
			return 2, i + 16
		}
		if string(rest[:10]) == `"traceId":` {
			return 4, i + 10
		}
	}
	return -1, -1
}

// pushField is the index in pushFields of the member named name, or -1.
func pushField(name []byte) int {
	switch string(name) {
	case "queue":
		return 0
	case "partition":
		return 1
	case "transactionId":
		return 2
	case "payload":
		return 3
	case "traceId":
		return 4
	}
	return -1
}

// fastPush reads a push body as ParsePush does, into b; false means it
// did not decide, and b is then to be thrown away.
func fastPush(body []byte, b *ProduceBatch, n *nameBuf) bool {
	return fastTop(body, "items", "", func(at int) int {
		return n.fastItems(b, body, at, pushValueDepth, noOperation)
	})
}

// fastTop reads body's top-level object in one pass: the value of the
// member named field, which must be an array and appear once, is read by
// read (which returns the index just past it, or -1); a member named
// undecided leaves the body to the reference reader; every other value is
// checked. It reports whether body is that one object, its field read.
func fastTop(body []byte, field, undecided string, read func(at int) int) bool {
	i := wire.SkipSpace(body, 0)
	if byteAt(body, i) != '{' {
		return false
	}
	seen := false
	for i, more := firstMember(body, i, '}'); ; {
		if !more {
			return seen && i >= 0 && wire.SkipSpace(body, i) == len(body)
		}
		name, at := memberName(body, i)
		if at < 0 || undecided != "" && string(name) == undecided {
			return false
		}
		var end int
		if string(name) == field {
			if seen || byteAt(body, at) != '[' {
				return false
			}
			seen = true
			end = read(at)
		} else {
			end = wire.SkipValid(body, at, topValueDepth, true)
		}
		if end < 0 {
			return false
		}
		if i, more = nextMember(body, end, '}'); i < 0 {
			return false
		}
	}
}

// fastItems counts the push items of the array at body[i], whose
// members' values are at depth; op is the operation they belong to
// (noOperation in a push). It returns the index just past the array, or
// -1.
func (n *nameBuf) fastItems(b *ProduceBatch, body []byte, i, depth, op int) int {
	for i, more := firstMember(body, i, ']'); ; {
		if !more {
			return i
		}
		if byteAt(body, i) != '{' {
			return -1
		}
		var v pushFields
		var plain uint8
		end := fastFields(body, i, depth, &v, &plain)
		if end < 0 || n.countPushItem(b, &v, plain, itemRef{op: op, item: b.Items}) != nil {
			return -1
		}
		if c := byteAt(body, end); c == ',' && byteAt(body, end+1) == '{' {
			i, more = end+1, true // the next item, as the SDKs write it
			continue
		}
		if i, more = nextMember(body, end, ']'); i < 0 {
			return -1
		}
	}
}

// fastFields checks the object at body[i], whose values are at depth,
// sets v to its push item members (the last of a repeated one) and plain
// to which of its queue and partition are strings without escapes (as
// countPushItem takes it), and returns the index just past it, or -1.
func fastFields(body []byte, i, depth int, v *pushFields, plain *uint8) int {
	for i, more := firstMember(body, i, '}'); ; {
		if !more {
			return i
		}
		f, at := knownPushField(body, i)
		if at < 0 {
			var name []byte
			if name, at = memberName(body, i); at < 0 {
				return -1
			}
			f = pushField(name)
		}
		if c := byteAt(body, at); c <= ' ' {
			at = wire.SkipSpace(body, at)
		}
		var end int
		escaped, uuid := true, false
		if byteAt(body, at) == '"' {
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
		if c := byteAt(body, end); c == ',' && byteAt(body, end+1) == '"' {
			i, more = end+1, true // the next member, as the SDKs write it
			continue
		}
		if i, more = nextMember(body, end, '}'); i < 0 {
			return -1
		}
	}
}

// fastTransaction reads a transaction body as ParseTransaction does, into
// b; false means it did not decide. A "positions" member is left to the
// reference reader, which checks it.
func fastTransaction(body []byte, b *ProduceBatch, n *nameBuf) bool {
	ops := 0
	return fastTop(body, "operations", "positions", func(at int) int {
		var end int
		end, ops = n.fastOperations(b, body, at)
		return end
	}) && ops > 0
}

// fastOperations counts the items of the operations array at body[i] and
// returns the index just past it (-1 when it did not decide) and the
// number of operations.
func (n *nameBuf) fastOperations(b *ProduceBatch, body []byte, i int) (end, ops int) {
	for i, more := firstMember(body, i, ']'); ; {
		if !more {
			return i, ops
		}
		ops++
		var end int
		if byteAt(body, i) == '{' {
			end = n.fastOperation(b, body, i, ops-1)
		} else {
			end = wire.SkipValid(body, i, topElementDepth, true) // adds nothing
		}
		if end < 0 {
			return -1, ops
		}
		if i, more = nextMember(body, end, ']'); i < 0 {
			return -1, ops
		}
	}
}

// fastOperation counts the items of the operation object at body[i] as
// addOperation does, and returns the index just past it, or -1. When its
// type comes before its items, as the SDKs write it, the items are
// counted as they are read; otherwise (the type is not known yet) they are
// checked, and counted by the reference walker once the type is known.
func (n *nameBuf) fastOperation(b *ProduceBatch, body []byte, i, op int) int {
	var v pushFields
	var typ, items []byte
	types, counted := 0, false
	for i, more := firstMember(body, i, '}'); ; {
		if !more {
			if counted {
				return i
			}
			return n.settleOperation(b, i, op, typ, items, &v)
		}
		name, at := memberName(body, i)
		if at < 0 {
			return -1
		}
		var end int
		switch string(name) {
		case "type":
			if counted {
				return -1 // a type after the counted items could make them an ack's
			}
			types++
			end = wire.SkipValid(body, at, opValueDepth, true)
			typ = body[at:max(end, at)]
		case "items":
			if items != nil {
				return -1
			}
			if byteAt(body, at) == '[' && types == 1 && !n.isAck(typ) && !n.isPositionsType(typ) {
				end = n.fastItems(b, body, at, opItemValueDepth, op)
				counted = true
			} else {
				end = wire.SkipValid(body, at, opValueDepth, true)
			}
			items = body[at:max(end, at)]
		default:
			end = wire.SkipValid(body, at, opValueDepth, true)
			if f := pushField(name); f >= 0 && end >= 0 {
				v[f] = body[at:end]
			}
		}
		if end < 0 {
			return -1
		}
		if i, more = nextMember(body, end, '}'); i < 0 {
			return -1
		}
	}
}

// settleOperation counts an operation whose items (if any) were not
// counted as they were read, as addOperation does; end is the index just
// past it, returned unless it did not decide (-1).
func (n *nameBuf) settleOperation(b *ProduceBatch, end, op int, typ, items []byte, v *pushFields) int {
	if n.isAck(typ) {
		return end
	}
	if n.isPositionsType(typ) {
		return -1 // refused by the reference reader
	}
	if len(items) > 0 && items[0] == '[' {
		if n.addItems(b, items, op) != nil {
			return -1
		}
		return end
	}
	if v[0] == nil { // no queue: not the flat form
		return end
	}
	if n.countPushItem(b, v, 0, itemRef{op: op, item: -1}) != nil {
		return -1
	}
	return end
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
		canonicalUUID(body[at+1:at+quotedUUIDLen-1])
}
