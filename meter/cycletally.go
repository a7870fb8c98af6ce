package meter

import (
	"encoding/binary"

	"github.com/queengate/queengate/wire"
)

// CycleTally reads a POST /streams/v1/cycle answer as it streams past, for
// BillCycle's rule (M5), keeping only what confirms the request's groups:
// the answer also carries the messages the cycle popped, and can be far
// larger than anything the gateway should hold. It reads by the rules of
// answers (doc.go): member names exactly, the last of a repeated member
// wins, and an answer that is not one well-formed JSON object bills
// nothing.
//
// Write it the answer in pieces, then read Billed.
type CycleTally struct {
	scan  wire.Stream
	watch cycleWatch
}

// NewCycleTally returns a tally of an answer to a cycle whose push_items
// the gateway counted in groups.
func NewCycleTally(groups []CycleGroup) *CycleTally {
	t := &CycleTally{}
	longest := t.watch.init(groups)
	t.scan.Reset(&t.watch, 3, cycleNames)
	// A name's text, escapes intact, is at most six bytes a byte of the
	// name (\u00XX): a longer one names no group, and need not be kept.
	t.watch.maxText = 6 * longest
	t.scan.KeepLong(t.watch.maxText)
	return t
}

// Write takes the next piece of the answer; it never fails.
func (t *CycleTally) Write(p []byte) (int, error) {
	t.scan.Feed(p)
	return len(p), nil
}

// Billed is the number of sink items to bill for the upstream status. A
// group is billed in full when a confirming push result names its queue
// and partition; results that name no partition confirm items of their
// queue one by one, up to what the request sent to it, in the groups'
// order.
func (t *CycleTally) Billed(status int) int64 {
	w := &t.watch
	if !is2xx(status) || !t.scan.OK() || !w.isObject || !w.success {
		return 0
	}
	unnamed := append([]int(nil), w.unnamed...)
	var billed int64
	for i, g := range w.groups {
		if g.Items <= 0 {
			continue
		}
		if w.named[w.pairOf[i]] {
			billed += int64(g.Items)
			continue
		}
		left := &unnamed[w.queueOf[i]]
		take := min(*left, g.Items)
		*left -= take
		billed += int64(take)
	}
	return billed
}

// cycleNames are the member names CycleTally reads.
var cycleNames = wire.NamesOf("success", "push_results", "status", "queue", "queueName", "partition")

// cycleMember is the member whose value cycleWatch reads next.
type cycleMember uint8

const (
	cycleNone cycleMember = iota
	cycleSuccess
	cycleResults
	cycleStatus
	cycleQueue // then cycleQueueName and cyclePartition: cycleQueue + the index in cycleWatch.names
	cycleQueueName
	cyclePartition
)

// cycleNameWords are the name members of a push result, in the order of
// cycleWatch.names.
var cycleNameWords = [...]string{"queue", "queueName", "partition"}

// cycleWatch follows the top-level object's "success" and the objects of
// its "push_results" array, and marks the groups each result confirms.
type cycleWatch struct {
	groups          []CycleGroup
	pairs, queues   map[string]int // a group's pairKey, its queue: its slot in named, unnamed
	pairOf, queueOf []int          // each group's slots
	named           []bool         // confirmed by a result naming the pair's partition
	unnamed         []int          // items of the queue confirmed by results naming no partition
	maxText         int            // the longest name text that may name a group

	listPlace  // the list is the "push_results" array
	success    bool
	member     cycleMember
	confirming bool          // the result's last status is "queued" or "buffered"
	names      [3]cycleValue // the result's last queue, queueName and partition
	key        []byte        // a pair's key, built to look it up
}

// cycleValue is the last value of one of a push result's name members.
type cycleValue struct {
	isString bool   // it is a string
	unknown  bool   // a string too long to name any group: text is not kept
	text     []byte // the string's text, unescaped
}

// init indexes the groups and returns the length of the longest name.
func (w *cycleWatch) init(groups []CycleGroup) (longest int) {
	w.groups = groups
	w.pairs, w.queues = make(map[string]int, len(groups)), make(map[string]int, len(groups))
	w.pairOf, w.queueOf = make([]int, len(groups)), make([]int, len(groups))
	slot := func(m map[string]int, key string) int {
		at, ok := m[key]
		if !ok {
			at = len(m)
			m[key] = at
		}
		return at
	}
	for i, g := range groups {
		w.key = pairKey(w.key[:0], []byte(g.Queue), []byte(g.Partition))
		w.pairOf[i] = slot(w.pairs, string(w.key))
		w.queueOf[i] = slot(w.queues, g.Queue)
		longest = max(longest, len(g.Queue), len(g.Partition))
	}
	w.named, w.unnamed = make([]bool, len(w.pairs)), make([]int, len(w.queues))
	return longest
}

// pairKey is a queue and partition as one map key: the queue's length
// first, so that no two pairs share a key.
func pairKey(dst, queue, partition []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(queue)))
	dst = append(dst, queue...)
	return append(dst, partition...)
}

func (w *cycleWatch) Open(depth int, kind byte) {
	if w.open(depth, kind, w.member == cycleResults) {
		w.confirming = false
		for k := range w.names {
			w.names[k].isString = false
		}
	}
	w.member = cycleNone
}

func (w *cycleWatch) Close(depth int) {
	if w.close(depth) {
		w.confirm()
	}
}

func (w *cycleWatch) Key(depth int, raw []byte, plain bool) bool {
	w.member = cycleNone
	switch {
	case w.topMember(depth):
		switch {
		case wire.WordIs(raw, plain, "success"):
			w.member, w.success = cycleSuccess, false
		case wire.WordIs(raw, plain, "push_results"):
			// The last push_results is the answer's: what an earlier one
			// confirmed is gone, and one that is no array confirms nothing.
			w.member, w.inList = cycleResults, false
			clear(w.named)
			clear(w.unnamed)
		}
	case w.itemMember(depth):
		if wire.WordIs(raw, plain, "status") {
			w.member, w.confirming = cycleStatus, false
			break
		}
		for k, word := range cycleNameWords {
			if wire.WordIs(raw, plain, word) {
				w.member, w.names[k].isString = cycleQueue+cycleMember(k), false
				break
			}
		}
	}
	return w.member != cycleNone
}

func (w *cycleWatch) Value(_ int, first byte, raw []byte, plain bool) {
	member := w.member
	w.member = cycleNone
	switch {
	case member == cycleSuccess:
		w.success = first == 't'
	case member == cycleStatus:
		w.confirming = first == '"' && (wire.WordIs(raw, plain, "queued") || wire.WordIs(raw, plain, "buffered"))
	case member >= cycleQueue && first == '"':
		w.names[member-cycleQueue].set(raw, w.maxText)
	}
}

// set takes a string value whose raw text (nil when too long to have been
// carried across pieces) is raw.
func (v *cycleValue) set(raw []byte, maxText int) {
	v.isString, v.unknown = true, raw == nil || len(raw) > maxText
	if v.unknown {
		return
	}
	text, ok := wire.Unquote(raw, v.text[:0])
	v.text, v.isString = text, ok
}

// confirm marks what the push result just read confirms: with a status
// "queued" or "buffered", its queue (else its queueName), and its
// partition when it names one.
func (w *cycleWatch) confirm() {
	if !w.confirming {
		return
	}
	queue, partition := &w.names[0], &w.names[2]
	if !queue.isString {
		queue = &w.names[1]
	}
	switch {
	case !queue.isString:
	case partition.isString:
		if !queue.unknown && !partition.unknown {
			w.key = pairKey(w.key[:0], queue.text, partition.text)
			if at, ok := w.pairs[string(w.key)]; ok {
				w.named[at] = true
			}
		}
	case !queue.unknown:
		if at, ok := w.queues[string(queue.text)]; ok {
			w.unnamed[at]++
		}
	}
}

// ReplayTally reads a DLQ replay or message retry answer as it streams
// past, for BillReplay's rule (M6).
type ReplayTally struct {
	scan  wire.Stream
	watch replayWatch
}

// NewReplayTally returns a tally ready for the first piece of an answer.
func NewReplayTally() *ReplayTally {
	t := &ReplayTally{}
	t.scan.Reset(&t.watch, 1, replayNames)
	return t
}

// Write takes the next piece of the answer; it never fails.
func (t *ReplayTally) Write(p []byte) (int, error) {
	t.scan.Feed(p)
	return len(p), nil
}

// Stored is BillReplay's verdict on the whole answer.
func (t *ReplayTally) Stored(status int) (stored, readable bool) {
	w := &t.watch
	switch {
	case !is2xx(status):
		return false, true
	case !t.scan.OK() || !w.isObject:
		return false, false
	case !w.success:
		return false, true
	}
	return w.result != replayOther, true
}

// replayNames are the member names ReplayTally reads.
var replayNames = wire.NamesOf("success", "result")

// replayResult is what the answer's last "result" member said.
type replayResult uint8

const (
	replayAbsent replayResult = iota // no result member (older brokers): moved
	replayMoved                      // the string "moved", written without escapes
	replayOther
)

// replayWatch follows the top-level object's "success" and "result".
type replayWatch struct {
	isObject, success bool
	result            replayResult
	member            replayMember // the member whose value comes next
}

type replayMember uint8

const (
	replayNone replayMember = iota
	replaySuccess
	replayResultMember
)

func (w *replayWatch) Open(depth int, kind byte) {
	if depth == 1 {
		w.isObject = kind == '{'
	}
	w.member = replayNone
}

func (w *replayWatch) Close(int) {}

func (w *replayWatch) Key(depth int, raw []byte, plain bool) bool {
	w.member = replayNone
	switch {
	case depth != 1 || !w.isObject:
	case wire.WordIs(raw, plain, "success"):
		w.member, w.success = replaySuccess, false
	case wire.WordIs(raw, plain, "result"):
		w.member, w.result = replayResultMember, replayOther
	}
	return w.member != replayNone
}

func (w *replayWatch) Value(_ int, first byte, raw []byte, _ bool) {
	switch w.member {
	case replaySuccess:
		w.success = first == 't'
	case replayResultMember:
		if first == '"' && string(raw) == "moved" {
			w.result = replayMoved
		}
	}
	w.member = replayNone
}
