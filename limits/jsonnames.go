package limits

import (
	"bytes"

	"github.com/queengate/queengate/wire"
)

var defaultPartition = []byte(DefaultPartition)

// nameBuf holds unescaped names (queue in slot 0, partition in slot 1) when
// they carry JSON escapes; names without escapes are used in place.
type nameBuf struct{ buf [2][]byte }

// text returns the text of the raw JSON value v when it is a string. v is
// text a grammar of package wire accepted, so a string without an escape
// is its own text, used in place.
func (n *nameBuf) text(slot int, v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, true
	}
	t, ok := wire.Unquote(inner, n.buf[slot][:0])
	n.buf[slot] = t
	return t, ok
}

// partition returns the partition named by the raw value v: "Default" when
// v is absent or null; ok is false when it is neither those nor a string.
func (n *nameBuf) partition(v []byte) ([]byte, bool) {
	if v == nil || string(v) == "null" {
		return defaultPartition, true
	}
	return n.text(1, v)
}
