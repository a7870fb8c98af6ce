package meter

import (
	"math"
	"strings"
)

// The fast path below bills the answer of every pop without decoding it
// into Go values (push answers are tallied as they stream, by PushTally).
// It either gives exactly what decoding with encoding/json gives
// (billDecodedPop), or declines (ok false) on anything out of the
// ordinary — an escaped key or value, a key that matches a field only
// case-insensitively, a value of an unexpected type, an element that is
// not an object, a text wire.Checker refuses — and the caller decodes
// the body properly.

// popFields is what one message of a pop answer contributes to billing:
// where the raw contents of its keying members lie in the answer (empty
// when absent; a null member leaves what an earlier one of the same name
// set). Offsets rather than slices: a pooled list holds no pointer into
// an answer, and filling it costs no write barrier.
type popFields struct {
	id, partitionID, transactionID, group span
}

// span is a stretch of the answer: start and length.
type span struct{ at, n int32 }

func (s span) of(body []byte) []byte { return body[s.at : s.at+s.n] }

// popBiller is the state of one pop billing, kept in a pool so that a pop
// allocates its result only, whatever it delivered.
type popBiller struct {
	scan  answerScan
	watch popWatch
	inner answerScan // checks the data of the messages read whole
}

// maxPooledMessages bounds the message list a pooled biller keeps.
const maxPooledMessages = 1 << 16

// read reads a pop answer (a JSON object with a consumerGroup and a
// messages array of objects) in one pass, leaving its messages' keying
// members in b.watch: ok false when it declines the answer (the caller
// decodes it), shaped true when the answer was the broker's envelope
// (popWatch.envelope) read whole.
func (b *popBiller) read(body []byte) (ok, shaped bool) {
	if len(body) > math.MaxInt32 {
		return false, false // past what a span holds (far past MaxBilledBody)
	}
	w := &b.watch
	w.bodyCap = cap(body)
	b.scan.reset(w, 3, popNames)
	b.scan.readElements(w, 2)
	b.scan.inner = &b.inner
	if w.envelope(&b.scan, body) {
		return true, true
	}
	// Not in the broker's shape: the general reader, from the start.
	*w = popWatch{msgs: w.msgs[:0], bodyCap: cap(body)}
	b.scan.write(body)
	return b.scan.ok() && w.isObject && !w.declined, false
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
	popHeadGroup    = headOf(`{"consumerGroup":`)
	popHeadLease    = headOf(`,"leaseId":`)
	popHeadMessages = headOf(`,"messages":[`)
	popTails        = [...]*answerShape{
		shapeFrom(",", -1, "partition", "partitionId", "queue", "success"),
		shapeFrom(",", -1, "partition", "partitionId", "partitionsClaimed", "queue", "success"),
	}
)

// popHead reads the head of a pop answer of the broker's shape, up to
// the '[' of its messages, and returns where they start and the value of
// its consumerGroup (a plain string or a scalar); 0 when it differs.
func popHead(body []byte) (int, shapeValue) {
	if len(body) < 64 || !popHeadGroup.is(body, 0) {
		return 0, shapeValue{}
	}
	i := len(popHeadGroup.text)
	var group shapeValue
	for k, head := range [...]*shapeHead{nil, &popHeadLease} {
		if head != nil {
			if len(body)-i <= len(head.text) || !head.is(body, i) {
				return 0, shapeValue{}
			}
			i += len(head.text)
		}
		v := shapeValue{first: body[i], at: int32(i)}
		if v.first == '"' {
			end := i + 1 + plainLen(body[i+1:])
			if end >= len(body) || body[end] != '"' {
				return 0, shapeValue{}
			}
			v.at, v.end = int32(i+1), int32(end)
			i = end + 1
		} else if i = scalarEnd(body, i); i == 0 {
			return 0, shapeValue{}
		}
		if k == 0 {
			group = v
		}
	}
	if len(body)-i <= len(popHeadMessages.text) || !popHeadMessages.is(body, i) {
		return 0, shapeValue{}
	}
	return i + len(popHeadMessages.text), group
}

// popMessagesEnd reads the messages from body[i] (past the '[') with
// element, and returns the index past the ']'; -1 when one is not of the
// known shape.
func popMessagesEnd(body []byte, i int, element func(p []byte, i int) int) int {
	if body[i] == ']' {
		return i + 1
	}
	for {
		if body[i] != '{' {
			return -1
		}
		if i = element(body, i); i < 0 || i+1 >= len(body) {
			return -1
		}
		if body[i] == ']' {
			return i + 1
		}
		if body[i] != ',' {
			return -1
		}
		i++
	}
}

// popTailEnds reports whether body[i:] is one of the tails of the
// broker's pop answer, ending body.
func popTailEnds(s *answerScan, body []byte, i int) bool {
	for _, tail := range &popTails {
		if s.matchShape(tail, body, i, 1, nil) == len(body) {
			return true
		}
	}
	return false
}

// envelope reads a whole pop answer of the broker's shape, its messages
// all of the known shape, as the general reader would; false (the
// watcher's state then unspecified) when any byte differs.
func (w *popWatch) envelope(s *answerScan, body []byte) bool {
	i, group := popHead(body)
	if i == 0 {
		return false
	}
	switch group.first {
	case '"':
		w.group = span{group.at, group.end - group.at}
	case 'n':
	default:
		return false
	}
	w.isObject, w.seenList, w.inMessages = true, true, true
	if i = popMessagesEnd(body, i, func(p []byte, i int) int { return w.element(s, p, i) }); i < 0 {
		return false
	}
	w.inMessages = false
	return popTailEnds(s, body, i)
}

// The member whose value popWatch reads next.
const (
	popMemberNone uint8 = iota
	popMemberGroup
	popMemberMessages
	popMemberID
	popMemberPartitionID
	popMemberTransactionID
	popMemberMessageGroup
)

// popWatch reads the top-level consumerGroup and the keying members of
// each element of the messages array, and declines what the walk cannot
// promise to read as encoding/json does.
type popWatch struct {
	isObject   bool
	declined   bool
	seenList   bool
	inMessages bool // inside the messages array (depth 2)
	inMessage  bool // inside one of its objects (depth 3)
	member     uint8
	group      span
	message    popFields
	msgs       []popFields
	// bodyCap is the answer's capacity: the watcher is told slices of the
	// answer, one whole piece, and a slice's offset in it is bodyCap less
	// the slice's capacity.
	bodyCap int
	shape   shapeValues // the values of the last message read whole
}

func (w *popWatch) open(depth int, kind byte) {
	member := w.member
	w.member = popMemberNone
	switch {
	case depth == 1:
		w.isObject = kind == '{'
		w.declined = w.declined || !w.isObject
	case member == popMemberMessages && kind == '[':
		w.inMessages = true
	case member != popMemberNone:
		// The messages as an object; a consumer group, an id or a
		// partition as a container.
		w.declined = true
	case depth == 3 && w.inMessages:
		if kind != '{' {
			w.declined = true
			return
		}
		w.inMessage, w.message = true, popFields{}
	}
}

func (w *popWatch) close(depth int) {
	switch {
	case depth == 3 && w.inMessage:
		w.inMessage = false
		w.msgs = append(w.msgs, w.message)
	case depth == 2 && w.inMessages:
		w.inMessages = false
	}
}

func (w *popWatch) key(depth int, raw []byte, plain bool) bool {
	w.member = popMemberNone
	if w.declined {
		return false
	}
	switch {
	case raw == nil:
		w.declined = true // not kept: cannot happen for one whole body
	case depth == 1:
		switch string(raw) {
		case "consumerGroup":
			w.member = popMemberGroup
		case "messages":
			if w.seenList {
				w.declined = true // a repeated key: encoding/json merges into the first
				return false
			}
			w.seenList, w.member = true, popMemberMessages
		default:
			w.declined = (!plain && hasEscape(raw)) || foldsTo(raw, plain, "consumerGroup", "messages")
		}
	case depth == 3 && w.inMessage:
		switch string(raw) {
		case "id":
			w.member = popMemberID
		case "partitionId":
			w.member = popMemberPartitionID
		case "transactionId":
			w.member = popMemberTransactionID
		case "consumerGroup":
			w.member = popMemberMessageGroup
		default:
			w.declined = (!plain && hasEscape(raw)) || foldsTo(raw, plain, "id", "partitionId", "transactionId", "consumerGroup")
		}
	}
	return w.member != popMemberNone
}

func (w *popWatch) value(depth int, first byte, raw []byte, plain bool) {
	member := w.member
	w.member = popMemberNone
	if w.declined {
		return
	}
	var into *span
	switch member {
	case popMemberNone:
		if depth == 2 && w.inMessages {
			// An element that is not an object: null is billed,
			// without a key.
			if first != 'n' {
				w.declined = true
				return
			}
			w.msgs = append(w.msgs, popFields{})
		}
		return
	case popMemberMessages:
		w.declined = first != 'n' // null: no messages
		return
	case popMemberGroup:
		into = &w.group
	case popMemberID:
		into = &w.message.id
	case popMemberPartitionID:
		into = &w.message.partitionID
	case popMemberTransactionID:
		into = &w.message.transactionID
	case popMemberMessageGroup:
		into = &w.message.group
	}
	// null leaves what an earlier member of the name set, as
	// encoding/json does; a plain string sets it (the last wins).
	switch {
	case first == 'n':
	case first == '"' && raw != nil && (plain || !hasEscape(raw)):
		*into = span{int32(w.bodyCap - cap(raw)), int32(len(raw))}
	default:
		w.declined = true
	}
}

// element takes the keying members of a message of the known shape, read
// whole: a plain string sets its field, null leaves it empty, and anything
// else is left to the general reader (which declines it).
func (w *popWatch) element(scan *answerScan, p []byte, i int) int {
	if !w.inMessages || w.declined {
		return -1
	}
	end := scan.matchShape(popMessageShape, p, i, 3, &w.shape)
	if end < 0 {
		return -1
	}
	base := w.bodyCap - cap(p)
	var m popFields
	for _, f := range [...]struct {
		at   int
		into *span
	}{{popShapeGroup, &m.group}, {popShapeID, &m.id}, {popShapePartitionID, &m.partitionID}, {popShapeTransactionID, &m.transactionID}} {
		switch v := w.shape[f.at]; v.first {
		case '"':
			*f.into = span{int32(base) + v.at, v.end - v.at}
		case 'n':
		default:
			return -1
		}
	}
	w.msgs = append(w.msgs, m)
	return end
}

// popKeys builds the redelivery keys of BillPop, all in one string: two
// allocations, the string and the list.
func popKeys(body []byte, msgs []popFields, answerGroup span) []string {
	size, count := 0, 0
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			size += int(head.n) + 1 + int(tail.n) + 1 + int(msgs[i].groupOr(answerGroup).n)
			count++
		}
	}
	if count == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	ids := make([]string, 0, count)
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			if head == idKeyHead {
				b.WriteString("id")
			} else {
				b.Write(head.of(body))
			}
			b.WriteByte('/')
			b.Write(tail.of(body))
			b.WriteByte('/')
			b.Write(msgs[i].groupOr(answerGroup).of(body))
		}
	}
	all := b.String()
	start := 0
	for i := range msgs {
		if head, tail, ok := msgs[i].key(); ok {
			end := start + int(head.n) + 1 + int(tail.n) + 1 + int(msgs[i].groupOr(answerGroup).n)
			ids = append(ids, all[start:end])
			start = end
		}
	}
	return ids
}

// idKeyHead stands for the head "id" of a key by id (it is not in the
// answer): a span no member has.
var idKeyHead = span{at: -1, n: int32(len("id"))}

// key names the message: partitionId and transactionId when it has both,
// else "id" and its id; ok false when it has neither. The key is head,
// tail and the consumer group joined by '/'.
func (m *popFields) key() (head, tail span, ok bool) {
	switch {
	case m.partitionID.n > 0 && m.transactionID.n > 0:
		return m.partitionID, m.transactionID, true
	case m.id.n > 0:
		return idKeyHead, m.id, true
	}
	return span{}, span{}, false
}

func (m *popFields) groupOr(answerGroup span) span {
	if m.group.n > 0 {
		return m.group
	}
	return answerGroup
}

func hasEscape(k []byte) bool {
	for _, c := range k {
		if c == '\\' {
			return true
		}
	}
	return false
}

// foldsTo reports whether encoding/json would take k for one of names
// (it matches field names case-insensitively, with Unicode folding: only
// a key with non-ASCII bytes can fold to a name of another length).
func foldsTo(k []byte, plain bool, names ...string) bool {
	ascii := plain // a plain key is ASCII
	if !plain {
		ascii = true
		for _, c := range k {
			if c >= 0x80 {
				ascii = false
				break
			}
		}
	}
	for _, n := range names {
		// The names start with letters: a key whose first byte is
		// another letter in neither case cannot fold to one.
		if ascii && (len(k) != len(n) || k[0]|0x20 != n[0]|0x20) {
			continue
		}
		if strings.EqualFold(string(k), n) {
			return true
		}
	}
	return false
}

// popNames are the member names BillPop reads, in either case: encoding/json
// folds case.
var popNames = namesOf(true, "consumerGroup", "messages", "id", "partitionId", "transactionId")
