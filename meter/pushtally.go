package meter

import (
	"encoding/json"

	"github.com/queengate/queengate/internal/jsonscan"
)

// PushTally counts the per-item statuses of a POST /api/v1/push answer as
// it streams past, without keeping it: the answer to a large push can be
// far larger than anything the gateway should copy (320,000 tiny items
// answer with 74 MB), and billing it must not depend on its size.
//
// The answer is a JSON array with one object per item. An item counts as
// accepted when the last member named exactly "status" is the string
// "queued" or "buffered" (billable, M1); other statuses, other member
// types and elements that are not objects are not billed. An answer that
// is not one well-formed JSON array (jsonscan.Checker's rules) bills
// nothing, whatever it held before it went wrong.
//
// Write it the answer in pieces, then read Outcome once.
type PushTally struct {
	check jsonscan.Checker
	scan  statusScan
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
	*t = PushTally{}
	t.check.Watch = &t.scan
}

// Write takes the next piece of the answer; it never fails, so it can sit
// beside the client's writer. An unreadable answer is noted and bills 0.
func (t *PushTally) Write(p []byte) (int, error) {
	_ = t.check.Write(p)
	return len(p), nil
}

// Outcome is what the whole answer said, for an upstream status.
func (t *PushTally) Outcome(status int) PushOutcome {
	if !is2xx(status) || t.check.Close() != nil || !t.scan.isArray {
		return PushOutcome{}
	}
	return t.scan.out
}

// statusScan follows the members of the top-level array's objects.
type statusScan struct {
	out     PushOutcome
	isArray bool // the top-level value is an array
	inItem  bool // inside an element object (depth 2)

	// The string being read at depth 2, when it may matter: a member
	// name, or the value of a "status" member. Longer strings cannot spell
	// a status (six bytes per character at most, escaped), so they are
	// cut and marked.
	reading   uint8 // readNothing, readKey or readValue
	text      [64]byte
	textLen   int
	textLong  bool
	afterName bool // the member being read is named "status"
	status    statusWord
}

type statusWord uint8

const (
	statusOther statusWord = iota
	statusQueued
	statusBuffered
)

const (
	readNothing uint8 = iota
	readKey
	readValue
)

func (s *statusScan) Open(depth int, kind byte) {
	switch depth {
	case 1:
		s.isArray = kind == '['
	case 2:
		if s.isArray && kind == '{' {
			s.inItem, s.status, s.afterName = true, statusOther, false
		}
	}
}

func (s *statusScan) Close(depth int) {
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

// Scalar needs nothing: a number or literal is never a status, and the
// name that preceded it was already cleared (StringEnd of a key).
func (s *statusScan) Scalar(int, byte) {}

func (s *statusScan) StringStart(depth int, key bool) {
	s.reading = readNothing
	if depth != 2 || !s.inItem {
		return
	}
	switch {
	case key:
		s.reading, s.afterName = readKey, false
	case s.afterName:
		s.reading = readValue
	}
	s.textLen, s.textLong = 0, false
}

func (s *statusScan) StringPart(raw []byte) {
	if s.reading == readNothing || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *statusScan) StringEnd() {
	switch s.reading {
	case readKey:
		s.afterName = !s.textLong && s.textIs("status")
		if s.afterName {
			// A later "status" replaces an earlier one even when its
			// value is not a string (then the item is not billed).
			s.status = statusOther
		}
	case readValue:
		// The last "status" member wins, as in the broker's JSON library.
		s.status = statusOther
		switch {
		case s.textLong:
		case s.textIs("queued"):
			s.status = statusQueued
		case s.textIs("buffered"):
			s.status = statusBuffered
		}
		s.afterName = false
	}
	s.reading = readNothing
}

// textIs reports whether the string just read, unescaped, is word.
func (s *statusScan) textIs(word string) bool { return unescapedIs(s.text[:s.textLen], word) }

// unescapedIs reports whether the raw text of a JSON string (between the
// quotes, escapes intact) is word once unescaped.
func unescapedIs(raw []byte, word string) bool {
	for _, c := range raw {
		if c == '\\' {
			quoted := make([]byte, 0, len(raw)+2)
			quoted = append(append(append(quoted, '"'), raw...), '"')
			var text string
			return json.Unmarshal(quoted, &text) == nil && text == word
		}
	}
	return string(raw) == word
}
