package meter

import "github.com/queengate/queengate/wire"

// PopCount counts the messages of a pop answer as it streams past, without
// keeping it. The gateway bills a pop from a copy of its answer (BillPop,
// which also yields the ids the redelivery filter needs) up to
// MaxBilledBody; past that, a pop of many large messages would otherwise
// be billed no delivery and take nothing from the message bucket, so the
// count goes on here.
//
// The answer is a JSON object whose "messages" member is an array; the
// count is its number of elements (the last "messages" member wins, as in
// the broker's JSON library). An answer that is not one well-formed JSON
// object (wire.Checker's rules), or whose "messages" is not an array,
// counts 0.
type PopCount struct {
	scan     wire.Stream
	messages messagesWatch
}

// NewPopCount returns a count ready for the first piece of an answer.
func NewPopCount() *PopCount {
	p := &PopCount{}
	p.scan.Reset(&p.messages, 3, messagesNames)
	p.scan.ReadElements(&p.messages, 2)
	return p
}

// Write takes the next piece of the answer; it never fails.
func (p *PopCount) Write(b []byte) (int, error) {
	if !p.scan.Whole(b, '}', p.envelope) {
		p.scan.Feed(b)
	}
	return len(b), nil
}

// envelope is messagesWatch.envelope for Stream.Whole: when it declines,
// the watcher is cleared of what it heard.
func (p *PopCount) envelope(b []byte) bool {
	if p.messages.envelope(&p.scan, b) {
		return true
	}
	p.messages = messagesWatch{}
	return false
}

// envelope reads b, the whole answer, when it has the broker's shape (see
// popWatch.envelope) and its messages all have the known shape, leaving
// s and the watcher as the general reader would.
func (w *messagesWatch) envelope(s *wire.Stream, b []byte) bool {
	i, _ := popHead(s, b)
	if i == 0 {
		return false
	}
	w.isObject, w.inMessages = true, true
	if i = wire.ElementsEnd(b, i, func(p []byte, i int) int { return w.Element(s, p, i) }); i < 0 {
		return false
	}
	w.inMessages = false
	return popTailEnds(s, b, i)
}

// Messages is how many messages the whole answer delivered, for an
// upstream status.
func (p *PopCount) Messages(status int) int64 {
	if !is2xx(status) || !p.scan.OK() || !p.messages.isObject {
		return 0
	}
	return p.messages.count
}

// messagesWatch follows the top-level object's members.
type messagesWatch struct {
	isObject   bool
	pending    bool // the member being read is named "messages"
	inMessages bool // inside the "messages" array
	count      int64
}

func (s *messagesWatch) Open(depth int, kind byte) {
	switch {
	case depth == 1:
		s.isObject = kind == '{'
	case depth == 2 && s.pending:
		s.pending, s.count = false, 0
		s.inMessages = kind == '['
	case depth == 3 && s.inMessages:
		s.count++
	}
}

func (s *messagesWatch) Close(depth int) {
	if depth == 2 {
		s.inMessages = false
	}
}

func (s *messagesWatch) Key(depth int, raw []byte, plain bool) bool {
	if depth != 1 || !s.isObject {
		return false
	}
	s.pending = wire.WordIs(raw, plain, "messages")
	return s.pending
}

// value is a scalar or string: an element of the messages array, or the
// value of a top-level "messages" member that is not an array.
func (s *messagesWatch) Value(depth int, _ byte, _ []byte, _ bool) {
	switch {
	case depth == 1 && s.pending:
		s.pending, s.count = false, 0
	case depth == 2 && s.inMessages:
		s.count++
	}
}

// messagesNames is the member name PopCount reads.
var messagesNames = wire.NamesOf("messages")

// popMessageShape is a message of the broker's pop answer (testdata/broker,
// S8 and C34), its data any JSON value; popKeyAt is where the members
// BillPop keys from are in it.
var popMessageShape = wire.ShapeOf(2, "consumerGroup", "createdAt", "data", "id", "leaseId", "partition", "partitionId", "producerSub", "traceId", "transactionId")

const (
	popShapeGroup         = 0
	popShapeID            = 3
	popShapePartitionID   = 6
	popShapeTransactionID = 9
)

// element counts a message of the known shape, read whole.
func (s *messagesWatch) Element(scan *wire.Stream, p []byte, i int) int {
	if !s.inMessages {
		return -1
	}
	end := scan.MatchShape(popMessageShape, p, i, 3, nil)
	if end > 0 {
		s.count++
	}
	return end
}

// Begun is how many messages a pop answer cut short had begun before its
// end, for an upstream status: the answer read so far is a well-formed
// start of one JSON object, and each element of its "messages" array
// that started counts, the one the cut fell in too (when it is an object
// or an array, as the broker's messages are; a scalar counts once whole). The broker sent at
// least these, so a pop whose answer broke off is billed them; a start
// that is not well-formed JSON, or not an object, counts 0, as Messages
// does. It is the same reading as Messages, stopped where the bytes did.
func (p *PopCount) Begun(status int) int64 {
	if !is2xx(status) || p.scan.Failed() || !p.messages.isObject {
		return 0
	}
	return p.messages.count
}
