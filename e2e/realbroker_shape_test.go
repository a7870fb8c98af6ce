//go:build realbroker

package e2e

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

var (
	uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	timeText = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?$`)
)

// answerShape is what two brokers given the same requests answer alike:
// the JSON with ids and times masked and numbers reduced to their kind
// (counters, lags and ages differ between two brokers by timing alone);
// strings, booleans, nulls, keys and array lengths are kept. An answer
// that is not JSON is its content type and text, which for the broker's
// own pages (its 404) is the same everywhere. (Its content type is not
// compared: the broker sends its 404 page without one, and Go's server,
// relaying it, adds the type it sniffs, text/html.)
func answerShape(r response) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if len(bytes.TrimSpace(r.body)) == 0 {
		return "(empty)"
	}
	if err := dec.Decode(&v); err != nil || dec.More() {
		return "text: " + string(r.body)
	}
	var b strings.Builder
	writeShape(&b, v)
	return b.String()
}

func writeShape(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(k)
			b.WriteByte(':')
			writeShape(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeShape(b, e)
		}
		b.WriteByte(']')
	case string:
		switch {
		case uuidText.MatchString(x):
			b.WriteString("<id>")
		case timeText.MatchString(x):
			b.WriteString("<time>")
		default:
			q, _ := json.Marshal(x)
			b.Write(q)
		}
	case json.Number:
		b.WriteString("<n>")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	}
}
