package wire

// SkipSpace, ValueEnd, StringEnd and Array walk JSON text that has already
// been checked (Check, CheckStored or SkipValid) without decoding it,
// handing out values as slices of the input; they allocate nothing and
// trust their input.

import "bytes"

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
