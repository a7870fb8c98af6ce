package wire

// The grammar as it was before one scanner core served both the Checker
// and SkipValid: the incremental Checker and the whole-buffer fast reader,
// two readers of the same rules, kept here only as the oracle the core is
// fuzzed against (FuzzCoreAgreesWithOld). They share the API's types
// (SyntaxError, Problem, Watcher) and the byte-level helpers of bytes.go
// and number.go, which the core calls too.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// oldChecker is a strict, incremental JSON checker: it reads one JSON text
// (RFC 8259) in pieces of any size, in one pass and without recursion, and
// says whether it is well formed. It is the gate in front of every reading
// of a body: a body the gateway acts on must pass it, so that the walkers
// in this package, which trust their input, read exactly what the broker's
// JSON library reads. It is stricter than encoding/json where the broker is:
//
//   - text must be valid UTF-8 (encoding/json replaces bad bytes with U+FFFD;
//     the broker 0.15.1 crashes on them);
//   - a \u escape must not leave half of a surrogate pair (encoding/json
//     replaces it; the broker's library refuses it);
//   - a leading UTF-8 byte-order mark is refused (the broker's library skips
//     one; refusing is simpler than agreeing on every reader);
//   - nesting deeper than MaxDepth is refused (the checker itself has no
//     limit, but the gateway refuses what it will not promise to read).
//
// A Watcher, when set, is told about containers and strings as they pass,
// which lets a caller read a document as it streams by without keeping it.
type oldChecker struct {
	// MaxDepth is the deepest nesting accepted; 0 means DefaultMaxDepth.
	MaxDepth int
	// Watch, when not nil, is told about containers and strings.
	Watch Watcher
	// RefuseNUL refuses the escape \u0000 in any string, key or value:
	// PostgreSQL holds U+0000 in neither text nor jsonb, so a body bound to
	// be stored that carries one fails at the broker's insert (oldCheckStored).
	RefuseNUL bool

	off   int64  // bytes consumed so far
	state uint8  // what the next byte may be
	stack []byte // open containers, '{' or '['
	err   *SyntaxError

	// Inside a string.
	key       bool   // the string is an object key
	hex       uint16 // the \u escape read so far
	hexLeft   uint8  // hex oldDigits still to come
	highSurr  bool   // the last escape was a high surrogate
	utfLeft   uint8  // UTF-8 continuation bytes still to come
	utfLo     byte   // bounds of the next continuation byte
	utfHi     byte
	utfStart  int64  // where the current UTF-8 sequence began
	lit       string // the literal being matched (true, false, null)
	litAt     int
	seenValue bool // the top-level value has started
}

// oldCheck reports whether b is exactly one well-formed JSON text (surrounding
// whitespace allowed) within DefaultMaxDepth.
func oldCheck(b []byte) error {
	if oldValidWhole(b, false) {
		return nil
	}
	// The oldChecker says what is wrong, and where.
	var c oldChecker
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

// oldCheckStored is oldCheck for a body whose strings the broker stores: it
// refuses the escape \u0000 as well (raw control bytes, U+0000 among them,
// are invalid JSON already).
func oldCheckStored(b []byte) error {
	if oldValidWhole(b, true) {
		return nil
	}
	c := oldChecker{RefuseNUL: true}
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

const (
	osStart        uint8 = iota // before the top-level value
	osValue                     // a value must come (after ':' or ',' in an array)
	osValueOrClose              // after '['
	osKeyOrClose                // after '{'
	osKey                       // after ',' in an object
	osColon                     // after a key
	osAfter                     // after a value: ',' or a closing bracket
	osEnd                       // after the top-level value: whitespace only
	osString
	osEscape
	osHex
	osUTF8
	osLiteral
	osNum      // in a number: osNum plus its NumState (osNum itself, NumStart, is never a state)
	osMinus    // after '-'
	osZero     // a leading 0
	osInt      // integer oldDigits
	osDot      // after '.'
	osFrac     // fraction oldDigits
	osExp      // after 'e'
	osExpSign  // after the exponent's sign
	osExpDigit // exponent oldDigits
)

func (c *oldChecker) fail(p Problem, at int64, detail string) error {
	c.err = &SyntaxError{Problem: p, Offset: at, Detail: detail}
	return c.err
}

func (c *oldChecker) maxDepth() int {
	if c.MaxDepth > 0 {
		return c.MaxDepth
	}
	return DefaultMaxDepth
}

// Write checks the next piece of the text. After an error every call
// returns the same error.
func (c *oldChecker) Write(p []byte) error {
	if c.err != nil {
		return c.err
	}
	base := c.off
	segStart := -1 // where the current string's raw text starts in p
	if c.state == osString || c.state == osEscape || c.state == osHex || c.state == osUTF8 {
		segStart = 0
	}
	i := 0
	for i < len(p) {
		b := p[i]
		switch c.state {
		case osString:
			// The fast loop: plain ASCII runs are most of any body, eight
			// bytes at a time while none of them needs a look. After a
			// high surrogate only the escape of its low half may come.
			if !c.highSurr {
				for i+8 <= len(p) && SpecialBytes(binary.LittleEndian.Uint64(p[i:i+8])) == 0 {
					i += 8
				}
				for i < len(p) && PlainByte[p[i]] {
					i++
				}
			}
			if i == len(p) {
				continue
			}
			b = p[i]
			switch {
			case b == '\\':
				c.state = osEscape
			case c.highSurr:
				return c.fail(ProblemSyntax, base+int64(i), "a \\u escape leaves half of a surrogate pair")
			case b == '"':
				if c.Watch != nil {
					if i > segStart {
						c.Watch.StringPart(p[segStart:i])
					}
					c.Watch.StringEnd()
				}
				segStart = -1
				if c.key {
					c.state = osColon
				} else {
					c.endValue()
				}
			case b < 0x20:
				return c.fail(ProblemSyntax, base+int64(i), "a control character inside a string")
			default:
				c.utfStart = base + int64(i)
				if !c.oldStartRune(b) {
					return c.fail(ProblemUTF8, c.utfStart, "")
				}
			}
			i++
			continue
		case osEscape:
			switch b {
			case 'u':
				c.state, c.hex, c.hexLeft = osHex, 0, 4
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				if c.highSurr {
					return c.fail(ProblemSyntax, base+int64(i), "a \\u escape leaves half of a surrogate pair")
				}
				c.state = osString
			default:
				return c.fail(ProblemSyntax, base+int64(i), "an invalid escape in a string")
			}
			i++
			continue
		case osHex:
			d := HexDigit[b]
			if d > 0xF {
				return c.fail(ProblemSyntax, base+int64(i), "an invalid \\u escape")
			}
			c.hex = c.hex<<4 | uint16(d)
			c.hexLeft--
			i++
			if c.hexLeft > 0 {
				continue
			}
			c.state = osString
			if c.hex == 0 && c.RefuseNUL {
				return c.fail(ProblemNUL, base+int64(i)-6, "")
			}
			var ok bool
			if c.highSurr, ok = Surrogate(c.hex, c.highSurr); !ok {
				return c.fail(ProblemSyntax, base+int64(i-1), "a \\u escape leaves half of a surrogate pair")
			}
			continue
		case osUTF8:
			if b < c.utfLo || b > c.utfHi {
				return c.fail(ProblemUTF8, c.utfStart, "")
			}
			c.utfLo, c.utfHi = 0x80, 0xBF
			c.utfLeft--
			if c.utfLeft == 0 {
				c.state = osString
			}
			i++
			continue
		case osLiteral:
			if rest := c.lit[c.litAt:]; len(p)-i >= len(rest) && string(p[i:i+len(rest)]) == rest {
				i += len(rest)
				c.endValue()
				continue
			}
			if b != c.lit[c.litAt] {
				return c.fail(ProblemSyntax, base+int64(i), "an invalid literal")
			}
			c.litAt++
			i++
			if c.litAt == len(c.lit) {
				c.endValue()
			}
			continue
		}

		if c.state >= osMinus {
			if c.state == osInt || c.state == osFrac || c.state == osExpDigit {
				// Digit runs in a tight loop.
				for i < len(p) && '0' <= p[i] && p[i] <= '9' {
					i++
				}
				if i == len(p) {
					continue
				}
				b = p[i]
			}
			if next, ok := oldNumberStep(c.state, b); ok {
				c.state = next
				i++
				continue
			}
			if !oldNumberComplete(c.state) {
				return c.fail(ProblemSyntax, base+int64(i), "an invalid number")
			}
			c.endValue()
			// b is looked at again as what follows the number.
		}

		if b == ' ' || b == '\t' || b == '\n' || b == '\r' {
			i++
			continue
		}
		switch c.state {
		case osStart, osValue, osValueOrClose:
			if c.state == osStart && c.off == 0 && i == 0 && b == 0xEF {
				return c.fail(ProblemBOM, 0, "")
			}
			if b == ']' && c.state == osValueOrClose {
				if err := c.close(']', base+int64(i)); err != nil {
					return err
				}
				break
			}
			c.seenValue = true
			switch {
			case b == '"':
				c.state, c.key = osString, false
				segStart = i + 1
				if c.Watch != nil {
					c.Watch.StringStart(len(c.stack), false)
				}
			case b == '{' || b == '[':
				if len(c.stack) >= c.maxDepth() {
					return c.fail(ProblemDepth, base+int64(i), strconv.Itoa(c.maxDepth()))
				}
				c.stack = append(c.stack, b)
				c.state = osValueOrClose
				if b == '{' {
					c.state = osKeyOrClose
				}
				if c.Watch != nil {
					c.Watch.Open(len(c.stack), b)
				}
			case b == '-':
				c.state = osMinus
			case b == '0':
				c.state = osZero
			case '1' <= b && b <= '9':
				c.state = osInt
			case b == 't':
				c.state, c.lit, c.litAt = osLiteral, "true", 1
			case b == 'f':
				c.state, c.lit, c.litAt = osLiteral, "false", 1
			case b == 'n':
				c.state, c.lit, c.litAt = osLiteral, "null", 1
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected a value, found "+oldDescribe(b))
			}
			if c.Watch != nil && c.state != osString && c.state != osKeyOrClose && c.state != osValueOrClose {
				c.Watch.Scalar(len(c.stack), b)
			}
		case osKeyOrClose, osKey:
			switch {
			case b == '"':
				c.state, c.key = osString, true
				segStart = i + 1
				if c.Watch != nil {
					c.Watch.StringStart(len(c.stack), true)
				}
			case b == '}' && c.state == osKeyOrClose:
				if err := c.close('}', base+int64(i)); err != nil {
					return err
				}
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected a member name, found "+oldDescribe(b))
			}
		case osColon:
			if b != ':' {
				return c.fail(ProblemSyntax, base+int64(i), "expected ':', found "+oldDescribe(b))
			}
			c.state = osValue
		case osAfter:
			top := c.stack[len(c.stack)-1]
			switch {
			case b == ',' && top == '{':
				c.state = osKey
			case b == ',':
				c.state = osValue
			case b == '}' || b == ']':
				if err := c.close(b, base+int64(i)); err != nil {
					return err
				}
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected ',' or a closing bracket, found "+oldDescribe(b))
			}
		case osEnd:
			return c.fail(ProblemSyntax, base+int64(i), "data after the JSON value")
		}
		i++
	}
	if segStart >= 0 && c.Watch != nil && len(p) > segStart {
		c.Watch.StringPart(p[segStart:])
	}
	c.off += int64(len(p))
	return nil
}

// oldStartRune takes the first byte of a multi-byte UTF-8 sequence.
func (c *oldChecker) oldStartRune(b byte) bool {
	left, lo, hi, ok := RuneStart(b)
	if !ok {
		return false
	}
	c.utfLeft, c.utfLo, c.utfHi = left, lo, hi
	c.state = osUTF8
	return true
}

// close closes the innermost container with d.
func (c *oldChecker) close(d byte, at int64) error {
	n := len(c.stack)
	if n == 0 || (d == '}') != (c.stack[n-1] == '{') {
		return c.fail(ProblemSyntax, at, "a mismatched "+oldDescribe(d))
	}
	if c.Watch != nil {
		c.Watch.Close(n)
	}
	c.stack = c.stack[:n-1]
	c.endValue()
	return nil
}

// endValue moves on after a complete value.
func (c *oldChecker) endValue() {
	c.state = osAfter
	if len(c.stack) == 0 {
		c.state = osEnd
	}
}

// oldNumberStep is NumberStep over the oldChecker's states.
func oldNumberStep(s uint8, b byte) (uint8, bool) {
	next, ok := NumberStep(NumState(s-osNum), b)
	return osNum + uint8(next), ok
}

func oldNumberComplete(s uint8) bool { return NumState(s - osNum).Complete() }

// Close reports whether the text written so far is one complete value.
func (c *oldChecker) Close() error {
	if c.err != nil {
		return c.err
	}
	if c.state >= osMinus && oldNumberComplete(c.state) && len(c.stack) == 0 {
		c.state = osEnd
	}
	switch {
	case c.state == osEnd:
		return nil
	case !c.seenValue && c.state == osStart:
		return c.fail(ProblemEmpty, c.off, "")
	}
	return c.fail(ProblemTruncated, c.off, "")
}

// Offset is the number of bytes written so far.
func (c *oldChecker) Offset() int64 { return c.off }

func oldDescribe(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return "'" + string(rune(b)) + "'"
	}
	return "byte 0x" + strconv.FormatUint(uint64(b), 16)
}

// The fast reader: a whole body in memory, checked in one pass that only
// decides (valid or not), with no state kept between bytes but the index.
// It takes exactly the texts the oldChecker takes (FuzzFastAgrees holds the
// two together on every input), so oldCheck and oldCheckStored run it first and
// ask the oldChecker only to explain a refusal: the error's offset and
// wording are the oldChecker's, whichever reader found the fault first.
//
// Its speed comes from the shape of real bodies: strings are most of the
// bytes, so they are read eight bytes at a time while none of the eight
// needs a look (a quote, a backslash, a control byte, or past ASCII); the
// grammar between them is a few predictable branches per byte; and
// containers are remembered in a bit stack on the Go stack, one bit per
// level, so reading allocates nothing at any depth.

// oldSkipValid checks the JSON value that starts at b[i] (no space before it)
// and returns the index just past it, or -1 when the text from i is not
// one valid value. outer is the number of containers already open around
// the value (the value's own containers count from outer+1; more than
// DefaultMaxDepth open at once is refused, as oldCheck refuses it).
// refuseNUL refuses the escape \u0000, as oldCheckStored does. It reads
// nothing past the value.
func oldSkipValid(b []byte, i, outer int, refuseNUL bool) int {
	// Scalars, most of the values a reader hands here, without the
	// container machinery.
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return oldSkipString(b, i+1, refuseNUL)
	case c-'1' < 9:
		i = oldDigits(b, i+1)
		if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
			return oldSkipFraction(b, i)
		}
		return i
	case c == '{' || c == '[':
		return oldSkipContainer(b, i, outer, refuseNUL)
	}
	return oldSkipContainer(b, i, outer, refuseNUL) // a literal, or a number with a sign or a zero
}

// oldSkipContainer is oldSkipValid for any value, containers above all: it
// keeps the kind of every open container in a bit stack.
func oldSkipContainer(b []byte, i, outer int, refuseNUL bool) int {
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
		i = oldSkipString(b, i, refuseNUL)
		if i < 0 {
			return -1
		}
	case c-'1' < 9:
		// The common number, a plain integer: no sign, no leading zero.
		i = oldDigits(b, i+1)
		if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
			i = oldSkipFraction(b, i)
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
		i = oldSpaceAfter(b, i+1)
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
		i = oldSkipNumber(b, i)
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
			i = oldSpaceAfter(b, i+1)
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
	} else if i = oldSkipString(b, i, refuseNUL); i < 0 {
		return -1
	}
	if i < len(b) && b[i] == ':' {
		i = oldSpaceAfter(b, i+1)
		goto value
	}
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	i = oldSpaceAfter(b, i+1)
	goto value
}

// oldSpaceAfter is SkipSpace for where space is rare (bodies are mostly
// compact): one look when b[i] is not space.
func oldSpaceAfter(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return SkipSpace(b, i)
}

// oldSkipValidString checks the string whose opening quote is at b[i] and
// returns the index just past its closing quote (-1 when it is not a valid
// string) and whether it holds an escape (its text is then not its raw
// bytes).
func oldSkipValidString(b []byte, i int, refuseNUL bool) (end int, escaped bool) {
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
	end = oldSkipString(b, i, refuseNUL)
	return end, end >= 0 && bytes.IndexByte(b[i:end], '\\') >= 0
}

// oldSkipString checks a string from b[i] (past its opening quote, or inside
// it at a character boundary) and returns the index just past its closing
// quote, or -1.
func oldSkipString(b []byte, i int, refuseNUL bool) int {
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
			i = oldSkipEscape(b, i+1, refuseNUL)
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

// oldSkipEscape checks the escape whose backslash is at b[i-1]; a \u escape
// of a high surrogate must be followed by one of a low surrogate.
func oldSkipEscape(b []byte, i int, refuseNUL bool) int {
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

// oldSkipNumber checks the number at b[i] and returns the index just past
// it, or -1. What follows is the caller's to judge ("01" is the number 0
// followed by a byte no value may be followed by).
func oldSkipNumber(b []byte, i int) int {
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
		i = oldDigits(b, i+1)
	default:
		return -1
	}
	return oldSkipFraction(b, i)
}

// oldSkipFraction checks the fraction and exponent, if any, of a number
// whose integer part ends at b[i], and returns the index past the number.
func oldSkipFraction(b []byte, i int) int {
	if i < len(b) && b[i] == '.' {
		j := oldDigits(b, i+1)
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
		j := oldDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func oldDigits(b []byte, i int) int {
	for i < len(b) && b[i]-'0' < 10 {
		i++
	}
	return i
}

// oldValidWhole reports whether b is one valid value within DefaultMaxDepth,
// surrounding whitespace allowed.
func oldValidWhole(b []byte, refuseNUL bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) {
		return false
	}
	i = oldSkipValid(b, i, 0, refuseNUL)
	return i >= 0 && SkipSpace(b, i) == len(b)
}
