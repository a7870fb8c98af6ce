package wire

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// Checker is a strict, incremental JSON checker: it reads one JSON text
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
type Checker struct {
	// MaxDepth is the deepest nesting accepted; 0 means DefaultMaxDepth.
	MaxDepth int
	// Watch, when not nil, is told about containers and strings.
	Watch Watcher
	// RefuseNUL refuses the escape \u0000 in any string, key or value:
	// PostgreSQL holds U+0000 in neither text nor jsonb, so a body bound to
	// be stored that carries one fails at the broker's insert (CheckStored).
	RefuseNUL bool

	off   int64  // bytes consumed so far
	state uint8  // what the next byte may be
	stack []byte // open containers, '{' or '['
	err   *SyntaxError

	// Inside a string.
	key       bool   // the string is an object key
	hex       uint16 // the \u escape read so far
	hexLeft   uint8  // hex digits still to come
	highSurr  bool   // the last escape was a high surrogate
	utfLeft   uint8  // UTF-8 continuation bytes still to come
	utfLo     byte   // bounds of the next continuation byte
	utfHi     byte
	utfStart  int64  // where the current UTF-8 sequence began
	lit       string // the literal being matched (true, false, null)
	litAt     int
	seenValue bool // the top-level value has started
}

// DefaultMaxDepth is the nesting the gateway accepts in a body: far more
// than any message needs, and a bound the broker's recursive encoder is
// known to survive.
const DefaultMaxDepth = 1000

// Watcher is told what a Checker passes. Depth is the number of containers
// open around the event (1 inside the top-level array or object).
type Watcher interface {
	// Open is called when a container opens; depth counts it.
	Open(depth int, kind byte)
	// Close is called when the container at depth closes.
	Close(depth int)
	// StringStart is called at a string's opening quote; key tells an
	// object member's name from a value.
	StringStart(depth int, key bool)
	// StringPart gets the string's raw text (escapes intact, no quotes),
	// in one or more pieces.
	StringPart(raw []byte)
	// StringEnd is called at the closing quote.
	StringEnd()
	// Scalar is called where a number or a literal starts; first is its
	// first byte ('t', 'f', 'n', '-' or a digit), which tells true from
	// false from null.
	Scalar(depth int, first byte)
}

// Problem tells what was wrong with a text.
type Problem uint8

// The problems a Checker reports.
const (
	ProblemSyntax Problem = iota + 1
	ProblemUTF8
	ProblemBOM
	ProblemDepth
	ProblemEmpty
	ProblemTruncated
	ProblemNUL
)

// SyntaxError is a text the Checker refused: what, and at which byte
// (counted from 0).
type SyntaxError struct {
	Problem Problem
	Offset  int64
	Detail  string // for ProblemSyntax: what was found or expected
}

func (e *SyntaxError) Error() string {
	at := strconv.FormatInt(e.Offset, 10)
	switch e.Problem {
	case ProblemUTF8:
		return "body is not valid UTF-8 at byte " + at
	case ProblemBOM:
		return "body starts with a UTF-8 byte-order mark; send the JSON without it"
	case ProblemDepth:
		return "body nests deeper than " + e.Detail + " levels at byte " + at
	case ProblemEmpty:
		return "request body is empty; a JSON body is required"
	case ProblemTruncated:
		return "body is not valid JSON: it ends before the value is complete (byte " + at + ")"
	case ProblemNUL:
		return "body holds U+0000 (\\u0000) at byte " + at + "; the broker cannot store it"
	}
	return "body is not valid JSON: " + e.Detail + " at byte " + at
}

// Check reports whether b is exactly one well-formed JSON text (surrounding
// whitespace allowed) within DefaultMaxDepth.
func Check(b []byte) error {
	if validWhole(b, false) {
		return nil
	}
	// The Checker says what is wrong, and where.
	var c Checker
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

// CheckStored is Check for a body whose strings the broker stores: it
// refuses the escape \u0000 as well (raw control bytes, U+0000 among them,
// are invalid JSON already).
func CheckStored(b []byte) error {
	if validWhole(b, true) {
		return nil
	}
	c := Checker{RefuseNUL: true}
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

const (
	sStart        uint8 = iota // before the top-level value
	sValue                     // a value must come (after ':' or ',' in an array)
	sValueOrClose              // after '['
	sKeyOrClose                // after '{'
	sKey                       // after ',' in an object
	sColon                     // after a key
	sAfter                     // after a value: ',' or a closing bracket
	sEnd                       // after the top-level value: whitespace only
	sString
	sEscape
	sHex
	sUTF8
	sLiteral
	sNum      // in a number: sNum plus its NumState (sNum itself, NumStart, is never a state)
	sMinus    // after '-'
	sZero     // a leading 0
	sInt      // integer digits
	sDot      // after '.'
	sFrac     // fraction digits
	sExp      // after 'e'
	sExpSign  // after the exponent's sign
	sExpDigit // exponent digits
)

func (c *Checker) fail(p Problem, at int64, detail string) error {
	c.err = &SyntaxError{Problem: p, Offset: at, Detail: detail}
	return c.err
}

func (c *Checker) maxDepth() int {
	if c.MaxDepth > 0 {
		return c.MaxDepth
	}
	return DefaultMaxDepth
}

// Write checks the next piece of the text. After an error every call
// returns the same error.
func (c *Checker) Write(p []byte) error {
	if c.err != nil {
		return c.err
	}
	base := c.off
	segStart := -1 // where the current string's raw text starts in p
	if c.state == sString || c.state == sEscape || c.state == sHex || c.state == sUTF8 {
		segStart = 0
	}
	i := 0
	for i < len(p) {
		b := p[i]
		switch c.state {
		case sString:
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
				c.state = sEscape
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
					c.state = sColon
				} else {
					c.endValue()
				}
			case b < 0x20:
				return c.fail(ProblemSyntax, base+int64(i), "a control character inside a string")
			default:
				c.utfStart = base + int64(i)
				if !c.startRune(b) {
					return c.fail(ProblemUTF8, c.utfStart, "")
				}
			}
			i++
			continue
		case sEscape:
			switch b {
			case 'u':
				c.state, c.hex, c.hexLeft = sHex, 0, 4
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				if c.highSurr {
					return c.fail(ProblemSyntax, base+int64(i), "a \\u escape leaves half of a surrogate pair")
				}
				c.state = sString
			default:
				return c.fail(ProblemSyntax, base+int64(i), "an invalid escape in a string")
			}
			i++
			continue
		case sHex:
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
			c.state = sString
			if c.hex == 0 && c.RefuseNUL {
				return c.fail(ProblemNUL, base+int64(i)-6, "")
			}
			var ok bool
			if c.highSurr, ok = Surrogate(c.hex, c.highSurr); !ok {
				return c.fail(ProblemSyntax, base+int64(i-1), "a \\u escape leaves half of a surrogate pair")
			}
			continue
		case sUTF8:
			if b < c.utfLo || b > c.utfHi {
				return c.fail(ProblemUTF8, c.utfStart, "")
			}
			c.utfLo, c.utfHi = 0x80, 0xBF
			c.utfLeft--
			if c.utfLeft == 0 {
				c.state = sString
			}
			i++
			continue
		case sLiteral:
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

		if c.state >= sMinus {
			if c.state == sInt || c.state == sFrac || c.state == sExpDigit {
				// Digit runs in a tight loop.
				for i < len(p) && '0' <= p[i] && p[i] <= '9' {
					i++
				}
				if i == len(p) {
					continue
				}
				b = p[i]
			}
			if next, ok := numberStep(c.state, b); ok {
				c.state = next
				i++
				continue
			}
			if !numberComplete(c.state) {
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
		case sStart, sValue, sValueOrClose:
			if c.state == sStart && c.off == 0 && i == 0 && b == 0xEF {
				return c.fail(ProblemBOM, 0, "")
			}
			if b == ']' && c.state == sValueOrClose {
				if err := c.close(']', base+int64(i)); err != nil {
					return err
				}
				break
			}
			c.seenValue = true
			switch {
			case b == '"':
				c.state, c.key = sString, false
				segStart = i + 1
				if c.Watch != nil {
					c.Watch.StringStart(len(c.stack), false)
				}
			case b == '{' || b == '[':
				if len(c.stack) >= c.maxDepth() {
					return c.fail(ProblemDepth, base+int64(i), strconv.Itoa(c.maxDepth()))
				}
				c.stack = append(c.stack, b)
				c.state = sValueOrClose
				if b == '{' {
					c.state = sKeyOrClose
				}
				if c.Watch != nil {
					c.Watch.Open(len(c.stack), b)
				}
			case b == '-':
				c.state = sMinus
			case b == '0':
				c.state = sZero
			case '1' <= b && b <= '9':
				c.state = sInt
			case b == 't':
				c.state, c.lit, c.litAt = sLiteral, "true", 1
			case b == 'f':
				c.state, c.lit, c.litAt = sLiteral, "false", 1
			case b == 'n':
				c.state, c.lit, c.litAt = sLiteral, "null", 1
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected a value, found "+describe(b))
			}
			if c.Watch != nil && c.state != sString && c.state != sKeyOrClose && c.state != sValueOrClose {
				c.Watch.Scalar(len(c.stack), b)
			}
		case sKeyOrClose, sKey:
			switch {
			case b == '"':
				c.state, c.key = sString, true
				segStart = i + 1
				if c.Watch != nil {
					c.Watch.StringStart(len(c.stack), true)
				}
			case b == '}' && c.state == sKeyOrClose:
				if err := c.close('}', base+int64(i)); err != nil {
					return err
				}
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected a member name, found "+describe(b))
			}
		case sColon:
			if b != ':' {
				return c.fail(ProblemSyntax, base+int64(i), "expected ':', found "+describe(b))
			}
			c.state = sValue
		case sAfter:
			top := c.stack[len(c.stack)-1]
			switch {
			case b == ',' && top == '{':
				c.state = sKey
			case b == ',':
				c.state = sValue
			case b == '}' || b == ']':
				if err := c.close(b, base+int64(i)); err != nil {
					return err
				}
			default:
				return c.fail(ProblemSyntax, base+int64(i), "expected ',' or a closing bracket, found "+describe(b))
			}
		case sEnd:
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

// startRune takes the first byte of a multi-byte UTF-8 sequence.
func (c *Checker) startRune(b byte) bool {
	left, lo, hi, ok := RuneStart(b)
	if !ok {
		return false
	}
	c.utfLeft, c.utfLo, c.utfHi = left, lo, hi
	c.state = sUTF8
	return true
}

// close closes the innermost container with d.
func (c *Checker) close(d byte, at int64) error {
	n := len(c.stack)
	if n == 0 || (d == '}') != (c.stack[n-1] == '{') {
		return c.fail(ProblemSyntax, at, "a mismatched "+describe(d))
	}
	if c.Watch != nil {
		c.Watch.Close(n)
	}
	c.stack = c.stack[:n-1]
	c.endValue()
	return nil
}

// endValue moves on after a complete value.
func (c *Checker) endValue() {
	c.state = sAfter
	if len(c.stack) == 0 {
		c.state = sEnd
	}
}

// numberStep is NumberStep over the Checker's states.
func numberStep(s uint8, b byte) (uint8, bool) {
	next, ok := NumberStep(NumState(s-sNum), b)
	return sNum + uint8(next), ok
}

func numberComplete(s uint8) bool { return NumState(s - sNum).Complete() }

// Close reports whether the text written so far is one complete value.
func (c *Checker) Close() error {
	if c.err != nil {
		return c.err
	}
	if c.state >= sMinus && numberComplete(c.state) && len(c.stack) == 0 {
		c.state = sEnd
	}
	switch {
	case c.state == sEnd:
		return nil
	case !c.seenValue && c.state == sStart:
		return c.fail(ProblemEmpty, c.off, "")
	}
	return c.fail(ProblemTruncated, c.off, "")
}

// Offset is the number of bytes written so far.
func (c *Checker) Offset() int64 { return c.off }

func describe(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return "'" + string(rune(b)) + "'"
	}
	return "byte 0x" + strconv.FormatUint(uint64(b), 16)
}

// InvalidUTF8 returns the offset of the first byte of b that does not start
// a valid UTF-8 sequence, or -1 when b is valid UTF-8.
func InvalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}
