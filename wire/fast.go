package wire

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// The fast reader: a whole body in memory, checked in one pass that only
// decides (valid or not), with no state kept between bytes but the index.
// It takes exactly the texts the Checker takes (FuzzFastAgrees holds the
// two together on every input), so Check and CheckStored run it first and
// ask the Checker only to explain a refusal: the error's offset and
// wording are the Checker's, whichever reader found the fault first.
//
// Its speed comes from the shape of real bodies: strings are most of the
// bytes, so they are read eight bytes at a time while none of the eight
// needs a look (a quote, a backslash, a control byte, or past ASCII); the
// grammar between them is a few predictable branches per byte; and
// containers are remembered in a bit stack on the Go stack, one bit per
// level, so reading allocates nothing at any depth.

// SkipValid checks the JSON value that starts at b[i] (no space before it)
// and returns the index just past it, or -1 when the text from i is not
// one valid value. outer is the number of containers already open around
// the value (the value's own containers count from outer+1; more than
// DefaultMaxDepth open at once is refused, as Check refuses it).
// refuseNUL refuses the escape \u0000, as CheckStored does. It reads
// nothing past the value.
func SkipValid(b []byte, i, outer int, refuseNUL bool) int {
	// Scalars, most of the values a reader hands here, without the
	// container machinery.
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i+1, refuseNUL)
	case c-'1' < 9:
		i = digits(b, i+1)
		if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
			return skipFraction(b, i)
		}
		return i
	case c == '{' || c == '[':
		return skipContainer(b, i, outer, refuseNUL)
	}
	return skipContainer(b, i, outer, refuseNUL) // a literal, or a number with a sign or a zero
}

// skipContainer is SkipValid for any value, containers above all: it
// keeps the kind of every open container in a bit stack.
func skipContainer(b []byte, i, outer int, refuseNUL bool) int {
	var objects [(DefaultMaxDepth + 63) / 64]uint64 // bit d set: level d is an object
	d := 0                                          // containers open inside the value
	var c byte
value:
	if i >= len(b) {
		return -1
	}
	c = b[i]
	switch {
	case c == '"':
		// The fast loop: most strings end in its first eight bytes.
		i++
		for len(b)-i >= 8 {
			if m := SpecialBytes(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
		}
		for i < len(b) && PlainByte[b[i]] {
			i++
		}
	special:
		if i < len(b) && b[i] == '"' {
			i++
			break
		}
		i = skipString(b, i, refuseNUL)
		if i < 0 {
			return -1
		}
	case c-'1' < 9:
		// The common number, a plain integer: no sign, no leading zero.
		i = digits(b, i+1)
		if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
			i = skipFraction(b, i)
			if i < 0 {
				return -1
			}
		}
	case c == '{' || c == '[':
		if outer+d >= DefaultMaxDepth {
			return -1
		}
		if c == '{' {
			objects[d>>6] |= 1 << (d & 63)
		} else {
			objects[d>>6] &^= 1 << (d & 63)
		}
		d++
		i = spaceAfter(b, i+1)
		if i >= len(b) {
			return -1
		}
		if b[i] == c+2 { // '{'+2 is '}', '['+2 is ']'
			i++
			d--
			break
		}
		if c == '{' {
			goto key
		}
		goto value
	case c == 't':
		if len(b)-i < 4 || string(b[i:i+4]) != "true" {
			return -1
		}
		i += 4
	case c == 'f':
		if len(b)-i < 5 || string(b[i:i+5]) != "false" {
			return -1
		}
		i += 5
	case c == 'n':
		if len(b)-i < 4 || string(b[i:i+4]) != "null" {
			return -1
		}
		i += 4
	default:
		i = skipNumber(b, i)
		if i < 0 {
			return -1
		}
	}
	// After a value: the end of the outermost, a comma, or a closing bracket.
	for d > 0 {
		if i < len(b) && b[i] > ' ' {
			c = b[i]
		} else {
			i = SkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			c = b[i]
		}
		inObject := objects[(d-1)>>6]>>((d-1)&63)&1 != 0
		switch {
		case c == ',':
			i = spaceAfter(b, i+1)
			if inObject {
				goto key
			}
			goto value
		case c == '}' && inObject, c == ']' && !inObject:
			i++
			d--
		default:
			return -1
		}
	}
	return i
key:
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	// The fast loop again: member names are short and plain.
	i++
	for len(b)-i >= 8 {
		if m := SpecialBytes(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
			i += bits.TrailingZeros64(m) >> 3
			goto keySpecial
		}
		i += 8
	}
	for i < len(b) && PlainByte[b[i]] {
		i++
	}
keySpecial:
	if i < len(b) && b[i] == '"' {
		i++
	} else if i = skipString(b, i, refuseNUL); i < 0 {
		return -1
	}
	if i < len(b) && b[i] == ':' {
		i = spaceAfter(b, i+1)
		goto value
	}
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	i = spaceAfter(b, i+1)
	goto value
}

// spaceAfter is SkipSpace for where space is rare (bodies are mostly
// compact): one look when b[i] is not space.
func spaceAfter(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return SkipSpace(b, i)
}

// SkipValidString checks the string whose opening quote is at b[i] and
// returns the index just past its closing quote (-1 when it is not a valid
// string) and whether it holds an escape (its text is then not its raw
// bytes).
func SkipValidString(b []byte, i int, refuseNUL bool) (end int, escaped bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	// Most strings hold no escape: the fast loop alone finds their end.
	i++
	for len(b)-i >= 8 {
		if m := SpecialBytes(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
			i += bits.TrailingZeros64(m) >> 3
			goto special
		}
		i += 8
	}
	for i < len(b) && PlainByte[b[i]] {
		i++
	}
special:
	if i < len(b) && b[i] == '"' {
		return i + 1, false
	}
	end = skipString(b, i, refuseNUL)
	return end, end >= 0 && hasByte(b[i:end], '\\')
}

// PlainString36 reports whether b[i:] starts with a string of 36 bytes
// (the length of a uuid) in quotes that need no look: no quote,
// backslash, control byte or byte past ASCII. Such a string is valid, ends
// at i+38 and holds no escape. The five words are looked at together.
func PlainString36(b []byte, i int) bool {
	if len(b)-i < 38 || b[i] != '"' || b[i+37] != '"' {
		return false
	}
	le := binary.LittleEndian
	return SpecialBytes(le.Uint64(b[i+1:i+9]))|SpecialBytes(le.Uint64(b[i+9:i+17]))|SpecialBytes(le.Uint64(b[i+17:i+25]))|
		SpecialBytes(le.Uint64(b[i+25:i+33]))|SpecialBytes(le.Uint64(b[i+29:i+37])) == 0
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// skipString checks a string from b[i] (past its opening quote, or inside
// it at a character boundary) and returns the index just past its closing
// quote, or -1.
func skipString(b []byte, i int, refuseNUL bool) int {
	for {
		for len(b)-i >= 8 {
			if m := SpecialBytes(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
		}
		for i < len(b) && PlainByte[b[i]] {
			i++
		}
	special:
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i = skipEscape(b, i+1, refuseNUL)
			if i < 0 {
				return -1
			}
		case c < 0x20:
			return -1
		case c-0xC2 < 0xE0-0xC2 && i+1 < len(b) && b[i+1]&0xC0 == 0x80:
			i += 2 // a two-byte sequence (ü, ß, é), checked in line
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return -1
			}
			i += n
		}
	}
}

// skipEscape checks the escape whose backslash is at b[i-1]; a \u escape
// of a high surrogate must be followed by one of a low surrogate.
func skipEscape(b []byte, i int, refuseNUL bool) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1
	case 'u':
	default:
		return -1
	}
	r := Hex4(b, i+1)
	i += 5
	switch {
	case r < 0:
		return -1
	case r == 0 && refuseNUL:
		return -1
	case r >= 0xDC00 && r < 0xE000:
		return -1 // a low half without its high half
	case r >= 0xD800 && r < 0xDC00:
		if len(b)-i < 6 || b[i] != '\\' || b[i+1] != 'u' {
			return -1
		}
		if lo := Hex4(b, i+2); lo < 0xDC00 || lo >= 0xE000 {
			return -1
		}
		return i + 6
	}
	return i
}

// skipNumber checks the number at b[i] and returns the index just past
// it, or -1. What follows is the caller's to judge ("01" is the number 0
// followed by a byte no value may be followed by).
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
		if i >= len(b) {
			return -1
		}
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	return skipFraction(b, i)
}

// skipFraction checks the fraction and exponent, if any, of a number
// whose integer part ends at b[i], and returns the index past the number.
func skipFraction(b []byte, i int) int {
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i]-'0' < 10 {
		i++
	}
	return i
}

// validWhole reports whether b is one valid value within DefaultMaxDepth,
// surrounding whitespace allowed.
func validWhole(b []byte, refuseNUL bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) {
		return false
	}
	i = SkipValid(b, i, 0, refuseNUL)
	return i >= 0 && SkipSpace(b, i) == len(b)
}
