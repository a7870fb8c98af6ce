package meter

import "github.com/queengate/queengate/internal/jsonscan"

// TxnTally reads a POST /api/v1/transaction answer as it streams past,
// without keeping it, for BillTransaction's rule (M3): a committed
// transaction is an object whose last "success" member is true; its push
// items are billed, less the "results" entries that are objects whose last
// "type" is the string "push" and whose last "duplicate" is true. An answer
// that is not one well-formed JSON object bills nothing. Keys match
// exactly and the last of duplicated keys wins, as in the broker's JSON
// library.
type TxnTally struct {
	check jsonscan.Checker
	scan  txnScan
}

// NewTxnTally returns a tally ready for the first piece of an answer.
func NewTxnTally() *TxnTally {
	t := &TxnTally{}
	t.Reset()
	return t
}

// Reset readies t for a new answer. A TxnTally must not be copied once it
// is reset (it points into itself).
func (t *TxnTally) Reset() {
	*t = TxnTally{}
	t.check.Watch = &t.scan
}

// Write takes the next piece of the answer; it never fails.
func (t *TxnTally) Write(p []byte) (int, error) {
	_ = t.check.Write(p)
	return len(p), nil
}

// Billed is the number of messages to bill, for the upstream status and
// the push items the gateway counted in the request.
func (t *TxnTally) Billed(status, countedItems int) int64 {
	if !is2xx(status) || countedItems <= 0 || t.check.Close() != nil || !t.scan.isObject || !t.scan.success {
		return 0
	}
	return max(int64(countedItems)-t.scan.duplicates, 0)
}

// txnScan follows the top-level object's "success" and the objects of its
// "results" array.
type txnScan struct {
	isObject   bool
	success    bool
	duplicates int64 // of the last "results" array
	inResults  bool  // inside the "results" array (depth 2)
	inResult   bool  // inside one of its objects (depth 3)
	resultPush bool
	resultDup  bool

	member   txnMember // the member whose value comes next
	reading  bool      // a string that may matter is being read
	text     [64]byte
	textLen  int
	textLong bool
	readKey  bool
}

type txnMember uint8

const (
	memberOther txnMember = iota
	memberSuccess
	memberResults
	memberType
	memberDuplicate
)

func (s *txnScan) Open(depth int, kind byte) {
	switch {
	case depth == 1:
		s.isObject = kind == '{'
	case depth == 2 && s.member == memberResults && kind == '[':
		s.inResults, s.duplicates = true, 0
	case depth == 3 && s.inResults && kind == '{':
		s.inResult, s.resultPush, s.resultDup = true, false, false
	}
	s.member = memberOther
}

func (s *txnScan) Close(depth int) {
	switch {
	case depth == 3 && s.inResult:
		s.inResult = false
		if s.resultPush && s.resultDup {
			s.duplicates++
		}
	case depth == 2 && s.inResults:
		s.inResults = false
	}
}

// watched reports whether strings at depth are members or values the
// tally reads.
func (s *txnScan) watched(depth int) bool {
	return (depth == 1 && s.isObject) || (depth == 3 && s.inResult)
}

func (s *txnScan) StringStart(depth int, key bool) {
	s.reading = false
	if !s.watched(depth) {
		return
	}
	if !key {
		// A string value: success is no longer true, duplicate no
		// longer true; a type is read.
		switch s.member {
		case memberSuccess:
			s.success = false
		case memberResults:
			s.duplicates = 0
		case memberDuplicate:
			s.resultDup = false
		case memberType:
			s.reading = true
		}
		if !s.reading {
			s.member = memberOther
			return
		}
	}
	s.reading, s.readKey = true, key
	s.textLen, s.textLong = 0, false
}

func (s *txnScan) StringPart(raw []byte) {
	if !s.reading || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *txnScan) StringEnd() {
	if !s.reading {
		return
	}
	s.reading = false
	word := func(w string) bool { return !s.textLong && unescapedIs(s.text[:s.textLen], w) }
	if !s.readKey { // the value of "type"
		s.resultPush = word("push")
		s.member = memberOther
		return
	}
	s.member = memberOther
	switch {
	case s.inResult && word("type"):
		s.member, s.resultPush = memberType, false
	case s.inResult && word("duplicate"):
		s.member, s.resultDup = memberDuplicate, false
	case !s.inResult && word("success"):
		s.member, s.success = memberSuccess, false
	case !s.inResult && word("results"):
		// A later "results" replaces an earlier one, whatever it is.
		s.member, s.duplicates = memberResults, 0
	}
}

func (s *txnScan) Scalar(depth int, first byte) {
	if !s.watched(depth) {
		return
	}
	switch s.member {
	case memberSuccess:
		s.success = first == 't'
	case memberDuplicate:
		s.resultDup = first == 't'
	}
	s.member = memberOther
}
