package limits

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

var defaultPartition = []byte(DefaultPartition)

// nameBuf holds unescaped names (queue in slot 0, partition in slot 1) when
// they carry JSON escapes; names without escapes are used in place.
type nameBuf struct{ buf [2][]byte }

// text returns the text of the raw JSON value v when it is a string.
func (n *nameBuf) text(slot int, v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	// Names are used in place unless they hold escapes or invalid UTF-8,
	// which encoding/json turns into U+FFFD like the rest of the body's text.
	inner := v[1 : len(v)-1]
	if plainASCII(inner) || bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true
	}
	// The configure and replay readers take bodies no grammar has checked
	// (their caller has, with wire.CheckStored): for those, text that is
	// not UTF-8 reads as encoding/json reads it, with U+FFFD in its place.
	if t, ok := wire.Unquote(inner, n.buf[slot][:0]); ok {
		n.buf[slot] = t
		return t, true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, false
	}
	n.buf[slot] = append(n.buf[slot][:0], s...)
	return n.buf[slot], true
}

// partition returns the partition named by the raw value v: "Default" when
// v is absent or null; ok is false when it is neither those nor a string.
func (n *nameBuf) partition(v []byte) ([]byte, bool) {
	if v == nil || string(v) == "null" {
		return defaultPartition, true
	}
	return n.text(1, v)
}
