package wire_test

// The answer reader as it was in meter before wire.Stream took its place,
// kept only as the oracle wire.Stream is fuzzed against
// (FuzzStreamMatchesOldScan): the general reader alone, without the
// element shapes (meter's tallies hold those to their own oracles).

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

// oldAnswerScan is the reader under the answer tallies: a strict, streaming
// JSON checker that accepts exactly what wire.Checker accepts (valid
// UTF-8, no byte-order mark, no half surrogate pair, nesting within
// wire.DefaultMaxDepth, RFC 8259 otherwise), and tells its watcher
// only about the few places a tally reads. It is built for speed on what
// the broker writes: it reads a token at a time rather than a byte at a
// time, skips plain string text eight bytes at a time, keeps its nesting
// in a bit set (no allocation, whatever the answer), and says nothing
// about what lies deeper than the watcher's depth, so a message's payload
// is checked and passed over. A token cut by the end of a piece is
// carried on in a little state, so pieces may be of any size.
//
// The watcher hears, at depth (the containers open around the event, 1
// inside the top-level value):
//   - open, for a container at depth <= watchDepth, or one that is the
//     value of a member whose key the watcher asked for;
//   - close, for a container at depth <= watchDepth;
//   - key, for a member name at depth <= watchDepth that may be one of
//     the watcher's words (any name with an escape or a byte past ASCII,
//     or a plain one of a word's length): raw text, escapes intact, nil
//     when longer than carried across a piece (no word the tallies look
//     for is that long), and plain when it is known to hold no escape and
//     nothing past ASCII; it returns whether it wants the member's value;
//   - value, for a string, number or literal that is the value of a
//     member it asked for, or an element of an array at depth <=
//     watchDepth: first is '"' for a string (raw its text, as for key)
//     or a number's or literal's first byte (raw nil), plain as for key.
//
// The reader and the tallies' verdicts are fuzzed against wire.Checker
// and the tallies as they were before it (FuzzAnswerScanVerdict and the
// Fuzz*MatchesOracle targets).
type oldAnswerScan struct {
	watch      oldAnswerWatcher
	watchDepth int
	names      oldNameFilter                            // the plain member names told
	arrays     [(wire.DefaultMaxDepth + 64) / 64]uint64 // bit d: the container at depth d is an array (set as it opens)
	// The text of a string the watcher hears, when it is cut by the end
	// of a piece: up to len(carry) bytes, else carryLong.
	carry [64]byte
	// maxDepth is the deepest nesting accepted (wire.DefaultMaxDepth,
	// less the depth at which a value read on its own sits).
	maxDepth int
	// stopAtEnd ends the reading at the end of the top-level value, for a
	// value read on its own inside a piece (stopped is where it ended).
	stopAtEnd bool

	oldAnswerScanState // what reset clears
}

type oldAnswerScanState struct {
	failed  bool
	started bool  // the top-level value has started
	next    uint8 // what may come after the last complete token
	depth   int
	wantVal bool  // the watcher asked for the next value
	partial uint8 // a token cut by the end of a piece
	strKey  bool  // the string being read is a key
	strTold bool  // and the watcher hears it

	// Inside a string, when the piece ended within an escape or a UTF-8
	// sequence, or after a high surrogate.
	sub      uint8
	hex      uint16
	hexLeft  uint8
	highSurr bool
	utfLeft  uint8
	utfLo    byte
	utfHi    byte

	carryLen  int
	carryLong bool

	num   wire.NumState // the number grammar's state, when a number is cut
	lit   string        // the literal being matched, when one is cut
	litAt int

	stopped int // with stopAtEnd: where the top-level value ended
}

type oldAnswerWatcher interface {
	open(depth int, kind byte)
	close(depth int)
	key(depth int, raw []byte, plain bool) (wantValue bool)
	value(depth int, first byte, raw []byte, plain bool)
}

// What may come next, after a complete token.
const (
	nextValue        uint8 = iota // at the start, after ':' or after ',' in an array
	nextValueOrClose              // after '['
	nextKeyOrClose                // after '{'
	nextKey                       // after ',' in an object
	nextColon                     // after a key
	nextAfter                     // after a value inside a container
	nextEnd                       // after the top-level value
)

// Tokens cut by the end of a piece.
const (
	partNone uint8 = iota
	partString
	partNumber
	partLiteral
)

// Sub-states inside a string.
const (
	subNone   uint8 = iota
	subEscape       // after a backslash
	subHex          // inside \uXXXX
	subUTF8         // inside a multi-byte sequence
)

// oldNameFilter is the plain member names (no escape, nothing past ASCII) a
// watcher hears: those with the length and the first byte of one of its
// words, since no other can be one of them.
type oldNameFilter struct {
	lens  uint64    // bit n: names of n bytes
	first [4]uint64 // bit c: names that start with c
}

// oldNamesOf is the filter for words; eitherCase lets the first letters
// through in the other case too, for a watcher that folds case.
func oldNamesOf(eitherCase bool, words ...string) *oldNameFilter {
	f := &oldNameFilter{}
	for _, word := range words {
		f.lens |= 1 << len(word)
		c := word[0]
		f.first[c>>6] |= 1 << (c & 63)
		if eitherCase && ('a' <= c|0x20 && c|0x20 <= 'z') {
			c ^= 0x20
			f.first[c>>6] |= 1 << (c & 63)
		}
	}
	return f
}

// reset readies s for a new text, told to w up to depth, of the plain
// member names the filter lets through. The nesting bits and the carried
// text need no clearing: each is written before it is read.
func (s *oldAnswerScan) reset(w oldAnswerWatcher, depth int, names *oldNameFilter) {
	s.watch, s.watchDepth, s.names = w, depth, *names
	s.maxDepth, s.stopAtEnd = wire.DefaultMaxDepth, false
	s.oldAnswerScanState = oldAnswerScanState{}
}

// tellsKey reports whether the watcher hears the plain member name raw.
func (s *oldAnswerScan) tellsKey(raw []byte) bool {
	n := len(raw)
	return n < 64 && s.names.lens>>n&1 != 0 && s.names.first[raw[0]>>6]>>(raw[0]&63)&1 != 0
}

// ok reports whether everything written is one complete, well-formed
// JSON text.
func (s *oldAnswerScan) ok() bool {
	if s.failed || !s.started {
		return false
	}
	switch s.partial {
	case partNone:
		return s.next == nextEnd
	case partNumber:
		return s.depth == 0 && s.num.Complete()
	}
	return false
}

func (s *oldAnswerScan) isArray(depth int) bool { return s.arrays[depth>>6]>>(depth&63)&1 != 0 }

// write reads the next piece of the text.
func (s *oldAnswerScan) write(p []byte) {
	if s.failed || s.watch == nil {
		// Never reset: a tally that was not readied bills nothing, as
		// one that read nothing it watches.
		s.failed = true
		return
	}
	i := 0
	switch s.partial {
	case partString:
		i = s.resumeString(p)
	case partNumber:
		i = s.number(p, 0)
	case partLiteral:
		i = s.literal(p, 0)
	}
	if i < 0 || s.failed {
		return
	}
	s.tokens(p, i)
}

// fail marks the text unreadable; it returns -1, for the token readers.
func (s *oldAnswerScan) fail() int {
	s.failed = true
	return -1
}

// afterValue moves on after a complete value.
func (s *oldAnswerScan) afterValue() {
	if s.depth == 0 {
		s.next = nextEnd
	} else {
		s.next = nextAfter
	}
}

// tokens reads p from i, a token at a time. The broker writes compact
// JSON, so the common path goes from a key to its colon to its value
// without a turn of the loop.
func (s *oldAnswerScan) tokens(p []byte, i int) {
	for i < len(p) {
		c := p[i]
		switch s.next {
		case nextKeyOrClose, nextKey:
			if c == '"' {
				i = s.members(p, i)
				break
			}
			if c == '}' && s.next == nextKeyOrClose {
				if !s.closeContainer('}') {
					return
				}
				i++
				continue
			}
			i = s.space(c, i)
		case nextAfter:
			switch c {
			case ',':
				i++
				if s.isArray(s.depth) {
					s.next = nextValue
				} else {
					s.next = nextKey
				}
			case '}', ']':
				if !s.closeContainer(c) {
					return
				}
				i++
			default:
				i = s.space(c, i)
			}
		case nextValue, nextValueOrClose:
			if c == ']' && s.next == nextValueOrClose {
				if !s.closeContainer(']') {
					return
				}
				i++
				continue
			}
			if c <= ' ' {
				i = s.space(c, i)
				break
			}
			i = s.value(p, i, c)
		case nextColon:
			if c == ':' {
				s.next = nextValue
				i++
				continue
			}
			i = s.space(c, i)
		default: // nextEnd
			if s.stopAtEnd {
				s.stopped = i
				return
			}
			i = s.space(c, i)
		}
		if i < 0 {
			return
		}
	}
}

// members reads the members of an object from the name whose quote is at
// p[i], in line while they are plain and compact: the name, its colon, the
// value (a string nobody reads without a call), and on to the next member
// or into an object the value opens. It returns where it stopped, for
// tokens to go on (-1 when cut or refused).
func (s *oldAnswerScan) members(p []byte, i int) int {
	for {
		// The name's plain text, as oldPlainLen measures it (in line).
		text := i + 1
		q, n := p[text:], 0
		for len(q) >= 8 {
			if m := wire.SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
				n += bits.TrailingZeros64(m) >> 3
				goto nameMeasured
			}
			q, n = q[8:], n+8
		}
		for _, c := range q {
			if !wire.PlainByte[c] {
				break
			}
			n++
		}
	nameMeasured:
		end := text + n
		if end < len(p) && p[end] == '"' {
			s.next = nextColon
			if s.depth <= s.watchDepth && s.tellsKey(p[text:end]) {
				s.wantVal = s.watch.key(s.depth, p[text:end], true)
			}
			i = end + 1
		} else if i = s.str(p, i, true); i < 0 {
			return -1
		}
		if i+1 >= len(p) || p[i] != ':' || p[i+1] <= ' ' {
			return i
		}
		s.next = nextValue
		if c := p[i+1]; c != '"' {
			if end := oldScalarEnd(p, i+1); end > 0 && !s.wantVal {
				s.next = nextAfter // a number or literal nobody reads
				i = end
			} else if i = s.value(p, i+1, c); i < 0 {
				return -1
			}
		} else {
			// The value's plain text, likewise.
			text = i + 2
			q, n = p[text:], 0
			for len(q) >= 8 {
				if m := wire.SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
					n += bits.TrailingZeros64(m) >> 3
					goto valueMeasured
				}
				q, n = q[8:], n+8
			}
			for _, c := range q {
				if !wire.PlainByte[c] {
					break
				}
				n++
			}
		valueMeasured:
			end = text + n
			if end < len(p) && p[end] == '"' {
				s.next = nextAfter // inside an object
				if s.wantVal {
					s.wantVal = false
					s.watch.value(s.depth, '"', p[text:end], true)
				}
				i = end + 1
			} else {
				s.strTold, s.wantVal = s.wantVal, false
				if i = s.str(p, i+1, false); i < 0 {
					return -1
				}
			}
		}
		if i < len(p) && s.next == nextAfter && p[i] == '}' {
			// The value ended its object: close it, and on to the next
			// member or element when it is an object's member again.
			if !s.closeContainer('}') {
				return -1
			}
			i++
			if s.next != nextAfter || i+2 >= len(p) || p[i] != ',' {
				return i
			}
			if s.isArray(s.depth) {
				if p[i+1] != '{' || p[i+2] != '"' {
					return i
				}
				s.next = nextValue
				if i = s.value(p, i+1, '{'); i < 0 {
					return -1
				}
				if s.next != nextKeyOrClose || i >= len(p) || p[i] != '"' {
					// Read whole by the element reader, or an element it
					// does not know opened where its first name is not
					// (yet) in this piece: tokens goes on from there.
					return i
				}
				continue
			}
			if p[i+1] != '"' {
				return i
			}
			s.next = nextKey
			i++
			continue
		}
		switch {
		case i+1 < len(p) && s.next == nextAfter && p[i] == ',' && p[i+1] == '"':
			s.next = nextKey // the value ended its member: the next one
			i++
		case i < len(p) && s.next == nextKeyOrClose && p[i] == '"':
			// The value opened an object: its first member.
		default:
			return i
		}
	}
}

// oldScalarEnd returns the end of the integer, decimal fraction or literal
// at p[i] when it is one and ends within p, else 0 (value reads it then).
func oldScalarEnd(p []byte, i int) int {
	switch c := p[i]; {
	case c == 't' || c == 'n':
		if i+4 < len(p) && (string(p[i:i+4]) == "true" || string(p[i:i+4]) == "null") {
			return i + 4
		}
		return 0
	case c == 'f':
		if i+5 < len(p) && string(p[i:i+5]) == "false" {
			return i + 5
		}
		return 0
	case c == '-':
		i++
	}
	j := i
	switch {
	case j < len(p) && p[j] == '0':
		j++
	case j < len(p) && '1' <= p[j] && p[j] <= '9':
		for j++; j < len(p) && '0' <= p[j] && p[j] <= '9'; j++ {
		}
	default:
		return 0
	}
	if j+1 < len(p) && p[j] == '.' && '0' <= p[j+1] && p[j+1] <= '9' {
		for j += 2; j < len(p) && '0' <= p[j] && p[j] <= '9'; j++ {
		}
	}
	if j >= len(p) || p[j] == '.' || p[j] == 'e' || p[j] == 'E' || ('0' <= p[j] && p[j] <= '9') {
		return 0
	}
	return j
}

// space passes the whitespace c at p[i]; anything else where a token
// should be is refused.
func (s *oldAnswerScan) space(c byte, i int) int {
	if c == ' ' || c == '\n' || c == '\r' || c == '\t' {
		return i + 1
	}
	return s.fail()
}

// value reads the value that starts with c at p[i] and returns where it
// ended (-1 when it was cut by the end of p, or refused).
func (s *oldAnswerScan) value(p []byte, i int, c byte) int {
	s.started = true
	want := s.wantVal
	s.wantVal = false
	tell := want || (s.depth <= s.watchDepth && s.depth > 0 && s.isArray(s.depth))
	switch c {
	case '"':
		s.strTold = tell
		return s.str(p, i, false)
	case '{', '[':
		if s.depth >= s.maxDepth {
			return s.fail()
		}
		s.depth++
		d := s.depth
		if c == '[' {
			s.arrays[d>>6] |= 1 << (d & 63)
			s.next = nextValueOrClose
		} else {
			s.arrays[d>>6] &^= 1 << (d & 63)
			s.next = nextKeyOrClose
		}
		if d <= s.watchDepth || want {
			s.watch.open(d, c)
		}
		return i + 1
	case 't', 'f', 'n':
		if tell {
			s.watch.value(s.depth, c, nil, false)
		}
		lit := "null"
		switch c {
		case 't':
			lit = "true"
		case 'f':
			lit = "false"
		}
		if len(p)-i >= len(lit) {
			if string(p[i:i+len(lit)]) != lit {
				return s.fail()
			}
			s.afterValue()
			return i + len(lit)
		}
		s.lit, s.litAt = lit, 0
		return s.literal(p, i)
	}
	if c != '-' && (c < '0' || c > '9') {
		return s.fail()
	}
	if tell {
		s.watch.value(s.depth, c, nil, false)
	}
	// An integer that ends within p is read here; the rest of the grammar
	// by number.
	j := i
	if c == '-' {
		j++
	}
	if j < len(p) && '1' <= p[j] && p[j] <= '9' {
		j++
		for j < len(p) && '0' <= p[j] && p[j] <= '9' {
			j++
		}
		if j+1 < len(p) && p[j] == '.' && '0' <= p[j+1] && p[j+1] <= '9' {
			j += 2
			for j < len(p) && '0' <= p[j] && p[j] <= '9' {
				j++
			}
		}
		if j < len(p) && p[j] != '.' && p[j] != 'e' && p[j] != 'E' {
			s.afterValue()
			return j
		}
	}
	s.num = wire.NumStart
	return s.number(p, i)
}

// closeContainer closes the innermost container with c.
func (s *oldAnswerScan) closeContainer(c byte) bool {
	d := s.depth
	if d == 0 || (c == ']') != s.isArray(d) {
		s.failed = true
		return false
	}
	if d <= s.watchDepth {
		s.watch.close(d)
	}
	s.depth--
	s.afterValue()
	return true
}

// literal goes on matching s.lit from p[i].
func (s *oldAnswerScan) literal(p []byte, i int) int {
	for ; i < len(p); i++ {
		if p[i] != s.lit[s.litAt] {
			return s.fail()
		}
		s.litAt++
		if s.litAt == len(s.lit) {
			s.partial = partNone
			s.afterValue()
			return i + 1
		}
	}
	s.partial = partLiteral
	return -1
}

// number goes on reading a number from p[i] in state s.num (0 before its
// first byte).
func (s *oldAnswerScan) number(p []byte, i int) int {
	st := s.num
	for ; i < len(p); i++ {
		c := p[i]
		if st == wire.NumInt || st == wire.NumFrac || st == wire.NumExpDigit {
			for i < len(p) && '0' <= p[i] && p[i] <= '9' {
				i++
			}
			if i == len(p) {
				break
			}
			c = p[i]
		}
		next, ok := wire.NumberStep(st, c)
		if !ok {
			if !st.Complete() {
				return s.fail()
			}
			s.partial = partNone
			s.afterValue()
			return i // c is read again, as what follows the number
		}
		st = next
	}
	s.num, s.partial = st, partNumber
	return -1
}

// str reads a string whose opening quote is at p[i]; key tells a member
// name from a value.
func (s *oldAnswerScan) str(p []byte, i int, key bool) int {
	s.strKey = key
	text := i + 1
	end := text + oldPlainLen(p[text:])
	if end < len(p) && p[end] == '"' {
		// The common case: plain text, told only when it may matter.
		end++
		if key {
			s.next = nextColon
			if s.depth <= s.watchDepth && s.tellsKey(p[text:end-1]) {
				s.wantVal = s.watch.key(s.depth, p[text:end-1], true)
			}
			return end
		}
		s.afterValue()
		if s.strTold {
			s.watch.value(s.depth, '"', p[text:end-1], true)
		}
		return end
	}
	if key {
		s.strTold = s.depth <= s.watchDepth
	}
	if end = s.stringText(p, end); end < 0 {
		if s.failed {
			return -1
		}
		// Cut by the end of the piece: carry the text on if it is told.
		s.partial = partString
		s.carryLen, s.carryLong = 0, false
		if s.strTold {
			s.keep(p[text:])
		}
		return -1
	}
	if s.strTold {
		s.tellString(p[text : end-1])
	}
	return end
}

// resumeString goes on with a string cut by the end of the last piece.
func (s *oldAnswerScan) resumeString(p []byte) int {
	end := s.stringText(p, 0)
	if end < 0 {
		if !s.failed && s.strTold {
			s.keep(p)
		}
		return -1
	}
	s.partial = partNone
	if s.strTold {
		s.keep(p[:end-1])
		var raw []byte
		if !s.carryLong {
			raw = s.carry[:s.carryLen]
		}
		s.tellString(raw)
	}
	return end
}

func (s *oldAnswerScan) keep(b []byte) {
	if s.carryLong || s.carryLen+len(b) > len(s.carry) {
		s.carryLong = true
		return
	}
	s.carryLen += copy(s.carry[s.carryLen:], b)
}

// tellString tells the watcher about the string just read.
func (s *oldAnswerScan) tellString(raw []byte) {
	if s.strKey {
		s.wantVal = s.watch.key(s.depth, raw, false)
	} else {
		s.watch.value(s.depth, '"', raw, false)
	}
}

// stringText checks a string's text from p[i] on, in the sub-state left
// by the last piece, and returns the index past its closing quote (-1
// when the piece ended first, or the text was refused).
func (s *oldAnswerScan) stringText(p []byte, i int) int {
	for i < len(p) {
		if s.sub == subNone {
			if !s.highSurr {
				for i+8 <= len(p) {
					if m := wire.SpecialBytes(binary.LittleEndian.Uint64(p[i:])); m != 0 {
						i += bits.TrailingZeros64(m) >> 3
						goto special
					}
					i += 8
				}
				for i < len(p) && wire.PlainByte[p[i]] {
					i++
				}
				if i == len(p) {
					return -1
				}
			}
		special:
			c := p[i]
			switch {
			case c == '\\':
				if i+1 < len(p) {
					if e := p[i+1]; e != 'u' {
						if !oldSimpleEscape[e] || s.highSurr {
							return s.fail()
						}
						i += 2
						continue
					}
					if i+6 <= len(p) {
						v := wire.Hex4(p, i+2)
						if v < 0 || !s.surrogate(uint16(v)) {
							return s.fail()
						}
						i += 6
						continue
					}
				}
				s.sub = subEscape
				i++
				continue
			case s.highSurr:
				return s.fail()
			case c == '"':
				if !s.strKey {
					s.afterValue()
				} else {
					s.next = nextColon
				}
				return i + 1
			case c < 0x20:
				return s.fail()
			}
			// A byte past ASCII: a whole sequence is checked at once,
			// two- and three-byte ones (most text past ASCII) in line.
			if c >= 0xC2 && c < 0xE0 && i+1 < len(p) {
				if p[i+1]&0xC0 != 0x80 {
					return s.fail()
				}
				i += 2
				continue
			}
			if c >= 0xE1 && c < 0xF0 && c != 0xED && i+2 < len(p) {
				if p[i+1]&0xC0 != 0x80 || p[i+2]&0xC0 != 0x80 {
					return s.fail()
				}
				i += 3
				continue
			}
			if utf8.FullRune(p[i:]) {
				r, n := utf8.DecodeRune(p[i:])
				if r == utf8.RuneError && n == 1 {
					return s.fail()
				}
				i += n
				continue
			}
			left, lo, hi, ok := wire.RuneStart(c)
			if !ok {
				return s.fail()
			}
			s.sub, s.utfLeft, s.utfLo, s.utfHi = subUTF8, left, lo, hi
			i++
			continue
		}
		c := p[i]
		i++
		switch s.sub {
		case subEscape:
			switch {
			case c == 'u':
				s.sub, s.hex, s.hexLeft = subHex, 0, 4
			case oldSimpleEscape[c] && !s.highSurr:
				s.sub = subNone
			default:
				return s.fail()
			}
		case subHex:
			d := wire.HexDigit[c]
			if d > 0xF {
				return s.fail()
			}
			s.hex = s.hex<<4 | uint16(d)
			s.hexLeft--
			if s.hexLeft == 0 {
				s.sub = subNone
				if !s.surrogate(s.hex) {
					return s.fail()
				}
			}
		case subUTF8:
			if c < s.utfLo || c > s.utfHi {
				return s.fail()
			}
			s.utfLo, s.utfHi = 0x80, 0xBF
			s.utfLeft--
			if s.utfLeft == 0 {
				s.sub = subNone
			}
		}
	}
	return -1
}

// surrogate takes the code unit of a \u escape: a high surrogate must be
// followed at once by the escape of a low one.
func (s *oldAnswerScan) surrogate(v uint16) bool {
	var ok bool
	s.highSurr, ok = wire.Surrogate(v, s.highSurr)
	return ok
}

// oldPlainLen is the length of the plain string text q starts with.
func oldPlainLen(q []byte) int {
	n := 0
	for len(q) >= 8 {
		if m := wire.SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
			return n + bits.TrailingZeros64(m)>>3
		}
		q = q[8:]
		n += 8
	}
	for _, c := range q {
		if !wire.PlainByte[c] {
			break
		}
		n++
	}
	return n
}

var oldSimpleEscape = func() (t [256]bool) {
	for _, c := range `"\/bfnrt` {
		t[c] = true
	}
	return t
}()
