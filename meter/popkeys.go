package meter

import (
	"bytes"
	"math"

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
// message, in their order; len(keys) ≤ messages), spelled by BillPop's
// popKeys. An answer that is not one well-formed JSON object, or whose
// "messages" is not an array, bills nothing.
func (p *PopKeys) Result(status int) (messages int64, keys []string) {
	s := &p.scan
	if !is2xx(status) || p.check.Close() != nil || !s.isObject {
		return 0, nil
	}
	return s.count, popKeys(s.text, s.msgs, s.topGroup, s.topGroupBad)
}

// What the string being read is.
const (
	readingNone     = iota
	readingTopKey   // a top-level member name
	readingTopGroup // the value of the top-level consumerGroup
	readingMsgKey   // a member name of a message being keyed
	readingMsgValue // the value of a keying member of that message (msgMember)
)

// popKeyScan follows the top-level members and the message objects. The
// keying members' texts are kept one after the other in text, and each
// message's popFields (BillPop's) name their spans in it, so that the keys
// are spelled by the same popFields.key and popKeys as BillPop's.
type popKeyScan struct {
	isObject    bool
	pending     bool // the top-level member being read is "messages"
	groupNext   bool // the top-level member being read is "consumerGroup"
	inMessages  bool
	count       int64
	msgs        []popFields
	inMsg       bool  // inside a message object (depth 3) being keyed
	msgMember   uint8 // the keying member (popMember*) whose value comes next
	topGroup    span
	topGroupBad bool

	reading int   // what the current string is (reading*)
	member  uint8 // with readingMsgValue: whose value it is
	text    []byte
	start   int // where the current string's text starts in text
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
			s.msgs = append(s.msgs, popFields{})
		} else if len(s.msgs) < maxStreamedPopKeys {
			s.msgs = append(s.msgs, popFields{unkeyable: true})
		}
		s.msgMember = popMemberNone
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
			s.msgs = append(s.msgs, popFields{unkeyable: true})
		}
	case depth == 3 && s.inMsg:
		s.msgValue(first)
	}
}

// topValue notes a top-level member's value that is not a string, by its
// first byte: a "consumerGroup" null is none, any other is not read.
func (s *popKeyScan) topValue(first byte) {
	if s.groupNext {
		s.groupNext, s.topGroup, s.topGroupBad = false, span{}, first != 'n'
	}
}

// msgValue notes a message member's value that is not a string, by its
// first byte: a keying member null is empty, any other is not read.
func (s *popKeyScan) msgValue(first byte) {
	if s.msgMember != popMemberNone {
		s.msgs[len(s.msgs)-1].set(s.msgMember, span{}, first == 'n')
	}
	s.msgMember = popMemberNone
}

func (s *popKeyScan) StringStart(depth int, key bool) {
	s.reading = readingNone
	switch {
	case depth == 1 && key && s.isObject:
		s.reading = readingTopKey
	case depth == 1 && !key:
		if s.pending {
			s.pending, s.count, s.msgs = false, 0, s.msgs[:0]
		}
		if s.groupNext {
			s.groupNext = false
			s.reading = readingTopGroup
		}
	case depth == 2 && !key && s.inMessages:
		s.count++
		if len(s.msgs) < maxStreamedPopKeys {
			s.msgs = append(s.msgs, popFields{unkeyable: true})
		}
	case depth == 3 && key && s.inMsg:
		s.reading = readingMsgKey
	case depth == 3 && !key && s.inMsg && s.msgMember != popMemberNone:
		s.reading, s.member = readingMsgValue, s.msgMember
		s.msgMember = popMemberNone
	}
	s.start, s.long = len(s.text), false
}

func (s *popKeyScan) StringPart(raw []byte) {
	if s.reading == readingNone || s.long {
		return
	}
	if len(s.text)-s.start+len(raw) > maxPopKeyField || len(s.text)+len(raw) > math.MaxInt32 {
		s.long = true
		return
	}
	s.text = append(s.text, raw...)
}

func (s *popKeyScan) StringEnd() {
	reading := s.reading
	s.reading = readingNone
	text := s.text[s.start:]
	v := span{int32(s.start), int32(len(text))}
	plain := !s.long && bytes.IndexByte(text, '\\') < 0
	switch reading {
	case readingTopKey, readingMsgKey:
		// A name is not kept: only what it says.
		s.text = s.text[:s.start]
		if s.long {
			s.pending, s.groupNext, s.msgMember = false, false, popMemberNone
			return
		}
		// Member names are compared decoded and exactly, as the broker's
		// library reads them.
		if reading == readingTopKey {
			s.pending = wire.UnescapedIs(text, "messages")
			s.groupNext = wire.UnescapedIs(text, "consumerGroup")
			return
		}
		s.msgMember = popMemberNone
		for _, m := range [...]struct {
			name   string
			member uint8
		}{{"id", popMemberID}, {"partitionId", popMemberPartitionID}, {"transactionId", popMemberTransactionID}, {"consumerGroup", popMemberMessageGroup}} {
			if wire.UnescapedIs(text, m.name) {
				s.msgMember = m.member
			}
		}
	case readingTopGroup:
		s.topGroup, s.topGroupBad = v, !plain
	case readingMsgValue:
		s.msgs[len(s.msgs)-1].set(s.member, v, plain)
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
