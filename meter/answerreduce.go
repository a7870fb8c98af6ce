package meter

import (
	"bytes"

	"github.com/queengate/queengate/wire"
)

// A streams cycle or a DLQ replay answer too large to keep (over
// MaxBilledBody: a cycle's answer carries the messages it popped) is still
// billed from what it says: as it streams past, only the top-level
// members billing reads are kept (a cycle's "success" and "push_results",
// a replay's "success" and "result"), and BillCycle or BillReplay reads
// them as they would read the whole answer. Nothing else (the popped
// messages) is kept.
//
// The kept members are rebuilt from what wire.Checker reports: strings
// exactly as sent (escapes intact), containers and literals as they are,
// and every number as 0, which reads the same to billing (no field it
// reads is a number, and a number where it expects a string or a boolean
// is the same type mistake whatever its value). The answer as a whole
// must be one JSON object by the Checker's rules, else it is unreadable.

// CycleAnswer reduces a streams cycle answer as it streams.
type CycleAnswer struct{ r answerReducer }

// NewCycleAnswer keeps "success" and "push_results", which BillCycle
// reads by their exact names.
func NewCycleAnswer() *CycleAnswer {
	a := &CycleAnswer{}
	a.r.init(func(name string) bool { return name == "success" || name == "push_results" })
	return a
}

// Write takes the next piece of the answer; it never fails.
func (a *CycleAnswer) Write(b []byte) (int, error) { return a.r.Write(b) }

// Bill is BillCycle of the whole answer; overflow reports that the kept
// members alone were over MaxBilledBody, which billing cannot read.
func (a *CycleAnswer) Bill(status int, groups []CycleGroup) (billed int64, overflow bool) {
	body, ok := a.r.reduced()
	if a.r.overflow {
		return 0, true
	}
	if !ok {
		return 0, false
	}
	return BillCycle(status, body, groups), false
}

// ReplayAnswer reduces a DLQ replay answer as it streams.
type ReplayAnswer struct{ r answerReducer }

// NewReplayAnswer keeps "success" and "result", which BillReplay reads by
// their exact names.
func NewReplayAnswer() *ReplayAnswer {
	a := &ReplayAnswer{}
	a.r.init(func(name string) bool { return name == "success" || name == "result" })
	return a
}

// Write takes the next piece of the answer; it never fails.
func (a *ReplayAnswer) Write(b []byte) (int, error) { return a.r.Write(b) }

// Bill is BillReplay of the whole answer.
func (a *ReplayAnswer) Bill(status int) (stored, readable bool) {
	body, ok := a.r.reduced()
	if !ok || a.r.overflow {
		body = nil // not a JSON object billing can read
	}
	return BillReplay(status, body)
}

// answerReducer keeps the wanted top-level members of one JSON object.
type answerReducer struct {
	check    wire.Checker
	keep     func(name string) bool
	out      []byte // the kept members, without the enclosing braces
	overflow bool

	isObject  bool
	keeping   bool // the current top-level member is kept
	readName  bool // reading a top-level member name
	name      []byte
	nameLong  bool
	stack     []reduceLevel // open containers inside a kept member
	memberOut int           // kept members written
}

// reduceLevel is one open container of a kept member: its kind and how
// many values (or members) it holds so far.
type reduceLevel struct {
	object bool
	n      int
}

// maxReducedName bounds a top-level member name worth comparing (the
// longest wanted, escaped throughout, is under 80 bytes).
const maxReducedName = 128

func (r *answerReducer) init(keep func(string) bool) {
	r.keep = keep
	r.check.Watch = r
}

func (r *answerReducer) Write(b []byte) (int, error) {
	_ = r.check.Write(b)
	return len(b), nil
}

// reduced is the kept members as one object, or false when the answer is
// not one well-formed JSON object.
func (r *answerReducer) reduced() ([]byte, bool) {
	if r.check.Close() != nil || !r.isObject {
		return nil, false
	}
	body := make([]byte, 0, len(r.out)+2)
	body = append(body, '{')
	body = append(body, r.out...)
	return append(body, '}'), true
}

func (r *answerReducer) emit(b ...byte) {
	if r.overflow {
		return
	}
	if len(r.out)+len(b) > MaxBilledBody {
		r.overflow, r.out = true, nil
		return
	}
	r.out = append(r.out, b...)
}

func (r *answerReducer) emitString(s []byte) {
	if r.overflow {
		return
	}
	if len(r.out)+len(s) > MaxBilledBody {
		r.overflow, r.out = true, nil
		return
	}
	r.out = append(r.out, s...)
}

// valueStart writes the separator before a value inside a kept member.
func (r *answerReducer) valueStart() {
	if len(r.stack) == 0 {
		return // the member's own value: its ':' is written
	}
	top := &r.stack[len(r.stack)-1]
	if !top.object {
		if top.n > 0 {
			r.emit(',')
		}
		top.n++
	}
}

func (r *answerReducer) Open(depth int, kind byte) {
	if depth == 1 {
		r.isObject = kind == '{'
		return
	}
	if !r.keeping {
		return
	}
	r.valueStart()
	r.emit(kind)
	r.stack = append(r.stack, reduceLevel{object: kind == '{'})
}

func (r *answerReducer) Close(depth int) {
	if depth == 1 || !r.keeping || len(r.stack) == 0 {
		return
	}
	if r.stack[len(r.stack)-1].object {
		r.emit('}')
	} else {
		r.emit(']')
	}
	r.stack = r.stack[:len(r.stack)-1]
}

func (r *answerReducer) Scalar(_ int, first byte) {
	if !r.keeping {
		return
	}
	r.valueStart()
	switch first {
	case 't':
		r.emitString([]byte("true"))
	case 'f':
		r.emitString([]byte("false"))
	case 'n':
		r.emitString([]byte("null"))
	default:
		r.emit('0')
	}
}

func (r *answerReducer) StringStart(depth int, key bool) {
	r.readName = false
	if depth == 1 && key && r.isObject {
		// A new top-level member: the one before it, if kept, is done.
		r.keeping, r.stack = false, r.stack[:0]
		r.readName, r.name, r.nameLong = true, r.name[:0], false
		return
	}
	if !r.keeping {
		return
	}
	if key {
		top := &r.stack[len(r.stack)-1]
		if top.n > 0 {
			r.emit(',')
		}
		top.n++
	} else {
		r.valueStart()
	}
	r.emit('"')
}

func (r *answerReducer) StringPart(raw []byte) {
	if r.readName {
		if len(r.name)+len(raw) > maxReducedName {
			r.nameLong = true
		} else {
			r.name = append(r.name, raw...)
		}
		return
	}
	if r.keeping {
		r.emitString(raw)
	}
}

func (r *answerReducer) StringEnd() {
	if r.readName {
		r.readName = false
		if r.nameLong || !r.keep(decodedName(r.name)) {
			return
		}
		r.keeping = true
		if r.memberOut > 0 {
			r.emit(',')
		}
		r.memberOut++
		r.emit('"')
		r.emitString(r.name)
		r.emit('"', ':')
		return
	}
	if !r.keeping {
		return
	}
	r.emit('"')
	if len(r.stack) > 0 && r.stack[len(r.stack)-1].object && r.stack[len(r.stack)-1].n%2 == 1 {
		// A member name inside a kept object: its value follows.
		r.emit(':')
		r.stack[len(r.stack)-1].n++
	}
}

// decodedName is a member name's text with its escapes decoded ("" when
// it cannot be decoded, which no wanted name is).
func decodedName(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	text, ok := wire.Unquote(raw, nil)
	if !ok {
		return ""
	}
	return string(text)
}
