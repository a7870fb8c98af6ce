package meter

// The answer tallies as they were before answerScan (wire.Checker and
// its Watcher, then wire.Check and the walkers for pops), kept as the
// oracle the fast paths are fuzzed against: same verdict, same counts.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

// oldPushTally counts the per-item statuses of a POST /api/v1/push answer as
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
type oldPushTally struct {
	check wire.Checker
	scan  oldStatusScan
}

// oldNewPushTally returns a tally ready for the first piece of an answer.
func oldNewPushTally() *oldPushTally {
	t := &oldPushTally{}
	t.Reset()
	return t
}

// Reset readies t for a new answer. A oldPushTally must not be copied once
// it is reset (it points into itself).
func (t *oldPushTally) Reset() {
	*t = oldPushTally{}
	t.check.Watch = &t.scan
}

// Write takes the next piece of the answer; it never fails, so it can sit
// beside the client's writer. An unreadable answer is noted and bills 0.
func (t *oldPushTally) Write(p []byte) (int, error) {
	_ = t.check.Write(p)
	return len(p), nil
}

// Outcome is what the whole answer said, for an upstream status.
func (t *oldPushTally) Outcome(status int) PushOutcome {
	if !is2xx(status) || t.check.Close() != nil || !t.scan.isArray {
		return PushOutcome{}
	}
	return t.scan.out
}

// oldStatusScan follows the members of the top-level array's objects.
type oldStatusScan struct {
	out     PushOutcome
	isArray bool // the top-level value is an array
	inItem  bool // inside an element object (depth 2)

	// The string being read at depth 2, when it may matter: a member
	// name, or the value of a "status" member. Longer strings cannot spell
	// a status (six bytes per character at most, escaped), so they are
	// cut and marked.
	reading   uint8 // oldReadNothing, oldReadKey or oldReadValue
	text      [64]byte
	textLen   int
	textLong  bool
	afterName bool // the member being read is named "status"
	status    oldStatusWord
}

type oldStatusWord uint8

const (
	oldStatusOther oldStatusWord = iota
	oldStatusQueued
	oldStatusBuffered
)

const (
	oldReadNothing uint8 = iota
	oldReadKey
	oldReadValue
)

func (s *oldStatusScan) Open(depth int, kind byte) {
	switch depth {
	case 1:
		s.isArray = kind == '['
	case 2:
		if s.isArray && kind == '{' {
			s.inItem, s.status, s.afterName = true, oldStatusOther, false
		}
	}
}

func (s *oldStatusScan) Close(depth int) {
	if depth != 2 || !s.inItem {
		return
	}
	s.inItem = false
	s.out.Items++
	switch s.status {
	case oldStatusQueued:
		s.out.Accepted++
	case oldStatusBuffered:
		s.out.Accepted++
		s.out.Buffered++
	}
}

// Scalar needs nothing: a number or literal is never a status, and the
// name that preceded it was already cleared (StringEnd of a key).
func (s *oldStatusScan) Scalar(int, byte) {}

func (s *oldStatusScan) StringStart(depth int, key bool) {
	s.reading = oldReadNothing
	if depth != 2 || !s.inItem {
		return
	}
	switch {
	case key:
		s.reading, s.afterName = oldReadKey, false
	case s.afterName:
		s.reading = oldReadValue
	}
	s.textLen, s.textLong = 0, false
}

func (s *oldStatusScan) StringPart(raw []byte) {
	if s.reading == oldReadNothing || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *oldStatusScan) StringEnd() {
	switch s.reading {
	case oldReadKey:
		s.afterName = !s.textLong && s.textIs("status")
		if s.afterName {
			// A later "status" replaces an earlier one even when its
			// value is not a string (then the item is not billed).
			s.status = oldStatusOther
		}
	case oldReadValue:
		// The last "status" member wins, as in the broker's JSON library.
		s.status = oldStatusOther
		switch {
		case s.textLong:
		case s.textIs("queued"):
			s.status = oldStatusQueued
		case s.textIs("buffered"):
			s.status = oldStatusBuffered
		}
		s.afterName = false
	}
	s.reading = oldReadNothing
}

// textIs reports whether the string just read, unescaped, is word.
func (s *oldStatusScan) textIs(word string) bool { return unescapedIs(s.text[:s.textLen], word) }

// oldTxnTally reads a POST /api/v1/transaction answer as it streams past,
// without keeping it, for BillTransaction's rule (M3): a committed
// transaction is an object whose last "success" member is true; its push
// items are billed, less the "results" entries that are objects whose last
// "type" is the string "push" and whose last "duplicate" is true. An answer
// that is not one well-formed JSON object bills nothing. Keys match
// exactly and the last of duplicated keys wins, as in the broker's JSON
// library.
type oldTxnTally struct {
	check wire.Checker
	scan  oldTxnScan
}

// oldNewTxnTally returns a tally ready for the first piece of an answer.
func oldNewTxnTally() *oldTxnTally {
	t := &oldTxnTally{}
	t.Reset()
	return t
}

// Reset readies t for a new answer. A oldTxnTally must not be copied once it
// is reset (it points into itself).
func (t *oldTxnTally) Reset() {
	*t = oldTxnTally{}
	t.check.Watch = &t.scan
}

// Write takes the next piece of the answer; it never fails.
func (t *oldTxnTally) Write(p []byte) (int, error) {
	_ = t.check.Write(p)
	return len(p), nil
}

// Billed is the number of messages to bill, for the upstream status and
// the push items the gateway counted in the request.
func (t *oldTxnTally) Billed(status, countedItems int) int64 {
	if !is2xx(status) || countedItems <= 0 || t.check.Close() != nil || !t.scan.isObject || !t.scan.success {
		return 0
	}
	return max(int64(countedItems)-t.scan.duplicates, 0)
}

// oldTxnScan follows the top-level object's "success" and the objects of its
// "results" array.
type oldTxnScan struct {
	isObject   bool
	success    bool
	duplicates int64 // of the last "results" array
	inResults  bool  // inside the "results" array (depth 2)
	inResult   bool  // inside one of its objects (depth 3)
	resultPush bool
	resultDup  bool

	member     oldTxnMember // the member whose value comes next
	reading    bool         // a string that may matter is being read
	text       [64]byte
	textLen    int
	textLong   bool
	oldReadKey bool
}

type oldTxnMember uint8

const (
	oldMemberOther oldTxnMember = iota
	oldMemberSuccess
	oldMemberResults
	oldMemberType
	oldMemberDuplicate
)

func (s *oldTxnScan) Open(depth int, kind byte) {
	switch {
	case depth == 1:
		s.isObject = kind == '{'
	case depth == 2 && s.member == oldMemberResults && kind == '[':
		s.inResults, s.duplicates = true, 0
	case depth == 3 && s.inResults && kind == '{':
		s.inResult, s.resultPush, s.resultDup = true, false, false
	}
	s.member = oldMemberOther
}

func (s *oldTxnScan) Close(depth int) {
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
func (s *oldTxnScan) watched(depth int) bool {
	return (depth == 1 && s.isObject) || (depth == 3 && s.inResult)
}

func (s *oldTxnScan) StringStart(depth int, key bool) {
	s.reading = false
	if !s.watched(depth) {
		return
	}
	if !key {
		// A string value: success is no longer true, duplicate no
		// longer true; a type is read.
		switch s.member {
		case oldMemberSuccess:
			s.success = false
		case oldMemberResults:
			s.duplicates = 0
		case oldMemberDuplicate:
			s.resultDup = false
		case oldMemberType:
			s.reading = true
		}
		if !s.reading {
			s.member = oldMemberOther
			return
		}
	}
	s.reading, s.oldReadKey = true, key
	s.textLen, s.textLong = 0, false
}

func (s *oldTxnScan) StringPart(raw []byte) {
	if !s.reading || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *oldTxnScan) StringEnd() {
	if !s.reading {
		return
	}
	s.reading = false
	word := func(w string) bool { return !s.textLong && unescapedIs(s.text[:s.textLen], w) }
	if !s.oldReadKey { // the value of "type"
		s.resultPush = word("push")
		s.member = oldMemberOther
		return
	}
	s.member = oldMemberOther
	switch {
	case s.inResult && word("type"):
		s.member, s.resultPush = oldMemberType, false
	case s.inResult && word("duplicate"):
		s.member, s.resultDup = oldMemberDuplicate, false
	case !s.inResult && word("success"):
		s.member, s.success = oldMemberSuccess, false
	case !s.inResult && word("results"):
		// A later "results" replaces an earlier one, whatever it is.
		s.member, s.duplicates = oldMemberResults, 0
	}
}

func (s *oldTxnScan) Scalar(depth int, first byte) {
	if !s.watched(depth) {
		return
	}
	switch s.member {
	case oldMemberSuccess:
		s.success = first == 't'
	case oldMemberDuplicate:
		s.resultDup = first == 't'
	}
	s.member = oldMemberOther
}

// oldPopCount counts the messages of a pop answer as it streams past, without
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
type oldPopCount struct {
	check wire.Checker
	scan  oldMessagesScan
}

// oldNewPopCount returns a count ready for the first piece of an answer.
func oldNewPopCount() *oldPopCount {
	p := &oldPopCount{}
	p.check.Watch = &p.scan
	return p
}

// Write takes the next piece of the answer; it never fails.
func (p *oldPopCount) Write(b []byte) (int, error) {
	_ = p.check.Write(b)
	return len(b), nil
}

// Messages is how many messages the whole answer delivered, for an
// upstream status.
func (p *oldPopCount) Messages(status int) int64 {
	if !is2xx(status) || p.check.Close() != nil || !p.scan.isObject {
		return 0
	}
	return p.scan.count
}

// oldMessagesScan follows the top-level object's members.
type oldMessagesScan struct {
	isObject   bool
	pending    bool // the member being read is named "messages"
	inMessages bool // inside the "messages" array
	count      int64

	readingKey bool
	text       [16]byte // a top-level member name, when short enough to be "messages"
	textLen    int
	textLong   bool
}

func (s *oldMessagesScan) Open(depth int, kind byte) {
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

func (s *oldMessagesScan) Close(depth int) {
	if depth == 2 {
		s.inMessages = false
	}
}

func (s *oldMessagesScan) Scalar(depth int, _ byte) {
	s.element(depth)
}

func (s *oldMessagesScan) StringStart(depth int, key bool) {
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
func (s *oldMessagesScan) element(depth int) {
	switch {
	case depth == 1 && s.pending:
		s.pending, s.count = false, 0
	case depth == 2 && s.inMessages:
		s.count++
	}
}

func (s *oldMessagesScan) StringPart(raw []byte) {
	if !s.readingKey || s.textLong {
		return
	}
	if s.textLen+len(raw) > len(s.text) {
		s.textLong = true
		return
	}
	s.textLen += copy(s.text[s.textLen:], raw)
}

func (s *oldMessagesScan) StringEnd() {
	if s.readingKey {
		s.pending = !s.textLong && unescapedIs(s.text[:s.textLen], "messages")
		s.readingKey = false
	}
}

// The fast path below bills the answer of every pop without decoding it
// into Go values (push answers are tallied as they stream, by oldPushTally).
// It either gives exactly what decoding with encoding/json gives
// (billDecodedPop), or declines (ok false) on anything out of the
// ordinary — an escaped key or value, a key that matches a field only
// case-insensitively, a value of an unexpected type, an element that is
// not an object, a text wire.Check refuses — and the caller decodes
// the body properly.

// oldScanPopBilling reads a pop answer (a JSON object with a consumerGroup
// and a messages array of objects) in one pass and returns what BillPop
// returns for it. The keys are slices of one string, so a pop costs a few
// allocations whatever it delivered.
func oldScanPopBilling(body []byte) (messages int64, ids []string, ok bool) {
	if wire.Check(body) != nil {
		return 0, nil, false
	}
	i := wire.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, nil, false
	}
	var (
		group    []byte
		small    [8]oldPopFields
		msgs     = small[:0]
		seenList bool
		declined bool
	)
	// decline stops both walks: a member's end at len(body) ends them.
	decline := func() int {
		declined = true
		return len(body)
	}
	readMessage := func(at int) int {
		switch body[at] {
		case 'n': // a null element: billed, without a key
			msgs = append(msgs, oldPopFields{})
			return wire.ValueEnd(body, at)
		case '{':
		default:
			return decline()
		}
		var m oldPopFields
		end := wire.Members(body, at, func(k []byte, at int) int {
			end := wire.ValueEnd(body, at)
			var into *[]byte
			switch string(k) {
			case "id":
				into = &m.id
			case "partitionId":
				into = &m.partitionID
			case "transactionId":
				into = &m.transactionID
			case "consumerGroup":
				into = &m.group
			default:
				if oldHasEscape(k) || oldFoldsTo(k, "id", "partitionId", "transactionId", "consumerGroup") {
					return decline()
				}
				return end
			}
			if !oldReadPlain(body[at:end], into) {
				return decline()
			}
			return end
		})
		msgs = append(msgs, m)
		return end
	}
	wire.Members(body, i, func(k []byte, at int) int {
		switch {
		case string(k) == "consumerGroup":
			end := wire.ValueEnd(body, at)
			if !oldReadPlain(body[at:end], &group) {
				return decline()
			}
			return end
		case string(k) == "messages":
			if seenList {
				return decline() // a repeated key: encoding/json merges into the first
			}
			seenList = true
			switch body[at] {
			case 'n': // null: no messages
				return wire.ValueEnd(body, at)
			case '[':
				return wire.Elements(body, at, readMessage)
			}
			return decline()
		case strings.EqualFold(string(k), "consumerGroup") || strings.EqualFold(string(k), "messages") || oldHasEscape(k):
			return decline()
		}
		return wire.ValueEnd(body, at)
	})
	if declined {
		return 0, nil, false
	}
	return int64(len(msgs)), oldPopKeys(msgs, group), true
}

// oldReadPlain sets *into to a plain string value's contents and reports
// whether the value was one; null leaves *into as it was, as encoding/json
// does.
func oldReadPlain(v []byte, into *[]byte) bool {
	if string(v) == "null" {
		return true
	}
	s, ok := oldPlainBytes(v)
	if ok {
		*into = s // the last of repeated members wins, as in encoding/json
	}
	return ok
}

// oldBillPop is BillPop as it was, over oldScanPopBilling.
func oldBillPop(status int, body []byte) (int64, []string) {
	if !is2xx(status) {
		return 0, nil
	}
	if n, ids, ok := oldScanPopBilling(body); ok {
		return n, ids
	}
	return oldBillDecodedPop(body)
}

// oldPopFields is what one message of a pop answer contributes to billing:
// the raw contents of its keying members (nil when absent; a null member
// leaves what an earlier one of the same name set).
type oldPopFields struct {
	id, partitionID, transactionID, group []byte
}

// oldPopKeys builds the redelivery keys of BillPop, all in one string.
func oldPopKeys(msgs []oldPopFields, answerGroup []byte) []string {
	size, count := 0, 0
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			size += len(head) + 1 + len(tail) + 1 + len(msgs[i].groupOr(answerGroup))
			count++
		}
	}
	if count == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]int, 0, count)
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			b.Write(head)
			b.WriteByte('/')
			b.Write(tail)
			b.WriteByte('/')
			b.Write(msgs[i].groupOr(answerGroup))
			ends = append(ends, b.Len())
		}
	}
	all := b.String()
	ids := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		ids[i], start = all[start:end], end
	}
	return ids
}

var oldIdKeyHead = []byte("id")

// key names the message: partitionId and transactionId when it has both,
// else "id" and its id; ok false when it has neither. The key is head,
// tail and the consumer group joined by '/'.
func (m *oldPopFields) key() (head, tail []byte, ok bool) {
	switch {
	case len(m.partitionID) > 0 && len(m.transactionID) > 0:
		return m.partitionID, m.transactionID, true
	case len(m.id) > 0:
		return oldIdKeyHead, m.id, true
	}
	return nil, nil, false
}

func (m *oldPopFields) groupOr(answerGroup []byte) []byte {
	if len(m.group) > 0 {
		return m.group
	}
	return answerGroup
}

// unescapedIs is the old way of the tallies to tell whether the raw text of a JSON string (between the
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

// oldPopAnswer, oldDecodeLenient and oldBillDecodedPop are BillPop's
// reading before wire.Stream's, for what the fast path declined: decoded
// with encoding/json, whose member names fold case.
type oldPopAnswer struct {
	ConsumerGroup string           `json:"consumerGroup"`
	Messages      []*oldPopMessage `json:"messages"`
}

type oldPopMessage struct {
	ID            string `json:"id"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	ConsumerGroup string `json:"consumerGroup"`
}

func oldDecodeLenient(body []byte, v any) bool {
	err := json.Unmarshal(body, v)
	if err == nil {
		return true
	}
	var typeErr *json.UnmarshalTypeError
	return errors.As(err, &typeErr)
}

func oldBillDecodedPop(body []byte) (messages int64, ids []string) {
	var r oldPopAnswer
	if !oldDecodeLenient(body, &r) || len(r.Messages) == 0 {
		return 0, nil
	}
	for _, m := range r.Messages {
		if m == nil {
			continue
		}
		group := m.ConsumerGroup
		if group == "" {
			group = r.ConsumerGroup
		}
		switch {
		case m.PartitionID != "" && m.TransactionID != "":
			ids = append(ids, m.PartitionID+"/"+m.TransactionID+"/"+group)
		case m.ID != "":
			ids = append(ids, "id/"+m.ID+"/"+group)
		}
	}
	return int64(len(r.Messages)), ids
}

// oldFoldsTo reports whether encoding/json would take k for one of names.
func oldFoldsTo(k []byte, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(string(k), n) {
			return true
		}
	}
	return false
}

func oldHasEscape(k []byte) bool { return bytes.IndexByte(k, '\\') >= 0 }

// oldPlainBytes is the contents of a JSON string value without escapes,
// as a slice of v, and false for any other value, a string holding an
// escape, or one that is not valid UTF-8: the old readers' shortcut.
func oldPlainBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	text := v[1 : len(v)-1]
	if bytes.IndexByte(text, '\\') >= 0 || !utf8.Valid(text) {
		return nil, false
	}
	return text, true
}
