package wire

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Stream is the grammar over the pieces of a streamed answer: the core
// (scan.go), which accepts exactly what Checker accepts (valid UTF-8, no
// byte-order mark, no half surrogate pair, nesting within
// DefaultMaxDepth, RFC 8259 otherwise) and resumes anywhere a piece ends,
// with a watcher that tells its StreamWatcher only about the few places a
// reader of the answer looks. The core tells nothing deeper than the
// watcher's depth, at the cost of a comparison, so a message's payload is
// checked and passed over; the element shapes of shape.go read the
// broker's fixed elements whole, faster still. Nothing is allocated,
// whatever the answer, but once a reader for a value nested past the
// core's fixed stack, and once the room for a long string KeepLong
// asked for.
//
// The watcher hears, at depth (the containers open around the event, 1
// inside the top-level value):
//   - Open, for a container at depth <= watchDepth, or one that is the
//     value of a member whose key the watcher asked for;
//   - Close, for a container at depth <= watchDepth;
//   - Key, for a member name at depth <= watchDepth that may be one of
//     the watcher's words (any name with an escape or a byte past ASCII,
//     or cut by the end of a piece, or a plain one of a word's length and
//     first byte): raw text, escapes intact, nil when longer than carried
//     across a piece (64 bytes, no word a reader looks for is that long,
//     unless KeepLong asked for more),
//     and plain when it is known to hold no escape and nothing past ASCII;
//     it returns whether it wants the member's value. Names are the
//     broker's, matched exactly (WordIs).
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
	names      Names // the plain member names told
	// The text of a string the watcher hears, when it is cut by the end
	// of a piece: up to len(carry) bytes, or up to keepLong in long (see
	// KeepLong), else carryLong.
	carry    [64]byte
	long     []byte
	keepLong int
	// elems reads whole the element objects of arrays at elemDepth that it
	// knows the shape of (see shape.go); -1 when none is read so.
	elems     ElementReader
	elemDepth int
	// core reads the text, telling streamHears; nest checks the nested
	// values of the elements read whole (MatchShape). Each reading readies
	// them, so Reset leaves them (and the stack they may have grown) alone.
	core, nest scanner

	streamState // what Reset clears
}

type streamState struct {
	failed  bool
	started bool // the top-level value has started
	done    bool // and ended
	piece   int  // the pieces fed

	// The string being read, when the core tells it: a key or a value,
	// at what depth, begun in which piece, and its text in this piece
	// (whole, when it began in it).
	strKey   bool
	strDepth int
	strPiece int
	part     []byte

	carryLen  int
	carryLong bool
}

type StreamWatcher interface {
	Open(depth int, kind byte)
	Close(depth int)
	Key(depth int, raw []byte, plain bool) (wantValue bool)
	Value(depth int, first byte, raw []byte, plain bool)
}

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
// member names the filter lets through. The carried text needs no
// clearing: it is written before it is read.
func (s *Stream) Reset(w StreamWatcher, depth int, names *Names) {
	s.watch, s.watchDepth, s.names = w, depth, *names
	s.elems, s.elemDepth = nil, -1
	s.keepLong = 0
	s.streamState = streamState{}
}

// KeepLong has s carry the text of a string the watcher hears up to n
// bytes across the ends of pieces, for a watcher that needs every name
// of the answer whole (a queue's, up to the broker's 255 characters each
// escaped); it comes after Reset. By default a string cut by the end of
// a piece is told whole up to 64 bytes, and as nil past that.
func (s *Stream) KeepLong(n int) { s.keepLong = n }

// ReadElements has r read the element objects of the arrays at depth
// (the arrays' own depth) whole, where it knows their shape; it comes
// after Reset.
func (s *Stream) ReadElements(r ElementReader, depth int) {
	s.elems, s.elemDepth = r, depth
}

// pass reports whether the watcher hears the plain member name raw.
func (f *Names) pass(raw []byte) bool {
	n := len(raw)
	return n < 64 && f.lens>>n&1 != 0 && f.first[raw[0]>>6]>>(raw[0]&63)&1 != 0
}

// OK reports whether everything fed is one complete, well-formed JSON
// text.
func (s *Stream) OK() bool {
	if s.failed || !s.started {
		return false
	}
	// A top-level number the text's end ends is complete too.
	return s.done || s.core.state == rNum && s.core.d == 0 && s.core.num.Complete()
}

// Feed reads the next piece of the text.
func (s *Stream) Feed(p []byte) {
	if s.failed || s.watch == nil {
		// Never Reset: a reader that was not readied reads nothing, as
		// one that read nothing it watches.
		s.failed = true
		return
	}
	s.piece++
	i := 0
	if !s.started {
		if i = SkipSpace(p, 0); i == len(p) {
			return
		}
		s.started = true
		s.core.begin(0)
		s.core.watch, s.core.wd, s.core.every, s.core.want = (*streamHears)(s), s.watchDepth, false, false
		s.core.names, s.core.elems = &s.names, nil
		if s.elems != nil {
			s.core.elems = s
		}
	}
	if !s.done {
		switch i = s.core.scan(p, i); s.core.state {
		case rFail:
			s.failed = true
			return
		case rDone:
			s.done = true
		default:
			if s.core.tell != tellNone && s.core.state >= rStr && s.core.state <= rUTF8 {
				// A told string cut by the end of the piece: its text
				// goes on with the next one.
				s.keep(s.part)
				s.part = nil
			}
			return
		}
	}
	if SkipSpace(p, i) < len(p) {
		s.failed = true // more than one value
	}
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
	s.started, s.done = true, true
	return true
}

// element has the ElementReader read the object at b[i], an element of
// the array at depth d, whole when it knows its shape, and the elements
// that follow it at once, one after the other; it returns the end of the
// last one read, for the core to go on from, or -1 to leave the element
// to the core.
func (s *Stream) element(b []byte, i, d int) int {
	if d == 0 || s.core.want || s.core.object(d) {
		return -1
	}
	end := s.elems.Element(s, b, i)
	for end >= 0 && end+1 < len(b) && b[end] == ',' && b[end+1] == '{' {
		next := s.elems.Element(s, b, end+1)
		if next < 0 {
			break
		}
		end = next
	}
	return end
}

// streamHears is the core's Watcher for a Stream: the core calls it only
// where the Stream may tell (scanner.hears), and it tells the
// StreamWatcher what the Stream promises it, and nothing else. A value it
// hears of is the one a told key wanted, if any: that want is spent.
type streamHears Stream

func (h *streamHears) Open(d int, c byte) {
	h.watch.Open(d, c)
	h.core.want = false
}

func (h *streamHears) Close(d int) { h.watch.Close(d) }

func (h *streamHears) Scalar(d int, c byte) {
	h.watch.Value(d, c, nil, false)
	h.core.want = false
}

func (h *streamHears) StringStart(d int, key bool) {
	h.strKey, h.strDepth, h.strPiece, h.part = key, d, h.piece, nil
	h.carryLen, h.carryLong = 0, false
	if !key {
		h.core.want = false
	}
}

func (h *streamHears) StringPart(raw []byte) { h.part = raw }

func (h *streamHears) StringEnd() {
	s := (*Stream)(h)
	raw, plain := h.part, false
	if h.strPiece == h.piece {
		if raw == nil {
			raw = h.carry[:0] // empty, which is not nil (too long)
		}
		plain = PlainLen(raw) == len(raw)
	} else if s.keep(raw); h.carryLong {
		raw = nil
	} else {
		raw = s.carried()
	}
	// A plain name the core measured is one the filter let through.
	if h.strKey {
		h.core.want = h.watch.Key(h.strDepth, raw, plain)
	} else {
		h.watch.Value(h.strDepth, '"', raw, plain)
	}
}

func (s *Stream) keep(b []byte) {
	n := s.carryLen + len(b)
	switch {
	case s.carryLong:
		return
	case n <= len(s.carry):
		copy(s.carry[s.carryLen:], b)
	case n <= s.keepLong:
		if s.carryLen <= len(s.carry) {
			s.long = append(s.long[:0], s.carry[:s.carryLen]...)
		}
		s.long = append(s.long, b...)
	default:
		s.carryLong = true
		return
	}
	s.carryLen = n
}

// carried is the text keep kept.
func (s *Stream) carried() []byte {
	if s.carryLen <= len(s.carry) {
		return s.carry[:s.carryLen]
	}
	return s.long
}

// ScalarEnd returns the end of the integer, decimal fraction or literal
// at p[i] when it is one and ends within p, else 0 (an element shape then
// leaves the element to the core).
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
