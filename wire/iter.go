package wire

// Object, Array, ValueEnd and PlainBytes walk JSON text that has already
// been checked (Check, CheckStored or SkipValid) without decoding it, handing
// out members and elements as slices of the input; they allocate nothing and
// trust their input.

import (
	"bytes"
	"unicode/utf8"
)

// Space reports whether c is JSON whitespace.
func Space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first non-space byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && Space(b[i]) {
		i++
	}
	return i
}

// ValueEnd returns the index just past the value starting at b[i].
func ValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = StringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch c := b[i]; {
			case c == ',' || c == '}' || c == ']' || Space(c):
				return i
			}
			i++
		}
		return i
	}
}

// StringEnd returns the index just past the string whose quote is at b[i].
func StringEnd(b []byte, i int) int {
	// Most strings hold no escape: find the closing quote with IndexByte
	// and walk byte by byte only when a backslash comes before it.
	if q := bytes.IndexByte(b[i+1:], '"'); q >= 0 && bytes.IndexByte(b[i+1:i+1+q], '\\') < 0 {
		return i + 2 + q
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// ObjectIter walks the members of a valid JSON object.
type ObjectIter struct {
	b []byte
	i int
}

// Object returns an iterator over the object whose text is b.
func Object(b []byte) ObjectIter { return ObjectIter{b: b} }

// Next returns the next member: its key's raw text between the quotes
// (escapes intact) and its value's raw text.
func (it *ObjectIter) Next() (key, val []byte, more bool) {
	b := it.b
	i := SkipSpace(b, it.i)
	if i < len(b) && (b[i] == '{' || b[i] == ',') {
		i = SkipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		it.i = len(b)
		return nil, nil, false // '}'
	}
	kEnd := StringEnd(b, i)
	key = b[i+1 : kEnd-1]
	i = SkipSpace(b, kEnd)
	i = SkipSpace(b, i+1) // ':'
	vEnd := ValueEnd(b, i)
	it.i = vEnd
	return key, b[i:vEnd], true
}

// ArrayIter walks the elements of a valid JSON array.
type ArrayIter struct {
	b []byte
	i int
}

// Array returns an iterator over the array whose text is b.
func Array(b []byte) ArrayIter { return ArrayIter{b: b} }

// Next returns the next element's raw text.
func (it *ArrayIter) Next() (elem []byte, more bool) {
	b := it.b
	i := SkipSpace(b, it.i)
	if i < len(b) && (b[i] == '[' || b[i] == ',') {
		i = SkipSpace(b, i+1)
	}
	if i >= len(b) || b[i] == ']' {
		it.i = len(b)
		return nil, false
	}
	end := ValueEnd(b, i)
	it.i = end
	return b[i:end], true
}

// PlainBytes returns the contents of a JSON string value without escapes
// (the common case), as a slice of v, and false for any other value, a
// string holding an escape, or one that is not valid UTF-8 (encoding/json
// would replace the bad bytes): those the caller must decode properly.
func PlainBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	ascii := true
	for _, c := range v[1 : len(v)-1] {
		switch {
		case c == '\\':
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(v[1:len(v)-1]) {
		return nil, false
	}
	return v[1 : len(v)-1], true
}
