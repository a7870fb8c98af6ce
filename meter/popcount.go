package meter

import "github.com/queengate/queengate/internal/jsonscan"

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
// object (jsonscan.Checker's rules), or whose "messages" is not an array,
// counts 0.
type PopCount struct {
	check jsonscan.Checker
	scan  messagesScan
}

// NewPopCount returns a count ready for the first piece of an answer.
func NewPopCount() *PopCount {
	p := &PopCount{}
	p.check.Watch = &p.scan
	return p
}

// Write takes the next piece of the answer; it never fails.
func (p *PopCount) Write(b []byte) (int, error) {
	_ = p.check.Write(b)
	return len(b), nil
}

// Messages is how many messages the whole answer delivered, for an
// upstream status.
func (p *PopCount) Messages(status int) int64 {
	if !is2xx(status) || p.check.Close() != nil || !p.scan.isObject {
		return 0
	}
	return p.scan.count
}

// messagesScan follows the top-level object's members.
type messagesScan struct {
	isObject   bool
	pending    bool // the member being read is named "messages"
	inMessages bool // inside the "messages" array
	count      int64

	readingKey bool
	text       [16]byte // a top-level member name, when short enough to be "messages"
	textLen    int
	textLong   bool
}

func (s *messagesScan) Open(depth int, kind byte) {
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

func (s *messagesScan) Close(depth int) {
	if depth == 2 {
		s.inMessages = false
	}
}

func (s *messagesScan) Scalar(depth int, _ byte) {
	s.element(depth)
}

func (s *messagesScan) StringStart(depth int, key bool) {
	s.readingKey = false
	if depth == 1 && key && s.isObject {
		s.readingKey, s.textLen, s.textLong = true, 0, false
		return
	}
	if !key {
		s.element(depth)
	}
}

// element notes a scalar or string value at depth: an element of the
// messages array, or the value of a top-level "messages" member that is
// not an array.
func (s *messagesScan) element(depth int) {
	switch {
	case depth == 1 && s.pending:
		s.pending, s.count = false, 0
	case depth == 2 && s.inMessages:
		s.count++
	}
}

func (s *messagesScan) StringPart(raw []byte) {
	if !s.readingKey || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *messagesScan) StringEnd() {
	if s.readingKey {
		s.pending = !s.textLong && unescapedIs(s.text[:s.textLen], "messages")
		s.readingKey = false
	}
}
