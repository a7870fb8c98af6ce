package wire

import (
	"encoding/binary"
	"math/bits"
)

// The grammar, written once: scan reads JSON text under the broker's
// rules, and both readers of the package are made of it. SkipValid runs it
// over a whole buffer and only decides; the Checker runs it over each
// piece of a streamed text, keeps where it stopped between pieces, and
// says what is wrong and where.
//
// Its speed comes from the shape of real bodies: strings are most of the
// bytes, so they are read eight bytes at a time while none of the eight
// needs a look (a quote, a backslash, a control byte, or past ASCII); the
// grammar between them is a few predictable branches per byte, with the
// state in the program counter (one label a place the grammar can be);
// and containers are remembered in a bit stack, one bit per level, kept
// in the scanner (a reading of a body nested past 128 levels grows it on
// the heap, once a level word). A piece may end
// anywhere, even inside an escape or a UTF-8 sequence: scan saves its
// label and the little it needs to go on, and the next piece resumes there.

// Where scan resumes (or why it stopped: rDone, rFail).
const (
	rValue  uint8 = iota // a value must come
	rOpened              // after '{' or '['
	rKey                 // after ',' in an object
	rColon               // after a member name
	rAfter               // after a value inside a container
	rStr                 // in a string, at a character's start
	rLow                 // after a high surrogate's escape: its low half must come
	rEsc                 // after a backslash
	rHex                 // in a \u escape's digits
	rUTF8                // in a UTF-8 sequence
	rNum                 // in a number
	rLit                 // in true, false or null
	rDone                // the value is complete
	rFail                // the text is refused (why says what)
)

// What scan refused, for the Checker's message.
const (
	whyValue     uint8 = iota + 1 // expected a value
	whyKey                        // expected a member name
	whyColon                      // expected ':'
	whyAfter                      // expected ',' or a closing bracket
	whyMismatch                   // a closing bracket of the other kind
	whyControl                    // a control byte in a string
	whyEscape                     // a backslash before a letter that escapes nothing
	whyHex                        // a \u escape with a byte that is no hex digit
	whySurrogate                  // half of a surrogate pair
	whyNumber                     // a number cut short
	whyLiteral                    // not true, false or null
	whyTrailing                   // more than one value
	whyUTF8                       // not UTF-8
	whyDepth                      // nested past the limit
	whyNUL                        // \u0000 where it is refused
)

// literals are the words a value may be.
var literals = [...]string{"true", "false", "null"}

// stackWords is the bit stack kept in the scanner itself: 128 levels, far
// more than any body nests, and few enough words that starting a reading
// (once a value, for the one-pass readers) costs little. A text nesting
// deeper grows more, up to the limit.
const stackWords = 2

// scanner is scan's state between pieces, and the verdict.
type scanner struct {
	// The bit stack: bit k set, the container at depth k+1 is an object;
	// past the array's levels, in more.
	fixed [stackWords]uint64
	more  []uint64
	seg   int  // where the string's text starts in the piece, for the Watcher
	d     int  // containers open
	limit int  // the most containers open at once
	nul   bool // refuse \u0000
	watch Watcher
	// What the Watcher hears of: the Checker's, everything (every, and wd
	// its depth limit); a Stream's, nothing deeper than wd, at the cost of
	// one comparison a token of a message's payload, and of the values
	// there only the elements of arrays and those it wants (want: the
	// value of the member just told; a container one deeper too). So it
	// is called only where it may tell. tell says whether it hears of the
	// string being read.
	wd    int
	every bool
	want  bool
	tell  uint8
	// names, when set, is a Stream's: its watcher hears of a plain member
	// name only when the filter lets it through.
	names *Names
	// elems, when set, reads whole the elements of the arrays at its
	// element depth that its ElementReader knows (shape.go).
	elems *Stream
	base  int64 // the offset in the text of the piece's first byte

	state    uint8
	key      bool // the string read is a member name
	high     bool // the last escape was a high surrogate
	escaped  bool // a string held an escape
	num      NumState
	lit      uint8 // the literal matched (in literals), and how far
	litAt    uint8
	hex      uint16 // a \u escape's value so far, and digits to come
	hexLeft  uint8
	utfLeft  uint8 // UTF-8 continuation bytes to come, and the next one's bounds
	utfLo    byte
	utfHi    byte
	utfStart int64 // where the UTF-8 sequence began

	why   uint8 // when refused: what, where, and the byte found
	at    int64
	found byte
}

// What the Watcher hears of the string being read.
const (
	tellNone uint8 = iota // nothing
	tellOn                // all: it was told of its start
	tellName              // a name not yet told of, plain so far
)

// startName tells the Watcher of the name being read, which turned out
// not to be plain (or is cut by the end of the piece).
func (s *scanner) startName(d int) {
	s.tell = tellOn
	s.watch.StringStart(d, true)
}

// hears reports whether the Watcher hears of a value at depth d.
func (s *scanner) hears(d int) bool {
	return d <= s.wd && (s.every || s.want || d > 0 && !s.object(d))
}

// push records the kind of the container opened at depth d+1.
func (s *scanner) push(d int, object bool) {
	var w *uint64
	if k := d >> 6; k < stackWords {
		w = &s.fixed[k]
	} else {
		if k-stackWords == len(s.more) {
			s.more = append(s.more, 0)
		}
		w = &s.more[k-stackWords]
	}
	if bit := uint64(1) << (d & 63); object {
		*w |= bit
	} else {
		*w &^= bit
	}
}

// object reports whether the container at depth d (1 or more) is an
// object.
func (s *scanner) object(d int) bool {
	d--
	if k := d >> 6; k < stackWords {
		return s.fixed[k]>>(d&63)&1 != 0
	}
	return s.more[d>>6-stackWords]>>(d&63)&1 != 0
}

// begin readies s to read one value from its first byte, inside outer
// containers: for a reader that keeps its scanner from value to value
// (Stream), and whatever stack it grew.
func (s *scanner) begin(outer int) {
	s.state, s.d, s.limit, s.high = rValue, 0, DefaultMaxDepth-outer, false
}

// fail refuses the text at b[i] of the piece; scan returns what it does.
func (s *scanner) fail(why uint8, i int, found byte) int {
	s.state, s.why, s.at, s.found = rFail, why, s.base+int64(i), found
	return -1
}

// scan reads b from i in s.state, until the value is complete (rDone, the
// index just past it returned), the piece ends (the state to resume in is
// saved, len(b) returned), or the text is refused (rFail, -1).
func (s *scanner) scan(b []byte, i int) int {
	// Only what the hot paths read stays in locals; the rest of the
	// state lives in s (the registers are too few for all of it).
	var (
		d            = s.d
		key, ok, obj bool
		c, dig       byte
		n, lo, hi    byte
		next         NumState
	)
	if s.state != rValue {
		// Resume where the last piece ended.
		key = s.key
		if s.state >= rStr && s.state <= rUTF8 {
			s.seg = 0
		}
		switch s.state {
		case rOpened:
			goto opened
		case rKey:
			goto key
		case rColon:
			goto colon
		case rAfter:
			goto after
		case rStr:
			goto str
		case rLow:
			goto low
		case rEsc:
			goto esc
		case rHex:
			goto hexDigits
		case rUTF8:
			goto utf
		case rNum:
			goto number
		case rLit:
			goto literal
		}
	}

value:
	if i >= len(b) || b[i] <= ' ' {
		if i = SkipSpace(b, i); i >= len(b) {
			s.state = rValue
			goto out
		}
	}
	switch c = b[i]; {
	case c == '"':
		key = false
		goto strOpen
	case c-'1' < 9:
		// The common numbers, a plain integer or decimal, without the
		// grammar's steps: what is read here leaves the number in one
		// of the grammar's states, and it goes on from there.
		if s.watch != nil && s.hears(d) {
			s.watch.Scalar(d, c)
		}
		if i = digits(b, i+1); i < len(b) && b[i] != '.' && b[i]|0x20 != 'e' {
			goto after
		}
		s.num = NumInt
		if i+1 < len(b) && b[i] == '.' && b[i+1]-'0' < 10 {
			s.num, i = NumFrac, digits(b, i+2)
			if i < len(b) && b[i]|0x20 != 'e' {
				goto after
			}
		}
		goto number
	case c == '{' || c == '[':
		goto open
	case c == '-' || c == '0':
		if s.watch != nil && s.hears(d) {
			s.watch.Scalar(d, c)
		}
		s.num = NumStart
		goto number
	case c == 't':
		s.lit = 0
	case c == 'f':
		s.lit = 1
	case c == 'n':
		s.lit = 2
	default:
		return s.fail(whyValue, i, c)
	}
	if s.watch != nil && s.hears(d) {
		s.watch.Scalar(d, c)
	}
	if lit := literals[s.lit]; len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		i += len(lit)
		goto after
	}
	s.litAt = 0

literal:
	for ; int(s.litAt) < len(literals[s.lit]); s.litAt, i = s.litAt+1, i+1 {
		if i >= len(b) {
			s.state = rLit
			goto out
		}
		if b[i] != literals[s.lit][s.litAt] {
			return s.fail(whyLiteral, i, b[i])
		}
	}
	goto after

number:
	for i < len(b) {
		if b[i]-'0' < 10 && (s.num == NumInt || s.num == NumFrac || s.num == NumExpDigit) {
			i = digits(b, i)
			continue
		}
		if next, ok = NumberStep(s.num, b[i]); !ok {
			break
		}
		s.num = next
		i++
	}
	if i >= len(b) {
		s.state = rNum
		goto out
	}
	if !s.num.Complete() {
		return s.fail(whyNumber, i, b[i])
	}
	goto after

open:
	if d >= s.limit {
		return s.fail(whyDepth, i, c)
	}
	if s.elems != nil && d == s.elems.elemDepth && c == '{' {
		if end := s.elems.element(b, i, d); end >= 0 {
			i = end
			goto after
		}
	}
	s.push(d, c == '{')
	d++
	if s.watch != nil && (d <= s.wd || s.want) {
		s.watch.Open(d, c)
	}
	i++

opened: // after '{' or '[': its first member or element, or its close
	if i = spaceAfter(b, i); i >= len(b) {
		s.state = rOpened
		goto out
	}
	c, obj = b[i], s.object(d)
	if c == '}' && obj || c == ']' && !obj {
		goto closing
	}
	if obj {
		goto key
	}
	goto value

closing: // c, at b[i], closes the innermost container if it is of its kind
	if (c == '}') != s.object(d) {
		return s.fail(whyMismatch, i, c)
	}
	if s.watch != nil && d <= s.wd {
		s.watch.Close(d)
	}
	d--
	i++

after:
	if d == 0 {
		s.state, s.d = rDone, 0
		return i
	}
	if i >= len(b) || b[i] <= ' ' {
		if i = SkipSpace(b, i); i >= len(b) {
			s.state = rAfter
			goto out
		}
	}
	switch c = b[i]; {
	case c == ',':
		i++
		if s.object(d) {
			goto key
		}
		goto value
	case c == '}' || c == ']':
		goto closing
	}
	return s.fail(whyAfter, i, c)

key:
	c = '"'

expect: // space, then c: a member name's quote, or the colon after it
	if i = spaceAfter(b, i); i >= len(b) {
		if s.state = rKey; c == ':' {
			s.state = rColon
		}
		goto out
	}
	if b[i] != c {
		if c == ':' {
			return s.fail(whyColon, i, b[i])
		}
		return s.fail(whyKey, i, b[i])
	}
	if c == ':' {
		i++
		goto value
	}
	key = true

strOpen:
	if i++; s.watch != nil {
		if s.tell = tellNone; key && d <= s.wd || s.hears(d) {
			if s.tell, s.seg = tellOn, i; key && s.names != nil {
				// Whether a name is plain is known at its end: it is
				// told there if the filter lets it through, or at its
				// first byte that is not plain.
				s.tell = tellName
			} else {
				s.watch.StringStart(d, key)
			}
		}
	}

str:
	// The fast loop: most strings end in their first eight bytes, and
	// plain text is read eight bytes a step.
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
		s.state = rStr
		goto out
	}
	switch c = b[i]; {
	case c == '"':
		if s.watch != nil && s.tell != tellNone && (s.tell == tellOn || s.names.pass(b[s.seg:i])) {
			if s.tell == tellName { // a plain name the filter lets through
				s.startName(d)
			}
			if i > s.seg {
				s.watch.StringPart(b[s.seg:i])
			}
			s.watch.StringEnd()
		}
		if i++; !key {
			goto after
		}
		if i < len(b) && b[i] == ':' { // a compact body's colon, at once
			i++
			goto value
		}
		goto colon
	case c == '\\':
		if s.escaped = true; s.tell == tellName {
			s.startName(d)
		}
		i++
		goto esc
	case c < 0x20:
		return s.fail(whyControl, i, c)
	}
	if s.tell == tellName {
		s.startName(d)
	}
	if n, lo, hi, ok = RuneStart(c); !ok {
		return s.fail(whyUTF8, i, c)
	}
	// A whole sequence in the piece is read at once: the first
	// continuation byte within RuneStart's bounds, the others 80–BF.
	if i+int(n) < len(b) && b[i+1] >= lo && b[i+1] <= hi &&
		(n < 2 || b[i+2]&0xC0 == 0x80) && (n < 3 || b[i+3]&0xC0 == 0x80) {
		i += int(n) + 1
		goto str
	}
	s.utfLeft, s.utfLo, s.utfHi = n, lo, hi
	s.utfStart = s.base + int64(i)
	i++

utf:
	for ; s.utfLeft > 0; s.utfLeft, s.utfLo, s.utfHi, i = s.utfLeft-1, 0x80, 0xBF, i+1 {
		if i >= len(b) {
			s.state = rUTF8
			goto out
		}
		if b[i] < s.utfLo || b[i] > s.utfHi {
			s.state, s.why, s.at = rFail, whyUTF8, s.utfStart
			return -1
		}
	}
	goto str

esc:
	if i >= len(b) {
		s.state = rEsc
		goto out
	}
	if c = b[i]; c == 'u' {
		i++
		if h := Hex4(b, i); h >= 0 {
			s.hex = uint16(h)
			i += 4
			goto escaped16
		}
		s.hex, s.hexLeft = 0, 4
		goto hexDigits
	}
	if unescaped[c] == 0 {
		return s.fail(whyEscape, i, c)
	}
	if s.high {
		return s.fail(whySurrogate, i, c)
	}
	i++
	goto str

hexDigits:
	for ; s.hexLeft > 0; s.hexLeft, i = s.hexLeft-1, i+1 {
		if i >= len(b) {
			s.state = rHex
			goto out
		}
		if dig = HexDigit[b[i]]; dig > 0xF {
			return s.fail(whyHex, i, b[i])
		}
		s.hex = s.hex<<4 | uint16(dig)
	}

escaped16: // a \u escape's four digits are read, and i is past them
	if s.hex == 0 && s.nul {
		return s.fail(whyNUL, i-6, 0)
	}
	if s.high, ok = Surrogate(s.hex, s.high); !ok {
		return s.fail(whySurrogate, i-1, 0)
	}
	if !s.high {
		goto str
	}

low: // only the escape of the low half may follow
	switch {
	case i >= len(b):
		s.state = rLow
		goto out
	case b[i] != '\\':
		return s.fail(whySurrogate, i, b[i])
	}
	i++
	goto esc

colon:
	c = ':'
	goto expect

out:
	if s.watch != nil && s.tell != tellNone && s.state >= rStr && s.state <= rUTF8 {
		if s.tell == tellName {
			s.startName(d)
		}
		if s.seg < len(b) {
			s.watch.StringPart(b[s.seg:])
		}
	}
	s.d, s.key = d, key
	return i
}

// spaceAfter is SkipSpace for where space is rare (bodies are mostly
// compact): one look when b[i] is not space.
func spaceAfter(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return SkipSpace(b, i)
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i]-'0' < 10 {
		i++
	}
	return i
}

// SkipValid checks the JSON value that starts at b[i] (no space before it)
// and returns the index just past it, or -1 when the text from i is not
// one valid value. outer is the number of containers already open around
// the value (the value's own containers count from outer+1; more than
// DefaultMaxDepth open at once is refused, as Check refuses it).
// refuseNUL refuses the escape \u0000, as CheckStored does. It reads
// nothing past the value.
func SkipValid(b []byte, i, outer int, refuseNUL bool) int {
	end, _ := skipValid(b, i, outer, refuseNUL)
	return end
}

func skipValid(b []byte, i, outer int, refuseNUL bool) (end int, escaped bool) {
	if i >= len(b) || Space(b[i]) {
		return -1, false
	}
	s := scanner{limit: DefaultMaxDepth - outer, nul: refuseNUL}
	i = s.scan(b, i)
	switch {
	case s.state == rDone:
		return i, s.escaped
	case s.state == rNum && s.d == 0 && s.num.Complete():
		return len(b), false // a number the buffer's end ends
	}
	return -1, false
}

// SkipValidString checks the string whose opening quote is at b[i] and
// returns the index just past its closing quote (-1 when it is not a valid
// string) and whether it holds an escape (its text is then not its raw
// bytes).
func SkipValidString(b []byte, i int, refuseNUL bool) (end int, escaped bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	return skipValid(b, i, 0, refuseNUL)
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
