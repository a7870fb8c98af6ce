package wire

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Stream is the grammar over the pieces of a streamed answer: a strict,
// streaming JSON reader that accepts exactly what Checker accepts (valid
// UTF-8, no byte-order mark, no half surrogate pair, nesting within
// DefaultMaxDepth, RFC 8259 otherwise), and tells its StreamWatcher only
// about the few places a reader of the answer looks. Its grammar is the
// core's (scan.go): Stream follows the containers down to the watcher's
// depth itself, since that is where it tells, and hands every string's
// text past its plain start, every number and literal, and every value
// that opens deeper than the watcher's depth to the core, which reads it
// (resuming inside it when a piece cuts it) and says where it ended. So
// a message's payload is checked by the grammar every body passes, and
// nothing is told of it; nothing is allocated, whatever the answer, but
// once a reader for a value nested past the core's fixed stack. The
// element shapes of shape.go read the broker's fixed elements whole,
// faster still.
//
// The watcher hears, at depth (the containers open around the event, 1
// inside the top-level value):
//   - Open, for a container at depth <= watchDepth, or one that is the
//     value of a member whose key the watcher asked for;
//   - Close, for a container at depth <= watchDepth;
//   - Key, for a member name at depth <= watchDepth that may be one of
//     the watcher's words (any name with an escape or a byte past ASCII,
//     or a plain one of a word's length and first byte): raw text, escapes
//     intact, nil when longer than carried across a piece (64 bytes: no
//     word a reader looks for is that long), and plain when it is known to
//     hold no escape and nothing past ASCII; it returns whether it wants
//     the member's value. Names are the broker's, matched exactly (WordIs).
//   - Value, for a string, number or literal that is the value of a
//     member it asked for, or an element of an array at depth <=
//     watchDepth: first is '"' for a string (raw its text, as for Key)
//     or a number's or literal's first byte (raw nil), plain as for Key.
//
// Its verdict is fuzzed against Check (meter's FuzzAnswerScanVerdict), and
// what it tells against the reader it replaced (FuzzStreamMatchesOldScan).
type Stream struct {
	watch      StreamWatcher
	watchDepth int
	names      Names                               // the plain member names told
	arrays     [(DefaultMaxDepth + 64) / 64]uint64 // bit d: the container at depth d is an array (set as it opens)
	// The text of a string the watcher hears, when it is cut by the end
	// of a piece: up to len(carry) bytes, else carryLong.
	carry [64]byte
	// elems reads whole the element objects of arrays at elemDepth that it
	// knows the shape of (see shape.go); -1 when none is read so.
	elems     ElementReader
	elemDepth int
	// core reads the token (or the untold value) partial says is being
	// read, and the nested values MatchShape checks; each use readies it,
	// so Reset leaves it (and the stack it may have grown) alone.
	core scanner

	streamState // what Reset clears
}

type streamState struct {
	failed  bool
	started bool  // the top-level value has started
	next    uint8 // what may come after the last complete token
	depth   int
	wantVal bool  // the watcher asked for the next value
	partial uint8 // a token the core reads, cut by the end of a piece
	strKey  bool  // the string being read is a key
	strTold bool  // and the watcher hears it

	carryLen  int
	carryLong bool
}

type StreamWatcher interface {
	Open(depth int, kind byte)
	Close(depth int)
	Key(depth int, raw []byte, plain bool) (wantValue bool)
	Value(depth int, first byte, raw []byte, plain bool)
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

// Tokens the core reads, cut by the end of a piece.
const (
	partNone   uint8 = iota
	partString       // a string's text
	partValue        // a number, a literal, or a value nothing is told of
)

// Names is the plain member names (no escape, nothing past ASCII) a
// watcher hears: those with the length and the first byte of one of its
// words, since no other can be one of them.
type Names struct {
	lens  uint64    // bit n: names of n bytes
	first [4]uint64 // bit c: names that start with c
}

// NamesOf is the filter for words, which are matched exactly: a name of
// another length or first byte is none of them.
func NamesOf(words ...string) *Names {
	f := &Names{}
	for _, word := range words {
		f.lens |= 1 << len(word)
		c := word[0]
		f.first[c>>6] |= 1 << (c & 63)
	}
	return f
}

// Reset readies s for a new text, told to w up to depth, of the plain
// member names the filter lets through. The nesting bits and the carried
// text need no clearing: each is written before it is read.
func (s *Stream) Reset(w StreamWatcher, depth int, names *Names) {
	s.watch, s.watchDepth, s.names = w, depth, *names
	s.elems, s.elemDepth = nil, -1
	s.streamState = streamState{}
}

// ReadElements has r read the element objects of the arrays at depth
// (the arrays' own depth) whole, where it knows their shape; it comes
// after Reset.
func (s *Stream) ReadElements(r ElementReader, depth int) {
	s.elems, s.elemDepth = r, depth
}

// tellsKey reports whether the watcher hears the plain member name raw.
func (s *Stream) tellsKey(raw []byte) bool {
	n := len(raw)
	return n < 64 && s.names.lens>>n&1 != 0 && s.names.first[raw[0]>>6]>>(raw[0]&63)&1 != 0
}

// OK reports whether everything fed is one complete, well-formed JSON
// text.
func (s *Stream) OK() bool {
	if s.failed || !s.started {
		return false
	}
	switch s.partial {
	case partNone:
		return s.next == nextEnd
	case partValue: // a top-level number the text's end ends
		return s.depth == 0 && s.core.state == rNum && s.core.d == 0 && s.core.num.Complete()
	}
	return false
}

func (s *Stream) isArray(depth int) bool { return s.arrays[depth>>6]>>(depth&63)&1 != 0 }

// Feed reads the next piece of the text.
func (s *Stream) Feed(p []byte) {
	if s.failed || s.watch == nil {
		// Never Reset: a reader that was not readied reads nothing, as
		// one that read nothing it watches.
		s.failed = true
		return
	}
	i := 0
	switch s.partial {
	case partString:
		i = s.resumeString(p)
	case partValue:
		if i = s.token(p, 0, partValue); i >= 0 {
			s.afterValue()
		}
	}
	if i < 0 || s.failed {
		return
	}
	s.tokens(p, i)
}

// Failed reports that the text fed so far is no start of a well-formed
// JSON text (or s was never Reset).
func (s *Stream) Failed() bool { return s.failed || s.watch == nil }

// Whole lets read take p whole, before anything else was fed, when p may
// be all of the answer (it ends with end, as the answer's value does):
// read matches it with the element shapes (shape.go) and reports whether
// every byte of it was of the broker's shape, so well formed; then s is
// left as if it had read p, and Whole reports true. Otherwise (read saw a
// byte it does not know) nothing is read, and the caller, having cleared
// what read told its watcher, feeds p to the general reader.
func (s *Stream) Whole(p []byte, end byte, read func(p []byte) bool) bool {
	if s.started || s.failed || s.watch == nil || len(p) == 0 || p[len(p)-1] != end {
		return false
	}
	if !read(p) {
		return false
	}
	s.started, s.next = true, nextEnd
	return true
}

// fail marks the text unreadable; it returns -1, for the token readers.
func (s *Stream) fail() int {
	s.failed = true
	return -1
}

// token has the core go on from p[i] with the token it was readied for,
// and returns the index past it; -1 when it was refused, or cut by the
// end of p (part is then the token to go on with).
func (s *Stream) token(p []byte, i int, part uint8) int {
	i = s.core.scan(p, i)
	switch s.core.state {
	case rDone:
		s.partial = partNone
		return i
	case rFail:
		return s.fail()
	}
	s.partial = part
	return -1
}

// afterValue moves on after a complete value.
func (s *Stream) afterValue() {
	if s.depth == 0 {
		s.next = nextEnd
	} else {
		s.next = nextAfter
	}
}

// tokens reads p from i, a token at a time. The broker writes compact
// JSON, so the common path goes from a key to its colon to its value
// without a turn of the loop.
func (s *Stream) tokens(p []byte, i int) {
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
func (s *Stream) members(p []byte, i int) int {
	for {
		// The name's plain text, as PlainLen measures it (in line).
		text := i + 1
		q, n := p[text:], 0
		for len(q) >= 8 {
			if m := SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
				n += bits.TrailingZeros64(m) >> 3
				goto nameMeasured
			}
			q, n = q[8:], n+8
		}
		for _, c := range q {
			if !PlainByte[c] {
				break
			}
			n++
		}
	nameMeasured:
		end := text + n
		if end < len(p) && p[end] == '"' {
			s.next = nextColon
			if s.depth <= s.watchDepth && s.tellsKey(p[text:end]) {
				s.wantVal = s.watch.Key(s.depth, p[text:end], true)
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
			if end := ScalarEnd(p, i+1); end > 0 && !s.wantVal {
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
				if m := SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
					n += bits.TrailingZeros64(m) >> 3
					goto valueMeasured
				}
				q, n = q[8:], n+8
			}
			for _, c := range q {
				if !PlainByte[c] {
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
					s.watch.Value(s.depth, '"', p[text:end], true)
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

// ScalarEnd returns the end of the integer, decimal fraction or literal
// at p[i] when it is one and ends within p, else 0 (value reads it then).
func ScalarEnd(p []byte, i int) int {
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
func (s *Stream) space(c byte, i int) int {
	if Space(c) {
		return i + 1
	}
	return s.fail()
}

// value reads the value that starts with c at p[i] and returns where it
// ended (-1 when it was cut by the end of p, or refused).
func (s *Stream) value(p []byte, i int, c byte) int {
	s.started = true
	want := s.wantVal
	s.wantVal = false
	tell := want || (s.depth <= s.watchDepth && s.depth > 0 && s.isArray(s.depth))
	switch {
	case c == '"':
		s.strTold = tell
		return s.str(p, i, false)
	case c == '{' || c == '[':
		if c == '{' && s.depth == s.elemDepth && !want && s.isArray(s.depth) {
			// Elements the element reader knows, one after the other;
			// the first it does not know opens here as any other.
			for {
				end := s.elems.Element(s, p, i)
				if end < 0 {
					break
				}
				if end+1 < len(p) && p[end] == ',' && p[end+1] == '{' {
					i = end + 1
					continue
				}
				s.next = nextAfter
				return end
			}
		}
		if s.depth >= DefaultMaxDepth {
			return s.fail()
		}
		d := s.depth + 1
		if d > s.watchDepth {
			// Nothing inside is told: the core reads it all.
			if want {
				s.watch.Open(d, c)
			}
			break
		}
		s.depth = d
		if c == '[' {
			s.arrays[d>>6] |= 1 << (d & 63)
			s.next = nextValueOrClose
		} else {
			s.arrays[d>>6] &^= 1 << (d & 63)
			s.next = nextKeyOrClose
		}
		s.watch.Open(d, c)
		return i + 1
	case c == 't' || c == 'f' || c == 'n' || c == '-' || c-'0' < 10:
		if tell {
			s.watch.Value(s.depth, c, nil, false)
		}
	default:
		return s.fail()
	}
	s.core.begin(s.depth)
	if i = s.token(p, i, partValue); i >= 0 {
		s.afterValue()
	}
	return i
}

// closeContainer closes the innermost container with c.
func (s *Stream) closeContainer(c byte) bool {
	d := s.depth
	if d == 0 || (c == ']') != s.isArray(d) {
		s.failed = true
		return false
	}
	s.watch.Close(d)
	s.depth--
	s.afterValue()
	return true
}

// str reads a string whose opening quote is at p[i]; key tells a member
// name from a value.
func (s *Stream) str(p []byte, i int, key bool) int {
	s.strKey = key
	text := i + 1
	end := text + PlainLen(p[text:])
	if end < len(p) && p[end] == '"' {
		// The common case: plain text, told only when it may matter.
		end++
		if key {
			s.next = nextColon
			if s.depth <= s.watchDepth && s.tellsKey(p[text:end-1]) {
				s.wantVal = s.watch.Key(s.depth, p[text:end-1], true)
			}
			return end
		}
		s.afterValue()
		if s.strTold {
			s.watch.Value(s.depth, '"', p[text:end-1], true)
		}
		return end
	}
	if key {
		s.strTold = s.depth <= s.watchDepth
	}
	// The rest of the text, from its first byte that needs a look, is the
	// core's.
	s.core.state, s.core.d, s.core.key, s.core.high = rStr, 0, false, false
	if end = s.token(p, end, partString); end < 0 {
		if s.failed {
			return -1
		}
		// Cut by the end of the piece: carry the text on if it is told.
		s.carryLen, s.carryLong = 0, false
		if s.strTold {
			s.keep(p[text:])
		}
		return -1
	}
	s.endString()
	if s.strTold {
		s.tellString(p[text : end-1])
	}
	return end
}

// resumeString goes on with a string cut by the end of the last piece.
func (s *Stream) resumeString(p []byte) int {
	end := s.token(p, 0, partString)
	if end < 0 {
		if !s.failed && s.strTold {
			s.keep(p)
		}
		return -1
	}
	s.endString()
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

// endString moves on after a string's closing quote.
func (s *Stream) endString() {
	if s.strKey {
		s.next = nextColon
	} else {
		s.afterValue()
	}
}

func (s *Stream) keep(b []byte) {
	if s.carryLong || s.carryLen+len(b) > len(s.carry) {
		s.carryLong = true
		return
	}
	s.carryLen += copy(s.carry[s.carryLen:], b)
}

// tellString tells the watcher about the string just read.
func (s *Stream) tellString(raw []byte) {
	if s.strKey {
		s.wantVal = s.watch.Key(s.depth, raw, false)
	} else {
		s.watch.Value(s.depth, '"', raw, false)
	}
}

// PlainEnd returns the index of the first byte at or after i that is not
// plain string text, or len(p).
func PlainEnd(p []byte, i int) int { return i + PlainLen(p[i:]) }

// PlainLen is the length of the plain string text q starts with.
func PlainLen(q []byte) int {
	n := 0
	for len(q) >= 8 {
		if m := SpecialBytes(binary.LittleEndian.Uint64(q)); m != 0 {
			return n + bits.TrailingZeros64(m)>>3
		}
		q = q[8:]
		n += 8
	}
	for _, c := range q {
		if !PlainByte[c] {
			break
		}
		n++
	}
	return n
}

// WordIs reports whether raw, a string's text with escapes intact (nil
// when too long to have been kept), is word once unescaped; plain says
// the reader saw no escape in it.
func WordIs(raw []byte, plain bool, word string) bool {
	switch {
	case raw == nil:
		return false
	case plain || len(raw) == len(word):
		return string(raw) == word
	case len(raw) < len(word) || len(raw) > 6*len(word) || bytes.IndexByte(raw, '\\') < 0:
		// An escape is six bytes for a character of the words looked for.
		return false
	}
	return UnescapedIs(raw, word)
}
