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
// the raw contents of its keying members (nil when absent or null).
type popFields struct {
	id, partitionID, transactionID, group []byte
}

// scanPopBilling reads a pop answer (a JSON object with a consumerGroup
// and a messages array of objects) in one pass and returns what BillPop
// returns for it. The keys are slices of one string, so a pop costs two
// allocations whatever it delivered.
func scanPopBilling(body []byte) (messages int64, ids []string, ok bool) {
	if jsonscan.Check(body) != nil {
		return 0, nil, false
	}
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, nil, false
	}
	var group, list []byte
	for obj := jsonscan.Object(body[i:]); ; {
		k, v, more := obj.Next()
		if !more {
			break
		}
		switch {
		case string(k) == "consumerGroup":
			if string(v) == "null" {
				continue // leaves the field as it was, as encoding/json does
			}
			s, ok := jsonscan.PlainBytes(v)
			if !ok {
				return 0, nil, false
			}
			group = s
		case string(k) == "messages":
			if list != nil {
				return 0, nil, false // a repeated key: encoding/json merges into the first
			}
			list = v
		case strings.EqualFold(string(k), "consumerGroup") || strings.EqualFold(string(k), "messages") || hasEscape(k):
			return 0, nil, false
		}
	}
	if len(list) == 0 || list[0] == 'n' { // absent or null
		return 0, nil, true
	}
	if list[0] != '[' {
		return 0, nil, false
	}
	var small [8]popFields
	msgs := small[:0]
	for arr := jsonscan.Array(list); ; {
		elem, more := arr.Next()
		if !more {
			break
		}
		if elem[0] == 'n' { // null element: billed, without a key
			msgs = append(msgs, popFields{})
			continue
		}
		if elem[0] != '{' {
			return 0, nil, false
		}
		var m popFields
		for obj := jsonscan.Object(elem); ; {
			k, v, more := obj.Next()
			if !more {
				break
			}
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
					return 0, nil, false
				}
				continue
			}
			if string(v) == "null" {
				continue // leaves the field as it was, as encoding/json does
			}
			s, ok := jsonscan.PlainBytes(v)
			if !ok {
				return 0, nil, false
			}
			*into = s // the last of repeated members wins, as in encoding/json
		}
		msgs = append(msgs, m)
	}
	return int64(len(msgs)), popKeys(msgs, group), true
}

// popKeys builds the redelivery keys of BillPop, all in one string.
func popKeys(msgs []popFields, answerGroup []byte) []string {
	size, count := 0, 0
	for i := range msgs {
		if n := msgs[i].keyLen(answerGroup); n > 0 {
			size, count = size+n, count+1
		}
	}
	if count == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]int, 0, count)
	for i := range msgs {
		if msgs[i].appendKey(&b, answerGroup) {
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

func (m *popFields) groupOr(answerGroup []byte) []byte {
	if len(m.group) > 0 {
		return m.group
	}
	return answerGroup
}

// keyLen is the length of the message's key, 0 when it has none.
func (m *popFields) keyLen(answerGroup []byte) int {
	g := len(m.groupOr(answerGroup))
	switch {
	case len(m.partitionID) > 0 && len(m.transactionID) > 0:
		return len(m.partitionID) + 1 + len(m.transactionID) + 1 + g
	case len(m.id) > 0:
		return len("id/") + len(m.id) + 1 + g
	}
	return 0
}

func (m *popFields) appendKey(b *strings.Builder, answerGroup []byte) bool {
	switch {
	case len(m.partitionID) > 0 && len(m.transactionID) > 0:
		b.Write(m.partitionID)
		b.WriteByte('/')
		b.Write(m.transactionID)
	case len(m.id) > 0:
		b.WriteString("id/")
		b.Write(m.id)
	default:
		return false
	}
	b.WriteByte('/')
	b.Write(m.groupOr(answerGroup))
	return true
}

func hasEscape(k []byte) bool {
	for _, c := range k {
		if c == '\\' {
			return true
		}
	}
	return false
}

func foldsTo(k []byte, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(string(k), n) {
			return true
		}
	}
	return false
}
