package meter

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
	scan  answerScan
	items statusWatch
	shape shapeValues
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
	t.scan.reset(&t.items, 2, pushNames)
	t.scan.readElements(&t.items, 1)
}

// Write takes the next piece of the answer; it never fails, so it can sit
// beside the client's writer. An unreadable answer is noted and bills 0.
func (t *PushTally) Write(p []byte) (int, error) {
	t.scan.write(p)
	return len(p), nil
}

// Outcome is what the whole answer said, for an upstream status.
func (t *PushTally) Outcome(status int) PushOutcome {
	if !is2xx(status) || !t.scan.ok() || !t.items.isArray {
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
	shape     *shapeValues                 // the values of the last item read whole
	lens      [len(pushShapes)]pushLengths // per shape, its strings' lengths in the last item read in it
}

type statusWord uint8

const (
	statusOther statusWord = iota
	statusQueued
	statusBuffered
)

func (s *statusWatch) open(depth int, kind byte) {
	switch depth {
	case 1:
		s.isArray = kind == '['
	case 2:
		if s.isArray && kind == '{' {
			s.inItem, s.status, s.afterName = true, statusOther, false
		}
	}
}

func (s *statusWatch) close(depth int) {
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

func (s *statusWatch) key(depth int, raw []byte, plain bool) bool {
	if depth != 2 || !s.inItem {
		return false
	}
	// A later "status" replaces an earlier one even when its value is
	// not a string (then the item is not billed).
	s.afterName = wordIs(raw, plain, "status")
	if s.afterName {
		s.status = statusOther
	}
	return s.afterName
}

func (s *statusWatch) value(depth int, first byte, raw []byte, plain bool) {
	if depth != 2 || !s.inItem || !s.afterName {
		return
	}
	s.afterName = false
	// The last "status" member wins, as in the broker's JSON library.
	switch {
	case first != '"':
	case wordIs(raw, plain, "queued"):
		s.status = statusQueued
	case wordIs(raw, plain, "buffered"):
		s.status = statusBuffered
	}
}

// pushNames is the member name PushTally reads.
var pushNames = namesOf(false, "status")

// The shapes of the broker's push answer items (testdata/broker, S5): a
// message stored, and a duplicate. statusAt is where "status" is in each.
var pushShapes = [...]struct {
	shape    *answerShape
	statusAt int
}{
	{shapeOf(-1, "index", "message_id", "partition_id", "queueName", "status", "trace_id", "transaction_id"), 4},
	{shapeOf(-1, "index", "message_id", "queueName", "status", "transaction_id"), 3},
}

// element reads an item of a known shape whole: the same count as its
// open, its members and its close would make.
func (s *statusWatch) element(scan *answerScan, p []byte, i int) int {
	if !s.isArray {
		return -1
	}
	for k := range pushShapes {
		sh := &pushShapes[k]
		end := matchPushShape(sh.shape, &s.lens[k], p, i, s.shape)
		if end < 0 {
			continue
		}
		s.out.Items++
		if v := s.shape[sh.statusAt]; v.first == '"' {
			switch string(p[v.at:v.end]) {
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
