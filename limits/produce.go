package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/queengate/queengate/internal/jsonscan"
)

// This file reads produce bodies (push, transaction, ephemeral push, the
// streams cycle) once, to decide; the gateway then forwards the exact bytes
// it received. Parsing streams through a json.Decoder over the body: values
// the gateway does not need (payloads, transaction ids, trace ids) are
// measured or skipped without being decoded or copied, so a large body never
// gets a second copy.
//
// Two broker facts shape the parser:
//
//   - A body the parser cannot read is forwarded unenforced, so the broker
//     must be certain to refuse it too. The parser is therefore never stricter
//     than the broker: it accepts a leading UTF-8 byte-order mark (the broker's
//     JSON library skips one) and trailing whitespace.
//   - The broker's JSON library keeps the last of duplicated object keys, so
//     the parser does too: `{"items":[...],"items":[...]}` is judged by the
//     second array, and an item's second "queue" is the queue it goes to.

// QueuePartition is one (queue, partition) pair a produce body writes to.
type QueuePartition struct{ Queue, Partition string }

// DefaultPartition is the partition of an item that names none.
const DefaultPartition = "Default"

// ProduceItem is one counted item of a produce body: where it goes and the
// length of its payload's raw JSON text as sent.
type ProduceItem struct {
	Queue, Partition string
	PayloadBytes     int
}

// ProduceBatch is what the gateway needs to know about a produce body.
type ProduceBatch struct {
	// Items is the number of counted items.
	Items int
	// Pairs are the distinct (queue, partition) pairs, in first-seen order.
	Pairs []QueuePartition
	// PairItems[i] is how many items went to Pairs[i] (metering bills a
	// streams cycle per group).
	PairItems []int
	// PayloadBytes is the sum of the items' payload sizes.
	PayloadBytes int64
	// Heaviest is the first item with the largest payload: its index (among
	// counted items; for a streams cycle, its position in push_items) and its
	// payload size. Index is -1 when there are no items.
	Heaviest struct{ Index, Bytes int }

	// records are the items that set a new largest payload, in order. The
	// first item over any payload cap is one of them (every earlier item is
	// smaller), so CheckProduce can name it without a per-item list.
	records []sizeRecord
	// pairIdx indexes Pairs once there are too many to scan.
	pairIdx map[string]int
	keyBuf  []byte
}

type sizeRecord struct{ index, bytes int }

// produceLinearPairs is how many pairs are searched linearly before an index
// map is built: most bodies write to one or a few pairs.
const produceLinearPairs = 8

func (b *ProduceBatch) reset() {
	b.Items, b.PayloadBytes = 0, 0
	b.Pairs = b.Pairs[:0]
	b.PairItems = b.PairItems[:0]
	b.Heaviest.Index, b.Heaviest.Bytes = -1, 0
	b.records = b.records[:0]
	b.pairIdx = nil
}

// add counts one item at position index (the index reported for it).
func (b *ProduceBatch) add(queue, partition []byte, payloadBytes, index int) {
	b.Items++
	b.PayloadBytes += int64(payloadBytes)
	if b.Heaviest.Index < 0 || payloadBytes > b.Heaviest.Bytes {
		b.Heaviest.Index, b.Heaviest.Bytes = index, payloadBytes
		b.records = append(b.records, sizeRecord{index, payloadBytes})
	}
	b.addPair(queue, partition)
}

func (b *ProduceBatch) addPair(queue, partition []byte) {
	if b.pairIdx == nil {
		for i, p := range b.Pairs {
			if p.Queue == string(queue) && p.Partition == string(partition) {
				b.PairItems[i]++
				return
			}
		}
		b.Pairs = append(b.Pairs, QueuePartition{string(queue), string(partition)})
		b.PairItems = append(b.PairItems, 1)
		if len(b.Pairs) > produceLinearPairs {
			b.pairIdx = make(map[string]int, 2*len(b.Pairs))
			for i, p := range b.Pairs {
				b.pairIdx[string(b.pairKey([]byte(p.Queue), []byte(p.Partition)))] = i
			}
		}
		return
	}
	key := b.pairKey(queue, partition)
	if i, seen := b.pairIdx[string(key)]; seen {
		b.PairItems[i]++
		return
	}
	b.Pairs = append(b.Pairs, QueuePartition{string(queue), string(partition)})
	b.PairItems = append(b.PairItems, 1)
	b.pairIdx[string(key)] = len(b.Pairs) - 1
}

// pairKey is an unambiguous map key for a pair: the queue's length, then both
// names (names may hold any character, NUL included).
func (b *ProduceBatch) pairKey(queue, partition []byte) []byte {
	k := strconv.AppendInt(b.keyBuf[:0], int64(len(queue)), 10)
	k = append(k, ':')
	k = append(k, queue...)
	k = append(k, partition...)
	b.keyBuf = k
	return k
}

// SizeRefusal is a produce body over a hard size cap: always 413
// payload_too_large, in shadow mode too.
type SizeRefusal struct{ Message string }

// DefaultMaxBatchItems is the batch cap of a plan without max_batch_items,
// when the gateway is not configured with another.
const DefaultMaxBatchItems = 10000

// CheckProduce applies the hard size caps to a parsed push or transaction:
// first the per-item payload cap (naming the first item over it), then the
// batch cap (max_batch_items, else defaultMaxBatch, else
// DefaultMaxBatchItems when defaultMaxBatch is not positive). It returns nil
// when the body is within both.
func CheckProduce(b ProduceBatch, lim Effective, defaultMaxBatch int) *SizeRefusal {
	if c := lim.MaxPayloadBytes; !c.IsUnlimited() {
		for _, r := range b.records {
			if int64(r.bytes) > int64(c) {
				return &SizeRefusal{Message: "item " + strconv.Itoa(r.index) + ": payload " +
					strconv.Itoa(r.bytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
			}
		}
	}
	maxItems := int64(lim.MaxBatchItems)
	if lim.MaxBatchItems.IsUnlimited() {
		maxItems = int64(defaultMaxBatch)
		if maxItems <= 0 {
			maxItems = DefaultMaxBatchItems
		}
	}
	if int64(b.Items) > maxItems {
		return &SizeRefusal{Message: "batch of " + strconv.Itoa(b.Items) + " items exceeds max_batch_items (" +
			strconv.FormatInt(maxItems, 10) + ")"}
	}
	return nil
}

// CheckCycle applies the per-item payload cap to a parsed streams cycle: the
// cap is checked against the heaviest sink item, named by its position in
// push_items. A cycle has no batch cap of its own.
func CheckCycle(b ProduceBatch, lim Effective) *SizeRefusal {
	c := lim.MaxPayloadBytes
	if c.IsUnlimited() || b.Heaviest.Index < 0 || int64(b.Heaviest.Bytes) <= int64(c) {
		return nil
	}
	return &SizeRefusal{Message: "push_items[" + strconv.Itoa(b.Heaviest.Index) + "]: payload " +
		strconv.Itoa(b.Heaviest.Bytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
}

// ---------------------------------------------------------------------------
// Parsers.
//
// The top level of a body is walked token by token with a json.Decoder; each
// element of the array that matters (a push item, a transaction operation, a
// sink item) is then read with one Decode call into a json.Unmarshaler. The
// decoder has already checked that element's syntax when it hands over its
// bytes (the element's raw text, which aliases the decoder's buffer), so the
// Unmarshaler walks them with a small scanner for valid JSON and keeps only
// what it needs. The decoder buffers one element at a time, never the whole
// body.

// ParsePush reads a POST /api/v1/push body: an object with a required
// "items" array whose every element is an object with a string "queue" and
// a "payload" (any JSON value); "partition" is optional (absent or null
// means "Default"); other fields are ignored. ok is false for any other
// shape, and then the caller forwards the body unenforced (the broker
// answers it with its own 400).
func ParsePush(body []byte) (ProduceBatch, bool) {
	var b ProduceBatch
	b.reset()
	r := newJSONWalker(body)
	sink := pushItemSink{b: &b}
	found, err := r.topLevel("items", func() (bool, error) {
		// A later "items" replaces an earlier one, as it does at the broker.
		b.reset()
		isArray, err := r.open('[')
		if err != nil || !isArray {
			return false, err
		}
		sink.valid = true
		for r.dec.More() {
			if err := r.dec.Decode(&sink); err != nil {
				return false, err
			}
		}
		_, err = r.dec.Token() // ']'
		return sink.valid, err
	})
	if err != nil || !found {
		return ProduceBatch{}, false
	}
	return b, true
}

// ParseTransaction reads a POST /api/v1/transaction body: an object with a
// required "operations" array. An operation whose "type" is "ack" is
// skipped; otherwise an operation with an "items" array counts each item
// (push items as in ParsePush); otherwise one with both "queue" (a string)
// and "payload" counts as one item (the flat form, "partition" optional);
// anything else is skipped. ok is false when the body is not of that shape
// or a counted item is not a valid push item (a string partition, null or
// none; a string queue; a payload).
func ParseTransaction(body []byte) (ProduceBatch, bool) {
	var b ProduceBatch
	b.reset()
	r := newJSONWalker(body)
	sink := operationSink{b: &b}
	found, err := r.topLevel("operations", func() (bool, error) {
		b.reset()
		isArray, err := r.open('[')
		if err != nil || !isArray {
			return false, err
		}
		sink.valid = true
		for r.dec.More() {
			if err := r.dec.Decode(&sink); err != nil {
				return false, err
			}
		}
		_, err = r.dec.Token() // ']'
		return sink.valid, err
	})
	if err != nil || !found {
		return ProduceBatch{}, false
	}
	return b, true
}

// ParseEphemeralCount reads a POST /api/v1/ephemeral/push body
// ({queue, partition?, messages:[...]}) and returns the number of elements
// of "messages"; the elements are not inspected. A body of another shape
// counts 0.
func ParseEphemeralCount(body []byte) int {
	r := newJSONWalker(body)
	count := 0
	found, err := r.topLevel("messages", func() (bool, error) {
		count = 0
		isArray, err := r.open('[')
		if err != nil || !isArray {
			return false, err
		}
		for r.dec.More() {
			if err := r.skip(); err != nil {
				return false, err
			}
			count++
		}
		_, err = r.dec.Token() // ']'
		return true, err
	})
	if err != nil || !found {
		return 0
	}
	return count
}

// ParseCycle reads the sink items of a POST /streams/v1/cycle body
// ("push_items") the way the broker packs them: each element on its own, so
// a bad element is skipped and its neighbours kept. An element counts when
// it is an object with a non-empty string "queue"; its partition is a
// non-empty string "partition", else "Default"; its payload size is the raw
// length of "payload", else of "data" (the broker's alias), else 0.
// Heaviest.Index is the element's position in push_items, skipped elements
// included. A body of another shape gives an empty batch.
func ParseCycle(body []byte) ProduceBatch {
	var b ProduceBatch
	b.reset()
	r := newJSONWalker(body)
	sink := sinkItemSink{b: &b}
	found, err := r.topLevel("push_items", func() (bool, error) {
		b.reset()
		isArray, err := r.open('[')
		if err != nil || !isArray {
			return false, err
		}
		for sink.pos = 0; r.dec.More(); sink.pos++ {
			if err := r.dec.Decode(&sink); err != nil {
				return false, err
			}
		}
		_, err = r.dec.Token() // ']'
		return true, err
	})
	if err != nil || !found {
		b.reset()
	}
	return b
}

// ---------------------------------------------------------------------------
// The top-level walker.

// jsonWalker walks the top level of one body with a json.Decoder.
type jsonWalker struct{ dec *json.Decoder }

// newJSONWalker returns a walker over body, after a UTF-8 byte-order mark
// (which the broker's JSON parser skips too).
func newJSONWalker(body []byte) *jsonWalker {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	return &jsonWalker{dec: json.NewDecoder(bytes.NewReader(body))}
}

// topLevel walks a body that must be one JSON object and nothing after it.
// For every member named field it calls read, which consumes the value and
// reports whether it was usable; the last such member decides (the broker
// keeps the last of duplicated keys). Other members are skipped. found is
// true when the body is an object whose last member named field was usable.
func (r *jsonWalker) topLevel(field string, read func() (bool, error)) (found bool, err error) {
	isObject, err := r.open('{')
	if err != nil || !isObject {
		return false, err
	}
	for {
		tok, err := r.dec.Token()
		if err != nil {
			return false, err
		}
		k, isKey := tok.(string)
		if !isKey {
			break // the closing '}'
		}
		if k != field {
			if err := r.skip(); err != nil {
				return false, err
			}
			continue
		}
		if found, err = read(); err != nil {
			return false, err
		}
	}
	if _, err := r.dec.Token(); err != io.EOF {
		return false, errTrailing
	}
	return found, nil
}

var errTrailing = errors.New("limits: data after the JSON value")

// open reads the next value's first token and reports whether it opens
// d ('{' or '['). Any other value is consumed whole.
func (r *jsonWalker) open(d json.Delim) (bool, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return false, err
	}
	got, isDelim := tok.(json.Delim)
	if !isDelim {
		return false, nil // a scalar: already consumed
	}
	if got == d {
		return true, nil
	}
	// The other container: consume the rest of it, one member at a time.
	for r.dec.More() {
		if got == '{' {
			if _, err := r.dec.Token(); err != nil { // the member's key
				return false, err
			}
		}
		if err := r.skip(); err != nil {
			return false, err
		}
	}
	_, err = r.dec.Token() // the closing delimiter
	return false, err
}

// skip consumes one value without decoding or copying it.
func (r *jsonWalker) skip() error {
	var n rawLen
	return r.dec.Decode(&n)
}

// rawLen records the length of a JSON value's raw text without copying it.
type rawLen int

func (n *rawLen) UnmarshalJSON(b []byte) error { *n = rawLen(len(b)); return nil }

// ---------------------------------------------------------------------------
// Element readers (json.Unmarshaler; they get one element's raw text).

// pushItemSink counts push items into b; valid turns false at the first
// item that is not a valid push item.
type pushItemSink struct {
	b     *ProduceBatch
	valid bool
	names nameBuf
}

func (s *pushItemSink) UnmarshalJSON(data []byte) error {
	q, p, payload, ok := s.names.pushItem(data)
	if !ok {
		s.valid = false
		return nil
	}
	s.b.add(q, p, payload, s.b.Items)
	return nil
}

// operationSink counts the items of one transaction operation into b.
type operationSink struct {
	b     *ProduceBatch
	valid bool
	names nameBuf
}

func (s *operationSink) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '{' {
		return nil // not an object: skipped
	}
	var typ, items, queue, part, payload []byte
	for it := jsonscan.Object(data); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "type"):
			typ = v
		case keyIs(k, "items"):
			items = v
		case keyIs(k, "queue"):
			queue = v
		case keyIs(k, "partition"):
			part = v
		case keyIs(k, "payload"):
			payload = v
		}
	}
	if t, isString := s.names.text(0, typ); isString && string(t) == "ack" {
		return nil
	}
	if len(items) > 0 && items[0] == '[' {
		for it := jsonscan.Array(items); ; {
			elem, more := it.Next()
			if !more {
				break
			}
			q, p, size, ok := s.names.pushItem(elem)
			if !ok {
				s.valid = false
				return nil
			}
			s.b.add(q, p, size, s.b.Items)
		}
		return nil
	}
	q, isString := s.names.text(0, queue)
	if !isString || payload == nil {
		return nil // ack-shaped or malformed: skipped
	}
	p, ok := s.names.partition(part)
	if !ok {
		s.valid = false
		return nil
	}
	s.b.add(q, p, len(payload), s.b.Items)
	return nil
}

// sinkItemSink counts one element of a cycle's push_items at position pos.
type sinkItemSink struct {
	b     *ProduceBatch
	pos   int
	names nameBuf
}

func (s *sinkItemSink) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '{' {
		return nil
	}
	var queue, part, payload, alias []byte
	for it := jsonscan.Object(data); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "queue"):
			queue = v
		case keyIs(k, "partition"):
			part = v
		case keyIs(k, "payload"):
			payload = v
		case keyIs(k, "data"):
			alias = v
		}
	}
	q, isString := s.names.text(0, queue)
	if !isString || len(q) == 0 {
		return nil
	}
	p, isString := s.names.text(1, part)
	if !isString || len(p) == 0 {
		p = defaultPartition
	}
	if payload == nil {
		payload = alias
	}
	s.b.add(q, p, len(payload), s.pos)
	return nil
}

var defaultPartition = []byte(DefaultPartition)

// nameBuf holds unescaped names (queue in slot 0, partition in slot 1) when
// they carry JSON escapes; names without escapes are used in place.
type nameBuf struct{ buf [2][]byte }

// text returns the text of the raw JSON value v when it is a string.
func (n *nameBuf) text(slot int, v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	// Names are used in place unless they hold escapes or invalid UTF-8,
	// which encoding/json turns into U+FFFD like the rest of the body's text.
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, false
	}
	n.buf[slot] = append(n.buf[slot][:0], s...)
	return n.buf[slot], true
}

// partition returns the partition named by the raw value v: "Default" when
// v is absent or null; ok is false when it is neither those nor a string.
func (n *nameBuf) partition(v []byte) ([]byte, bool) {
	if v == nil || string(v) == "null" {
		return defaultPartition, true
	}
	return n.text(1, v)
}

// pushItem reads one push item's raw text. A duplicated key keeps its last
// value.
func (n *nameBuf) pushItem(data []byte) (queue, part []byte, payload int, ok bool) {
	if len(data) == 0 || data[0] != '{' {
		return nil, nil, 0, false
	}
	var q, p, pl []byte
	for it := jsonscan.Object(data); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "queue"):
			q = v
		case keyIs(k, "partition"):
			p = v
		case keyIs(k, "payload"):
			pl = v
		}
	}
	queue, isString := n.text(0, q)
	if !isString || pl == nil {
		return nil, nil, 0, false
	}
	part, ok = n.partition(p)
	if !ok {
		return nil, nil, 0, false
	}
	return queue, part, len(pl), true
}

// keyIs reports whether the raw key text k (between the quotes, escapes
// intact) names name.
func keyIs(k []byte, name string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k) == name
	}
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	var s string
	return json.Unmarshal(q, &s) == nil && s == name
}
