package meter

import (
	"encoding/json"
	"strings"

	"github.com/queengate/queengate/internal/jsonscan"
)

// The fast path below reads the answer billed on every pop without
// decoding it into Go values (push answers are tallied as they stream, by
// PushTally). It either gives exactly what the encoding/json path would,
// or declines (ok false) on anything out of the ordinary — an escaped key or value, a key that matches a field only
// case-insensitively, a value of an unexpected type, an element that is
// not an object — and the caller decodes the body properly.

// scanPopAnswer fills r from a pop answer, a JSON object with a
// consumerGroup and a messages array of objects.
func scanPopAnswer(body []byte, r *popAnswer) bool {
	if !json.Valid(body) {
		return false
	}
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	*r = popAnswer{}
	var messages []byte
	for obj := jsonscan.Object(body[i:]); ; {
		k, v, more := obj.Next()
		if !more {
			break
		}
		switch {
		case string(k) == "consumerGroup":
			s, ok := stringOrNull(v)
			if !ok {
				return false
			}
			r.ConsumerGroup = s
		case string(k) == "messages":
			if messages != nil {
				return false // a repeated key: encoding/json merges into the first
			}
			messages = v
		case strings.EqualFold(string(k), "consumerGroup") || strings.EqualFold(string(k), "messages") || hasEscape(k):
			return false
		}
	}
	if len(messages) == 0 || messages[0] == 'n' { // absent or null
		return true
	}
	if messages[0] != '[' {
		return false
	}
	r.Messages = make([]*popMessage, 0, 8)
	for arr := jsonscan.Array(messages); ; {
		elem, more := arr.Next()
		if !more {
			return true
		}
		if elem[0] == 'n' { // null element
			r.Messages = append(r.Messages, nil)
			continue
		}
		if elem[0] != '{' {
			return false
		}
		m := new(popMessage)
		for obj := jsonscan.Object(elem); ; {
			k, v, more := obj.Next()
			if !more {
				break
			}
			var into *string
			switch string(k) {
			case "id":
				into = &m.ID
			case "partitionId":
				into = &m.PartitionID
			case "transactionId":
				into = &m.TransactionID
			case "consumerGroup":
				into = &m.ConsumerGroup
			default:
				if hasEscape(k) || foldsTo(k, "id", "partitionId", "transactionId", "consumerGroup") {
					return false
				}
				continue
			}
			s, ok := stringOrNull(v)
			if !ok {
				return false
			}
			*into = s
		}
		r.Messages = append(r.Messages, m)
	}
}

// stringOrNull reads a plain string value; null leaves a field unset, as
// encoding/json does.
func stringOrNull(v []byte) (string, bool) {
	if string(v) == "null" {
		return "", true
	}
	return jsonscan.PlainString(v)
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
