package wire

// The string helpers: every reader that needs the text of a JSON string,
// its length in characters or its U+0000 asks here.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

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

// unescaped is the character a one-letter escape stands for, 0 for a
// letter that is no escape.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// Unquote appends to dst the text of the JSON string whose raw text
// (between the quotes, escapes intact) is raw, as the broker's library
// decodes it. It reports false for text the grammar refuses: a bad escape,
// half of a surrogate pair, a quote or a control byte, or bytes that are
// not UTF-8 (where encoding/json would put U+FFFD).
func Unquote(raw, dst []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 >= len(raw) {
				return dst, false
			}
			if e := raw[i+1]; e != 'u' {
				d := unescaped[e]
				if d == 0 {
					return dst, false
				}
				dst = append(dst, d)
				i += 2
				continue
			}
			v := Hex4(raw, i+2)
			if v < 0 {
				return dst, false
			}
			i += 6
			r := rune(v)
			if v >= 0xD800 && v < 0xE000 {
				if v >= 0xDC00 || len(raw)-i < 6 || raw[i] != '\\' || raw[i+1] != 'u' {
					return dst, false
				}
				lo := Hex4(raw, i+2)
				if lo < 0xDC00 || lo >= 0xE000 {
					return dst, false
				}
				r = utf16.DecodeRune(r, rune(lo))
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		case c == '"' || c < 0x20:
			return dst, false
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n <= 1 {
				return dst, false
			}
			dst = append(dst, raw[i:i+n]...)
			i += n
		}
	}
	return dst, true
}

// UnescapedIs reports whether the raw text of a JSON string (between the
// quotes, escapes intact) is word once unescaped. It allocates nothing for
// a word of up to 64 bytes.
func UnescapedIs(raw []byte, word string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == word
	}
	// Unescaping never lengthens text, and no byte of a word takes more
	// than six bytes to write (\u00XX).
	if len(raw) < len(word) || len(raw) > 6*len(word) {
		return false
	}
	var buf [64]byte
	d, ok := Unquote(raw, buf[:0])
	return ok && string(d) == word
}

// ShortPlainEnd is the index just past the string whose opening quote is
// at b[at] when it ends within its first sixteen bytes and none of them
// needs a look (a queue or a partition as the SDKs name them), else 0. It
// is small enough to be inlined where a call would cost more than the
// look.
func ShortPlainEnd(b []byte, at int) int {
	if len(b)-at < 17 {
		return 0
	}
	k := at + 1
	m := SpecialBytes(binary.LittleEndian.Uint64(b[k : k+8]))
	if m == 0 {
		k += 8
		m = SpecialBytes(binary.LittleEndian.Uint64(b[k : k+8]))
	}
	if k += bits.TrailingZeros64(m) >> 3; m != 0 && b[k] == '"' {
		return k + 1
	}
	return 0
}

// StringValue is the text of the checked JSON value whose raw text is v
// when it is a string (quotes included), decoded; ok is false for any
// other value.
func StringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	text, ok := Unquote(v[1:len(v)-1], nil)
	return string(text), ok
}
