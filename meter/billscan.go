package meter

import (
	"bytes"
	"math"
	"strings"

	"github.com/queengate/queengate/wire"
)

// BillPop and ReadPopAnswer read a kept pop answer in one pass over
// wire.Stream, and PopKeys one nobody keeps as it streams, with the same
// watcher (popWatch), without decoding it into Go values, by the rules of
// answers (doc.go): member names exactly as the broker writes them, the
// last of a repeated member wins, and what cannot be read exactly bills as
// the broker's answer would at most: a field a key is built from that is not a
// plain string or null leaves its message without a key (a first
// delivery), and a text wire.Check refuses bills nothing.

// popFields is what one message of a pop answer contributes to billing:
// where the raw contents of its keying members lie in the answer (empty
// when absent or null), and which of them could not be read exactly.
// Offsets rather than slices: a pooled list holds no pointer into an
// answer, and filling it costs no write barrier.
type popFields struct {
	id, partitionID, transactionID, group span
	bad                                   uint8 // bit per keying member (popMember*) its last value was neither a plain string nor null
	unkeyable                             bool  // the element is not an object
}

// span is a stretch of the answer: start and length.
type span struct{ at, n int32 }

func (s span) of(body []byte) []byte { return body[s.at : s.at+s.n] }

// popBiller is the state of one pop billing, kept in a pool so that a pop
// allocates its result only, whatever it delivered.
type popBiller struct {
	scan  wire.Stream
	watch popWatch
}

// maxPooledMessages bounds the message list a pooled biller keeps.
const maxPooledMessages = 1 << 16

// read reads a pop answer in one pass, leaving its messages' keying
// members in b.watch: ok false when it is not one well-formed JSON object
// (it bills nothing), shaped true when the answer was the broker's
// envelope (popWatch.envelope) read whole.
func (b *popBiller) read(body []byte) (ok, shaped bool) {
	if len(body) > math.MaxInt32 {
		return false, false // past what a span holds (far past MaxBilledBody)
	}
	w := &b.watch
	w.bodyCap = cap(body)
	b.scan.Reset(w, 3, popNames)
	b.scan.ReadElements(w, 2)
	if b.scan.Whole(body, '}', func(p []byte) bool { return w.envelope(&b.scan, p) }) {
		return true, true
	}
	// Not in the broker's shape: the general reader, from the start.
	*w = popWatch{msgs: w.msgs[:0], bodyCap: cap(body)}
	b.scan.Feed(body)
	return b.scan.OK() && w.isObject, false
}

// clear readies the biller for its pool, keeping its message list unless
// an answer made it outsized.
func (b *popBiller) clear() {
	msgs := b.watch.msgs[:0]
	if cap(msgs) > maxPooledMessages {
		msgs = nil
	}
	b.watch = popWatch{msgs: msgs}
}

// The broker's pop answer around its messages (testdata/broker: S8, C34):
// its head, up to the messages array, and its tails after it.
var (
	popHeadShape    = wire.ShapeOf(-1, "consumerGroup", "leaseId")
	popHeadMessages = wire.HeadOf(`,"messages":[`)
	popTails        = [...]*wire.Shape{
		wire.ShapeFrom(",", -1, "partition", "partitionId", "queue", "success"),
		wire.ShapeFrom(",", -1, "partition", "partitionId", "partitionsClaimed", "queue", "success"),
	}
)

// popHead reads the head of a pop answer of the broker's shape, up to
// the '[' of its messages, and returns where they start and the value of
// its consumerGroup (a plain string or a scalar); 0 when it differs.
func popHead(s *wire.Stream, body []byte) (int, wire.ShapeValue) {
	if len(body) < 64 {
		return 0, wire.ShapeValue{}
	}
	var vals wire.ShapeValues
	i := s.MatchMembers(popHeadShape, body, 0, 1, &vals)
	if i < 0 {
		return 0, wire.ShapeValue{}
	}
	if i = popHeadMessages.Skip(body, i); i < 0 {
		return 0, wire.ShapeValue{}
	}
	return i, vals[0]
}

// popTailEnds reports whether body[i:] is one of the tails of the
// broker's pop answer, ending body.
func popTailEnds(s *wire.Stream, body []byte, i int) bool {
	for _, tail := range &popTails {
		if s.MatchShape(tail, body, i, 1, nil) == len(body) {
			return true
		}
	}
	return false
}

// envelope reads a whole pop answer of the broker's shape, its messages
// all of the known shape, as the general reader would; false (the
// watcher's state then unspecified) when any byte differs.
func (w *popWatch) envelope(s *wire.Stream, body []byte) bool {
	i, group := popHead(s, body)
	if i == 0 {
		return false
	}
	switch group.First {
	case '"':
		w.group = span{group.At, group.End - group.At}
	case 'n':
	default:
		return false
	}
	w.isObject, w.inList = true, true
	if i = wire.ElementsEnd(body, i, func(p []byte, i int) int { return w.Element(s, p, i) }); i < 0 {
		return false
	}
	w.inList = false
	return popTailEnds(s, body, i)
}

// The member whose value popWatch reads next; the keying ones double as
// bits of popFields.bad.
const (
	popMemberNone          uint8 = 0
	popMemberID            uint8 = 1
	popMemberPartitionID   uint8 = 2
	popMemberTransactionID uint8 = 4
	popMemberMessageGroup  uint8 = 8
	popMemberGroup         uint8 = 16
	popMemberMessages      uint8 = 32
)

// popWatch reads the top-level consumerGroup and messages, and the keying
// members of each element of the messages array.
type popWatch struct {
	listPlace // the list is the messages array
	member    uint8
	group     span
	groupBad  bool // the last top-level consumerGroup was neither a plain string nor null
	message   popFields
	msgs      []popFields
	// bodyCap is the answer's capacity: the watcher is told slices of the
	// answer, one whole piece, and a slice's offset in it is bodyCap less
	// the slice's capacity.
	bodyCap int
	shape   wire.ShapeValues // the values of the last message read whole

	// streamed (PopKeys): the answer comes in pieces nobody keeps, so the
	// texts of the keying members are copied into text, which the spans
	// name instead; count is the messages begun, of which msgs holds the
	// first maxStreamedPopKeys.
	streamed bool
	text     []byte
	count    int64
}

// spanOf is where the plain string raw, told to the watcher, lies: in the
// kept answer, or (streamed) in text, where it is copied; ok is false when
// a streamed text is not kept: past maxPopKeyField or maxPopKeyText, or
// for a message msgs no longer records (keep false).
func (w *popWatch) spanOf(raw []byte, keep bool) (s span, ok bool) {
	if !w.streamed {
		return span{int32(w.bodyCap - cap(raw)), int32(len(raw))}, true
	}
	if !keep || len(raw) > maxPopKeyField || len(w.text)+len(raw) > maxPopKeyText {
		return span{}, false
	}
	at := len(w.text)
	w.text = append(w.text, raw...)
	return span{int32(at), int32(len(raw))}, true
}

// keying reports whether the message being read will be recorded: every
// one of a kept answer, the first maxStreamedPopKeys of a streamed one.
func (w *popWatch) keying() bool { return !w.streamed || len(w.msgs) < maxStreamedPopKeys }

// add records a message begun, keeping its fields while msgs has room.
func (w *popWatch) add(m popFields) {
	if w.keying() {
		w.msgs = append(w.msgs, m)
	}
}

func (w *popWatch) Open(depth int, kind byte) {
	member := w.member
	w.member = popMemberNone
	switch {
	case w.open(depth, kind, member == popMemberMessages):
		w.count++
		w.message = popFields{unkeyable: !w.inItem}
		if !w.inItem {
			w.add(w.message)
		}
	case member != popMemberNone && member != popMemberMessages:
		w.set(member, span{}, false) // a keying member that is a container
	}
}

func (w *popWatch) Close(depth int) {
	if w.close(depth) {
		w.add(w.message)
	}
}

func (w *popWatch) Key(depth int, raw []byte, plain bool) bool {
	w.member = popMemberNone
	switch {
	case w.topMember(depth):
		switch {
		case wire.WordIs(raw, plain, "consumerGroup"):
			w.member = popMemberGroup
		case wire.WordIs(raw, plain, "messages"):
			// The last "messages" is the answer's: what an earlier one
			// held is gone.
			w.member, w.msgs, w.inList, w.count = popMemberMessages, w.msgs[:0], false, 0
		}
	case w.itemMember(depth):
		switch {
		case wire.WordIs(raw, plain, "id"):
			w.member = popMemberID
		case wire.WordIs(raw, plain, "partitionId"):
			w.member = popMemberPartitionID
		case wire.WordIs(raw, plain, "transactionId"):
			w.member = popMemberTransactionID
		case wire.WordIs(raw, plain, "consumerGroup"):
			w.member = popMemberMessageGroup
		}
	}
	return w.member != popMemberNone
}

func (w *popWatch) Value(depth int, first byte, raw []byte, _ bool) {
	member := w.member
	w.member = popMemberNone
	switch member {
	case popMemberNone:
		if depth == 2 && w.inList {
			// An element that is not an object: a message without a key.
			w.count++
			w.add(popFields{unkeyable: true})
		}
	case popMemberMessages:
		// Not an array: no messages.
	default:
		switch {
		case first == 'n':
			w.set(member, span{}, true)
		case first == '"' && raw != nil && bytes.IndexByte(raw, '\\') < 0: // no escape: its spelling is its text
			v, ok := w.spanOf(raw, member == popMemberGroup || w.keying())
			w.set(member, v, ok)
		default:
			w.set(member, span{}, false)
		}
	}
}

// set takes the last value of a keying member: ok false when it was not
// read exactly (an escaped string, a number, a container).
func (w *popWatch) set(member uint8, v span, ok bool) {
	if member == popMemberGroup {
		w.group, w.groupBad = v, !ok
		return
	}
	w.message.set(member, v, ok)
}

// set takes the last value of one of the message's keying members
// (popMemberID, popMemberPartitionID, popMemberTransactionID or
// popMemberMessageGroup).
func (m *popFields) set(member uint8, v span, ok bool) {
	switch member {
	case popMemberID:
		m.id = v
	case popMemberPartitionID:
		m.partitionID = v
	case popMemberTransactionID:
		m.transactionID = v
	case popMemberMessageGroup:
		m.group = v
	}
	if ok {
		m.bad &^= member
	} else {
		m.bad |= member
	}
}

// Element takes the keying members of a message of the known shape, read
// whole: a plain string sets its field, null leaves it empty, and anything
// else is left to the general reader.
func (w *popWatch) Element(scan *wire.Stream, p []byte, i int) int {
	if !w.inList {
		return -1
	}
	end := scan.MatchShape(popMessageShape, p, i, 3, &w.shape)
	if end < 0 {
		return -1
	}
	base, text, keep := w.bodyCap-cap(p), len(w.text), w.keying()
	var m popFields
	for _, f := range [...]struct {
		at     int
		member uint8
		into   *span
	}{{popShapeGroup, popMemberMessageGroup, &m.group}, {popShapeID, popMemberID, &m.id},
		{popShapePartitionID, popMemberPartitionID, &m.partitionID}, {popShapeTransactionID, popMemberTransactionID, &m.transactionID}} {
		switch v := w.shape[f.at]; {
		case v.First == '"' && !w.streamed:
			*f.into = span{int32(base) + v.At, v.End - v.At}
		case v.First == '"':
			s, ok := w.spanOf(p[v.At:v.End], keep)
			m.set(f.member, s, ok)
		case v.First != 'n':
			w.text = w.text[:text] // nothing read: the general reader reads it again
			return -1
		}
	}
	w.count++
	w.add(m)
	return end
}

// popKeys builds the redelivery keys of BillPop, all in one string: two
// allocations, the string and the list.
func popKeys(body []byte, msgs []popFields, answerGroup span, groupBad bool) []string {
	size, count := 0, 0
	for i := range msgs {
		if head, tail, group, ok := msgs[i].key(answerGroup, groupBad); ok {
			size += int(head.n) + 1 + int(tail.n) + 1 + int(group.n)
			count++
		}
	}
	if count == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	var spelled [256]byte
	for i := range msgs {
		if head, tail, group, ok := msgs[i].key(answerGroup, groupBad); ok {
			b.Write(appendKey(spelled[:0], body, head, tail, group))
		}
	}
	all, start := b.String(), 0
	ids := make([]string, 0, count)
	for i := range msgs {
		if head, tail, group, ok := msgs[i].key(answerGroup, groupBad); ok {
			end := start + int(head.n) + 1 + int(tail.n) + 1 + int(group.n)
			ids = append(ids, all[start:end])
			start = end
		}
	}
	return ids
}

// appendKey spells a key, its head, tail and group joined by '/', out of
// the text its spans are in.
func appendKey(dst, text []byte, head, tail, group span) []byte {
	if head == idKeyHead {
		dst = append(dst, "id"...)
	} else {
		dst = append(dst, head.of(text)...)
	}
	dst = append(dst, '/')
	dst = append(dst, tail.of(text)...)
	dst = append(dst, '/')
	return append(dst, group.of(text)...)
}

// idKeyHead stands for the head "id" of a key by id (it is not in the
// answer): a span no member has.
var idKeyHead = span{at: -1, n: int32(len("id"))}

// key names the message: partitionId and transactionId when it has both,
// else "id" and its id, with its own consumer group, else the answer's;
// ok false when it has neither, or a member it is built from could not be
// read exactly. The key is head, tail and group joined by '/'.
func (m *popFields) key(answerGroup span, answerGroupBad bool) (head, tail, group span, ok bool) {
	if m.unkeyable || m.bad != 0 {
		return span{}, span{}, span{}, false
	}
	group = m.group
	if group.n == 0 {
		if answerGroupBad {
			return span{}, span{}, span{}, false
		}
		group = answerGroup
	}
	switch {
	case m.partitionID.n > 0 && m.transactionID.n > 0:
		return m.partitionID, m.transactionID, group, true
	case m.id.n > 0:
		return idKeyHead, m.id, group, true
	}
	return span{}, span{}, span{}, false
}

// popNames are the member names BillPop reads.
var popNames = wire.NamesOf("consumerGroup", "messages", "id", "partitionId", "transactionId")

// popMessageShape is a message of the broker's pop answer (testdata/broker,
// S8 and C34), its data any JSON value; the constants below are where the
// members BillPop keys from are in it.
var popMessageShape = wire.ShapeOf(2, "consumerGroup", "createdAt", "data", "id", "leaseId", "partition", "partitionId", "producerSub", "traceId", "transactionId")

const (
	popShapeGroup         = 0
	popShapeID            = 3
	popShapePartitionID   = 6
	popShapeTransactionID = 9
)
