package wire

import "bytes"

// NULAt returns the offset of the first U+0000 a body would hand the
// broker, raw (a 0x00 byte) or as the JSON escape \u0000, or -1 when there
// is none. It is for bodies no walker reads: one bytes.IndexByte per kind
// finds nothing in almost every body. An escape counts when an even number
// of backslashes precedes its own (\\u0000 is the text "\u0000", not
// U+0000), which is exact for any JSON text, where backslashes occur only
// in strings; in text that is not JSON it may refuse the six characters
// written out, which the broker would refuse as invalid JSON anyway.
func NULAt(b []byte) int {
	raw := bytes.IndexByte(b, 0)
	if raw < 0 {
		return escapedNULAt(b)
	}
	if esc := escapedNULAt(b[:raw]); esc >= 0 {
		return esc
	}
	return raw
}

// escapedNULAt is NULAt for the escape alone.
func escapedNULAt(b []byte) int {
	const esc = `\u0000`
	for from := 0; ; {
		i := bytes.Index(b[from:], []byte(esc))
		if i < 0 {
			return -1
		}
		i += from
		run := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			run++
		}
		if run%2 == 0 {
			return i
		}
		from = i + 1
	}
}

// StringChars returns the number of characters (code points) of the JSON
// string whose text, quotes included, is v, as the broker's database counts
// them for a varchar(N) column: an escape is one character, a surrogate pair
// of escapes is one, a UTF-8 sequence is one. v must have passed Check.
func StringChars(v []byte) int {
	if len(v) < 2 {
		return 0
	}
	inner := v[1 : len(v)-1]
	n := 0
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			if i+1 < len(inner) && inner[i+1] == 'u' {
				// The low half of a pair closes the character its high
				// half opened (Check refuses a half pair).
				if i+5 < len(inner) && isLowSurrogateEscape(inner[i+2:i+6]) {
					n--
				}
				i += 5
			} else {
				i++
			}
			n++
		case c&0xC0 != 0x80: // not a UTF-8 continuation byte
			n++
		}
	}
	return n
}

// isLowSurrogateEscape reports whether the four hex digits h are in
// DC00–DFFF.
func isLowSurrogateEscape(h []byte) bool {
	if h[0] != 'd' && h[0] != 'D' {
		return false
	}
	switch h[1] {
	case 'c', 'C', 'd', 'D', 'e', 'E', 'f', 'F':
		return true
	}
	return false
}
