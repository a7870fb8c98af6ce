package meter

import (
	"bytes"

	"github.com/queengate/queengate/wire"
)

// PopKeys reads a pop answer as it streams past, without keeping it: one
// too large to keep (over MaxBilledBody), and one cut short, whose kept
// start is read through it too. It counts the messages (the elements of
// the top-level object's "messages" array, the last member of that name)
// and takes the redelivery key of each, as BillPop spells them, so that
// the redelivery filter sees an oversized pop as it sees any other. The
// gateway bills a pop from its kept answer (BillPop) up to MaxBilledBody;
// past that, a pop of many large messages would otherwise be billed no
// delivery and take nothing from the message bucket.
//
// It reads by the same rules as BillPop (doc.go) and fails closed alike: a
// message whose key it cannot read exactly (a field whose last value is
// neither a plain string nor null: escaped, of another type, or longer
// than maxPopKeyField; or a message that is not an object) gets no key,
// and a message without a key is billed as a first delivery and not
// remembered. Only the first maxStreamedPopKeys messages are keyed; the
// rest are billed as first deliveries too. The parts it keeps are a few
// short strings per message, never the payloads.
type PopKeys struct {
	check wire.Checker
	scan  popKeyScan
}

const (
	// maxPopKeyField is the longest id, partition id, transaction id or
	// consumer group a key is built from; the broker's are UUIDs and short
	// names.
	maxPopKeyField = 512
	// maxStreamedPopKeys bounds the messages one oversized pop keys.
	maxStreamedPopKeys = 1 << 17
)

// NewPopKeys returns a reader ready for the first piece of an answer.
func NewPopKeys() *PopKeys {
	p := &PopKeys{}
	p.check.Watch = &p.scan
	return p
}

// Write takes the next piece of the answer; it never fails.
func (p *PopKeys) Write(b []byte) (int, error) {
	_ = p.check.Write(b)
	return len(b), nil
}

// Result is how many messages the whole answer delivered, for an upstream
// status, and the redelivery keys of those it could key (at most one per
// message, in their order; len(keys) ≤ messages). An answer that is not
// one well-formed JSON object, or whose "messages" is not an array, bills
// nothing.
func (p *PopKeys) Result(status int) (messages int64, keys []string) {
	s := &p.scan
	if !is2xx(status) || p.check.Close() != nil || !s.isObject {
		return 0, nil
	}
	for i := range s.msgs {
		if k, ok := s.msgs[i].key(s.topGroup, s.topGroupBad); ok {
			keys = append(keys, k)
		}
	}
	return s.count, keys
}

// popKeyFields are what one message's key is built from.
type popKeyFields struct {
	id, partitionID, transactionID, group string
	bad                                   uint8 // bit 1<<field: the field's last value was not read exactly
	unkeyable                             bool  // the message is no object
}

// key is BillPop's key for the message: partitionId/transactionId/group,
// else id/<id>/group, with the answer's top-level group when the message
// names none.
func (m *popKeyFields) key(topGroup string, topGroupBad bool) (string, bool) {
	if m.unkeyable || m.bad != 0 {
		return "", false
	}
	group := m.group
	if group == "" {
		if topGroupBad {
			return "", false
		}
		group = topGroup
	}
	switch {
	case m.partitionID != "" && m.transactionID != "":
		return m.partitionID + "/" + m.transactionID + "/" + group, true
	case m.id != "":
		return "id/" + m.id + "/" + group, true
	}
	return "", false
}

// The member a string is being read into.
const (
	fieldNone = iota
	fieldTopKey
	fieldTopGroup
	fieldMsgKey
	fieldID
	fieldPartitionID
	fieldTransactionID
	fieldGroup
)

// popKeyScan follows the top-level members and the message objects.
type popKeyScan struct {
	isObject    bool
	pending     bool // the top-level member being read is "messages"
	groupNext   bool // the top-level member being read is "consumerGroup"
	inMessages  bool
	count       int64
	msgs        []popKeyFields
	inMsg       bool // inside a message object (depth 3) being keyed
	msgField    int  // the message member whose value comes next
	topGroup    string
	topGroupBad bool

	reading int // what the current string is read into
	text    []byte
	long    bool
}

func (s *popKeyScan) Open(depth int, kind byte) {
	switch {
	case depth == 1:
		s.isObject = kind == '{'
	case depth == 2:
		s.topValue('{')
		if s.pending {
			s.pending = false
			s.count, s.msgs = 0, s.msgs[:0]
			s.inMessages = kind == '['
		}
	case depth == 3 && s.inMessages:
		s.count++
		s.inMsg = kind == '{' && len(s.msgs) < maxStreamedPopKeys
		if s.inMsg {
			s.msgs = append(s.msgs, popKeyFields{})
		} else if len(s.msgs) < maxStreamedPopKeys {
			s.msgs = append(s.msgs, popKeyFields{unkeyable: true})
		}
		s.msgField = fieldNone
	case depth == 4 && s.inMsg:
		s.msgValue(kind)
	}
}

func (s *popKeyScan) Close(depth int) {
	switch depth {
	case 2:
		s.inMessages = false
	case 3:
		s.inMsg = false
	}
}

func (s *popKeyScan) Scalar(depth int, first byte) {
	switch {
	case depth == 1:
		s.topValue(first)
		if s.pending {
			s.pending, s.count, s.msgs = false, 0, s.msgs[:0]
		}
	case depth == 2 && s.inMessages:
		s.count++
		if len(s.msgs) < maxStreamedPopKeys {
			s.msgs = append(s.msgs, popKeyFields{unkeyable: true})
		}
	case depth == 3 && s.inMsg:
		s.msgValue(first)
	}
}

// topValue notes a top-level member's value that is not a string, by its
// first byte: a "consumerGroup" null is none, any other is not read.
func (s *popKeyScan) topValue(first byte) {
	if s.groupNext {
		s.groupNext, s.topGroup, s.topGroupBad = false, "", first != 'n'
	}
}

// msgValue notes a message member's value that is not a string, by its
// first byte: a keying field null is empty, any other is not read.
func (s *popKeyScan) msgValue(first byte) {
	if s.msgField != fieldNone {
		s.setField(s.msgField, "", first == 'n')
	}
	s.msgField = fieldNone
}

// setField takes the last value of a keying field of the current message:
// ok false when it was not read exactly.
func (s *popKeyScan) setField(field int, v string, ok bool) {
	m := &s.msgs[len(s.msgs)-1]
	switch field {
	case fieldID:
		m.id = v
	case fieldPartitionID:
		m.partitionID = v
	case fieldTransactionID:
		m.transactionID = v
	case fieldGroup:
		m.group = v
	}
	if ok {
		m.bad &^= 1 << field
	} else {
		m.bad |= 1 << field
	}
}

func (s *popKeyScan) StringStart(depth int, key bool) {
	s.reading = fieldNone
	switch {
	case depth == 1 && key && s.isObject:
		s.reading = fieldTopKey
	case depth == 1 && !key:
		if s.pending {
			s.pending, s.count, s.msgs = false, 0, s.msgs[:0]
		}
		if s.groupNext {
			s.groupNext = false
			s.reading = fieldTopGroup
		}
	case depth == 2 && !key && s.inMessages:
		s.count++
		if len(s.msgs) < maxStreamedPopKeys {
			s.msgs = append(s.msgs, popKeyFields{unkeyable: true})
		}
	case depth == 3 && key && s.inMsg:
		s.reading = fieldMsgKey
	case depth == 3 && !key && s.inMsg:
		s.reading = s.msgField
		s.msgField = fieldNone
	}
	s.text, s.long = s.text[:0], false
}

func (s *popKeyScan) StringPart(raw []byte) {
	if s.reading == fieldNone || s.long {
		return
	}
	if len(s.text)+len(raw) > maxPopKeyField {
		s.long = true
		return
	}
	s.text = append(s.text, raw...)
}

func (s *popKeyScan) StringEnd() {
	field := s.reading
	s.reading = fieldNone
	plain := !s.long && bytes.IndexByte(s.text, '\\') < 0
	switch field {
	case fieldTopKey:
		// Member names are compared decoded and exactly, as the broker's
		// library reads them.
		s.pending = !s.long && wire.UnescapedIs(s.text, "messages")
		s.groupNext = !s.long && wire.UnescapedIs(s.text, "consumerGroup")
	case fieldTopGroup:
		s.topGroup, s.topGroupBad = string(s.text), !plain
	case fieldMsgKey:
		s.msgField = fieldNone
		if s.long {
			return
		}
		for _, f := range [...]struct {
			name  string
			field int
		}{{"id", fieldID}, {"partitionId", fieldPartitionID}, {"transactionId", fieldTransactionID}, {"consumerGroup", fieldGroup}} {
			if wire.UnescapedIs(s.text, f.name) {
				s.msgField = f.field
			}
		}
	case fieldID, fieldPartitionID, fieldTransactionID, fieldGroup:
		if !plain {
			s.setField(field, "", false)
			return
		}
		s.setField(field, string(s.text), true)
	}
}

// Begun is how many messages a pop answer cut short had begun before its
// end, for an upstream status: the answer read so far is a well-formed
// start of one JSON object, and each element of its "messages" array that
// started counts, the one the cut fell in too. The broker sent at least
// these, so a pop whose answer broke off is billed them; a start that is
// not well-formed JSON, or not an object, counts 0, as Result does. None
// is keyed (the one the cut fell in may have lost part of its key), so
// each is billed a first delivery.
func (p *PopKeys) Begun(status int) int64 {
	if !is2xx(status) || p.check.Write(nil) != nil || !p.scan.isObject {
		return 0
	}
	return p.scan.count
}
