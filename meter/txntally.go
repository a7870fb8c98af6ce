package meter

import "github.com/queengate/queengate/wire"

// TxnTally reads a POST /api/v1/transaction answer as it streams past,
// without keeping it, for BillTransaction's rule (M3): a committed
// transaction is an object whose last "success" member is true; its push
// items are billed, less the "results" entries that are objects whose last
// "type" is the string "push" and whose last "duplicate" is true. An answer
// that is not one well-formed JSON object bills nothing. Keys match
// exactly and the last of duplicated keys wins, as in the broker's JSON
// library.
type TxnTally struct {
	scan    wire.Stream
	results txnWatch
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
	t.results = txnWatch{}
	t.scan.Reset(&t.results, 3, txnNames)
	t.scan.ReadElements(&t.results, 2)
}

// Write takes the next piece of the answer; it never fails.
func (t *TxnTally) Write(p []byte) (int, error) {
	if !t.scan.Whole(p, '}', t.envelope) {
		t.scan.Feed(p)
	}
	return len(p), nil
}

// envelope is txnWatch.envelope for Stream.Whole: when it declines, the
// watcher is cleared of what it heard, as Reset left it.
func (t *TxnTally) envelope(p []byte) bool {
	if t.results.envelope(&t.scan, p) {
		return true
	}
	t.results = txnWatch{}
	return false
}

// The broker's transaction answer around its results (testdata/broker,
// S11), when it comes in one piece: its head and its tail.
var (
	txnHead = wire.HeadOf(`{"results":[`)
	txnTail = wire.ShapeFrom(",", -1, "success", "transactionId")
)

// envelope reads p, the whole answer, when it has the broker's shape and
// its results all have known shapes, leaving s and the watcher as the
// general reader would; false (the watcher then to be cleared) when any
// byte differs. What follows in later pieces is read as after any whole
// answer.
func (w *txnWatch) envelope(s *wire.Stream, p []byte) bool {
	i := txnHead.Skip(p, 0)
	if len(p) < 32 || i < 0 {
		return false
	}
	w.isObject, w.inList = true, true
	if i = wire.ElementsEnd(p, i, func(p []byte, i int) int { return w.Element(s, p, i) }); i < 0 {
		return false
	}
	w.inList = false
	var vals wire.ShapeValues
	if s.MatchShape(txnTail, p, i, 1, &vals) != len(p) {
		return false
	}
	w.success = vals[0].First == 't'
	return true
}

// Billed is the number of messages to bill, for the upstream status and
// the push items the gateway counted in the request.
func (t *TxnTally) Billed(status, countedItems int) int64 {
	s := &t.results
	if !is2xx(status) || countedItems <= 0 || !t.scan.OK() || !s.isObject || !s.success {
		return 0
	}
	return max(int64(countedItems)-s.duplicates, 0)
}

// txnWatch follows the top-level object's "success" and the objects of its
// "results" array.
type txnWatch struct {
	listPlace  // the list is the "results" array
	success    bool
	duplicates int64 // of the last "results" array
	resultPush bool
	resultDup  bool
	member     txnMember // the member whose value comes next
}

type txnMember uint8

const (
	memberOther txnMember = iota
	memberSuccess
	memberResults
	memberType
	memberDuplicate
)

func (s *txnWatch) Open(depth int, kind byte) {
	if s.open(depth, kind, s.member == memberResults) && s.inItem {
		s.resultPush, s.resultDup = false, false
	}
	s.member = memberOther
}

func (s *txnWatch) Close(depth int) {
	if s.close(depth) && s.resultPush && s.resultDup {
		s.duplicates++
	}
}

// watched reports whether members at depth are read: the top-level
// object's, and those of a "results" entry.
func (s *txnWatch) watched(depth int) bool {
	return s.topMember(depth) || s.itemMember(depth)
}

func (s *txnWatch) Key(depth int, raw []byte, plain bool) bool {
	s.member = memberOther
	if !s.watched(depth) {
		return false
	}
	if plain {
		// No escape: the name is its text, one switch tells it.
		switch string(raw) {
		case "type":
			if s.inItem {
				s.member, s.resultPush = memberType, false
			}
		case "duplicate":
			if s.inItem {
				s.member, s.resultDup = memberDuplicate, false
			}
		case "success":
			if !s.inItem {
				s.member, s.success = memberSuccess, false
			}
		case "results":
			if !s.inItem {
				s.member, s.duplicates = memberResults, 0
			}
		}
		return s.member != memberOther
	}
	switch {
	case s.inItem && wire.WordIs(raw, plain, "type"):
		s.member, s.resultPush = memberType, false
	case s.inItem && wire.WordIs(raw, plain, "duplicate"):
		s.member, s.resultDup = memberDuplicate, false
	case !s.inItem && wire.WordIs(raw, plain, "success"):
		s.member, s.success = memberSuccess, false
	case !s.inItem && wire.WordIs(raw, plain, "results"):
		// A later "results" replaces an earlier one, whatever it is.
		s.member, s.duplicates = memberResults, 0
	}
	return s.member != memberOther
}

// value reads a string, number or literal: only true is true, and only
// the string "push" a push.
func (s *txnWatch) Value(depth int, first byte, raw []byte, plain bool) {
	if !s.watched(depth) {
		return
	}
	switch s.member {
	case memberSuccess:
		s.success = first == 't'
	case memberDuplicate:
		s.resultDup = first == 't'
	case memberType:
		s.resultPush = first == '"' && wire.WordIs(raw, plain, "push")
	}
	s.member = memberOther
}

// txnNames are the member names TxnTally reads.
var txnNames = wire.NamesOf("success", "results", "type", "duplicate")

// The shapes of the broker's transaction results (testdata/broker, S11):
// an ack and a push stored. Neither has a "duplicate" member, so neither
// changes the bill.
var txnShapes = [...]*wire.Shape{
	wire.ShapeOf(-1, "index", "messageId", "partitionId", "queueName", "success", "transactionId", "type"),
	wire.ShapeOf(-1, "dlq", "error", "index", "success", "transactionId", "type"),
}

// element reads a "results" entry of a known shape whole, leaving the
// watcher as its open, members and close would.
func (s *txnWatch) Element(scan *wire.Stream, p []byte, i int) int {
	if !s.inList {
		return -1
	}
	for _, sh := range &txnShapes {
		if end := scan.MatchShape(sh, p, i, 3, nil); end > 0 {
			s.member = memberOther
			return end
		}
	}
	return -1
}
