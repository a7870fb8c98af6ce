package meter

import (
	"strings"

	"github.com/queengate/queengate/internal/jsonscan"
)

// The fast path below bills the answer of every pop without decoding it
// into Go values (push answers are tallied as they stream, by PushTally).
// It either gives exactly what decoding with encoding/json gives
// (billDecodedPop), or declines (ok false) on anything out of the
// ordinary — an escaped key or value, a key that matches a field only
// case-insensitively, a value of an unexpected type, an element that is
// not an object, a text jsonscan.Check refuses — and the caller decodes
// the body properly.

// popFields is what one message of a pop answer contributes to billing:
// the raw contents of its keying members (nil when absent; a null member
// leaves what an earlier one of the same name set).
type popFields struct {
	id, partitionID, transactionID, group []byte
}

// scanPopBilling reads a pop answer (a JSON object with a consumerGroup
// and a messages array of objects) in one pass and returns what BillPop
// returns for it. The keys are slices of one string, so a pop costs a few
// allocations whatever it delivered.
func scanPopBilling(body []byte) (messages int64, ids []string, ok bool) {
	if jsonscan.Check(body) != nil {
		return 0, nil, false
	}
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, nil, false
	}
	var (
		group    []byte
		small    [8]popFields
		msgs     = small[:0]
		seenList bool
		declined bool
	)
	// decline stops both walks: a member's end at len(body) ends them.
	decline := func() int {
		declined = true
		return len(body)
	}
	readMessage := func(at int) int {
		switch body[at] {
		case 'n': // a null element: billed, without a key
			msgs = append(msgs, popFields{})
			return jsonscan.ValueEnd(body, at)
		case '{':
		default:
			return decline()
		}
		var m popFields
		end := jsonscan.Members(body, at, func(k []byte, at int) int {
			end := jsonscan.ValueEnd(body, at)
			var into *[]byte
			switch string(k) {
			case "id":
				into = &m.id
			case "partitionId":
				into = &m.partitionID
			case "transactionId":
				into = &m.transactionID
			case "consumerGroup":
				into = &m.group
			default:
				if hasEscape(k) || foldsTo(k, "id", "partitionId", "transactionId", "consumerGroup") {
					return decline()
				}
				return end
			}
			if !readPlain(body[at:end], into) {
				return decline()
			}
			return end
		})
		msgs = append(msgs, m)
		return end
	}
	jsonscan.Members(body, i, func(k []byte, at int) int {
		switch {
		case string(k) == "consumerGroup":
			end := jsonscan.ValueEnd(body, at)
			if !readPlain(body[at:end], &group) {
				return decline()
			}
			return end
		case string(k) == "messages":
			if seenList {
				return decline() // a repeated key: encoding/json merges into the first
			}
			seenList = true
			switch body[at] {
			case 'n': // null: no messages
				return jsonscan.ValueEnd(body, at)
			case '[':
				return jsonscan.Elements(body, at, readMessage)
			}
			return decline()
		case strings.EqualFold(string(k), "consumerGroup") || strings.EqualFold(string(k), "messages") || hasEscape(k):
			return decline()
		}
		return jsonscan.ValueEnd(body, at)
	})
	if declined {
		return 0, nil, false
	}
	return int64(len(msgs)), popKeys(msgs, group), true
}

// readPlain sets *into to a plain string value's contents and reports
// whether the value was one; null leaves *into as it was, as encoding/json
// does.
func readPlain(v []byte, into *[]byte) bool {
	if string(v) == "null" {
		return true
	}
	s, ok := jsonscan.PlainBytes(v)
	if ok {
		*into = s // the last of repeated members wins, as in encoding/json
	}
	return ok
}

// popKeys builds the redelivery keys of BillPop, all in one string.
func popKeys(msgs []popFields, answerGroup []byte) []string {
	size, count := 0, 0
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			size += len(head) + 1 + len(tail) + 1 + len(msgs[i].groupOr(answerGroup))
			count++
		}
	}
	if count == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]int, 0, count)
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			b.Write(head)
			b.WriteByte('/')
			b.Write(tail)
			b.WriteByte('/')
			b.Write(msgs[i].groupOr(answerGroup))
			ends = append(ends, b.Len())
		}
	}
	all := b.String()
	ids := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		ids[i], start = all[start:end], end
	}
	return ids
}

var idKeyHead = []byte("id")

// key names the message: partitionId and transactionId when it has both,
// else "id" and its id; ok false when it has neither. The key is head,
// tail and the consumer group joined by '/'.
func (m *popFields) key() (head, tail []byte, ok bool) {
	switch {
	case len(m.partitionID) > 0 && len(m.transactionID) > 0:
		return m.partitionID, m.transactionID, true
	case len(m.id) > 0:
		return idKeyHead, m.id, true
	}
	return nil, nil, false
}

func (m *popFields) groupOr(answerGroup []byte) []byte {
	if len(m.group) > 0 {
		return m.group
	}
	return answerGroup
}

func hasEscape(k []byte) bool {
	for _, c := range k {
		if c == '\\' {
			return true
		}
	}
	return false
}

// foldsTo reports whether encoding/json would take k for one of names
// (it matches field names case-insensitively, with Unicode folding: only
// a key with non-ASCII bytes can fold to a name of another length).
func foldsTo(k []byte, names ...string) bool {
	ascii := true
	for _, c := range k {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	for _, n := range names {
		if (!ascii || len(k) == len(n)) && strings.EqualFold(string(k), n) {
			return true
		}
	}
	return false
}
