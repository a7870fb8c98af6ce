package meter

import "github.com/queengate/queengate/wire"

// PushTally counts the per-item statuses of a POST /api/v1/push answer as
// it streams past, without keeping it: the answer to a large push can be
// far larger than anything the gateway should copy (320,000 tiny items
// answer with 74 MB), and billing it must not depend on its size.
//
// The answer is a JSON array with one object per item. An item counts as
// accepted when the last member named exactly "status" is the string
// "queued" or "buffered" (billable, M1); other statuses, other member
// types and elements that are not objects are not billed. An answer that
// is not one well-formed JSON array (wire.Checker's rules) bills
// nothing, whatever it held before it went wrong.
//
// Write it the answer in pieces, then read Outcome once.
type PushTally struct {
	scan  wire.Stream
	items statusWatch
	shape wire.ShapeValues
}

// NewPushTally returns a tally ready for the first piece of an answer.
func NewPushTally() *PushTally {
	t := &PushTally{}
	t.Reset()
	return t
}

// Reset readies t for a new answer. A PushTally must not be copied once
// it is reset (it points into itself).
func (t *PushTally) Reset() {
	t.items = statusWatch{shape: &t.shape}
	t.scan.Reset(&t.items, 2, pushNames)
	t.scan.ReadElements(&t.items, 1)
}

// Write takes the next piece of the answer; it never fails, so it can sit
// beside the client's writer. An unreadable answer is noted and bills 0.
func (t *PushTally) Write(p []byte) (int, error) {
	t.scan.Feed(p)
	return len(p), nil
}

// Outcome is what the whole answer said, for an upstream status.
func (t *PushTally) Outcome(status int) PushOutcome {
	if !is2xx(status) || !t.scan.OK() || !t.items.isArray {
		return PushOutcome{}
	}
	return t.items.out
}

// statusWatch follows the members of the top-level array's objects.
type statusWatch struct {
	out       PushOutcome
	isArray   bool // the top-level value is an array
	inItem    bool // inside an element object (depth 2)
	afterName bool // the member being read is named "status"
	status    statusWord
	shape     *wire.ShapeValues                  // the values of the last item read whole
	lens      [len(pushShapes)]wire.ShapeLengths // per shape, its strings' lengths in the last item read in it
}

type statusWord uint8

const (
	statusOther statusWord = iota
	statusQueued
	statusBuffered
)

func (s *statusWatch) Open(depth int, kind byte) {
	switch depth {
	case 1:
		s.isArray = kind == '['
	case 2:
		if s.isArray && kind == '{' {
			s.inItem, s.status, s.afterName = true, statusOther, false
		}
	}
}

func (s *statusWatch) Close(depth int) {
	if depth != 2 || !s.inItem {
		return
	}
	s.inItem = false
	s.out.Items++
	switch s.status {
	case statusQueued:
		s.out.Accepted++
	case statusBuffered:
		s.out.Accepted++
		s.out.Buffered++
	}
}

func (s *statusWatch) Key(depth int, raw []byte, plain bool) bool {
	if depth != 2 || !s.inItem {
		return false
	}
	// A later "status" replaces an earlier one even when its value is
	// not a string (then the item is not billed).
	s.afterName = wire.WordIs(raw, plain, "status")
	if s.afterName {
		s.status = statusOther
	}
	return s.afterName
}

func (s *statusWatch) Value(depth int, first byte, raw []byte, plain bool) {
	if depth != 2 || !s.inItem || !s.afterName {
		return
	}
	s.afterName = false
	// The last "status" member wins, as in the broker's JSON library.
	switch {
	case first != '"':
	case wire.WordIs(raw, plain, "queued"):
		s.status = statusQueued
	case wire.WordIs(raw, plain, "buffered"):
		s.status = statusBuffered
	}
}

// pushNames is the member name PushTally reads.
var pushNames = wire.NamesOf("status")

// The shapes of the broker's push answer items (testdata/broker, S5): a
// message stored, and a duplicate. statusAt is where "status" is in each.
var pushShapes = [...]struct {
	shape    *wire.Shape
	statusAt int
}{
	{wire.ShapeOf(-1, "index", "message_id", "partition_id", "queueName", "status", "trace_id", "transaction_id"), 4},
	{wire.ShapeOf(-1, "index", "message_id", "queueName", "status", "transaction_id"), 3},
}

// element reads an item of a known shape whole: the same count as its
// open, its members and its close would make.
func (s *statusWatch) Element(scan *wire.Stream, p []byte, i int) int {
	if !s.isArray {
		return -1
	}
	for k := range pushShapes {
		sh := &pushShapes[k]
		end := wire.MatchShapeGuessing(sh.shape, &s.lens[k], p, i, s.shape)
		if end < 0 {
			continue
		}
		s.out.Items++
		if v := s.shape[sh.statusAt]; v.First == '"' {
			switch string(p[v.At:v.End]) {
			case "queued":
				s.out.Accepted++
			case "buffered":
				s.out.Accepted++
				s.out.Buffered++
			}
		}
		return end
	}
	return -1
}
