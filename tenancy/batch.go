package tenancy

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/queengate/queengate/wire"
)

// The body sniffers below read request bodies the gateway buffers anyway.
// They fail closed: a body they cannot read exactly as the broker does never
// earns a carve-out, and counts as growing, so a push block refuses it.
//
// Every body first passes wire.Check (valid UTF-8, no byte-order mark,
// well-formed, nesting within wire.DefaultMaxDepth). On such text
// encoding/json reads what the broker's JSON library reads: object keys
// are matched exactly by decoding into maps (never into structs, which
// match case-insensitively), and the last of duplicated keys wins.

// reservedKeySpace is a KV namespace the broker's own facades use, whose
// traffic is consumption rather than storage.
type reservedKeySpace struct {
	ns        string
	keyPrefix string
	ops       []string // closed list of allowed op values
}

var (
	kafkaKeySpace = reservedKeySpace{
		ns:        "queen-kafka",
		keyPrefix: "qk:",
		ops:       []string{"put", "delete", "getMany", "getPrefix"},
	}
	s3KeySpace = reservedKeySpace{
		ns:        "queen-s3",
		keyPrefix: "s3:",
		ops:       []string{"get", "getMany", "getPrefix", "put", "putIfAbsent", "delete"},
	}
)

// KVBatchIsCarveOut reports whether a POST /api/v1/kv body is a non-empty
// batch whose every operation stays inside one reserved key space (the Kafka
// facade's or the S3 sink's). Such a batch is the facade keeping consumer
// state, so the caller reclassifies it as ClassConsume: no kv plan flag, no
// push block, consume-scope authorization.
func KVBatchIsCarveOut(body []byte) bool {
	_, ok := KVCarveOut(body)
	return ok
}

// CarveOutBatch is what the gateway bounds and meters of a carve-out batch.
type CarveOutBatch struct {
	// Ops is the number of operations in the batch.
	Ops int
	// Heaviest is the first operation with the largest value: its index and
	// the length of its value's raw JSON text as sent (0 and 0 when no
	// operation carries a value).
	Heaviest struct{ Index, Bytes int }
}

// KVCarveOut reads a POST /api/v1/kv body as KVBatchIsCarveOut does and,
// when it is a carve-out batch, also reports its size.
func KVCarveOut(body []byte) (CarveOutBatch, bool) {
	var b CarveOutBatch
	if wire.Check(body) != nil {
		return b, false
	}
	ops, ok := batchOps(body)
	if !ok || len(ops) == 0 {
		return b, false
	}
	if !kafkaKeySpace.holdsAll(ops) && !s3KeySpace.holdsAll(ops) {
		return b, false
	}
	b.Ops = len(ops)
	for i, raw := range ops {
		// holdsAll decoded every operation as an object already.
		op, _ := jsonObject(raw)
		if v, present := op["value"]; present && len(v) > b.Heaviest.Bytes {
			b.Heaviest.Index, b.Heaviest.Bytes = i, len(v)
		}
	}
	return b, true
}

// BatchGrows reports whether a POST /api/v1/kv or /api/v1/timers batch may
// add stored data: any operation whose op is not one of get, getPrefix,
// delete or cancel (a missing or non-string op counts as growing). A body
// that is not a batch (a bare array of operations, or an object with an
// "operations" array) grows too: what the broker would do with it is not
// known. Only an empty batch stores nothing for certain.
func BatchGrows(body []byte) bool {
	if wire.Check(body) != nil {
		return true
	}
	ops, ok := batchOps(body)
	if !ok {
		return true
	}
	for _, raw := range ops {
		if opGrows(raw) {
			return true
		}
	}
	return false
}

// CycleGrows reports whether a POST /streams/v1/cycle body may push sink
// messages: a JSON object whose push_items is a non-empty array, or is
// anything but absent, null or an array (limits.ParseCycle refuses those).
// What the items hold does not matter here. A body that is not a JSON
// object pushes nothing; one that is not JSON at all grows.
func CycleGrows(body []byte) bool {
	if wire.Check(body) != nil {
		return true
	}
	obj, ok := jsonObject(body)
	if !ok {
		return false
	}
	raw, present := obj["push_items"]
	if !present || jsonKind(raw) == 'n' {
		return false
	}
	items, ok := jsonArray(raw)
	return !ok || len(items) > 0
}

// batchOps returns the operations of a KV or timers batch: a bare JSON array
// of operations, or an object holding one under "operations".
func batchOps(body []byte) ([]json.RawMessage, bool) {
	switch jsonKind(body) {
	case '[':
		return jsonArray(body)
	case '{':
		obj, ok := jsonObject(body)
		if !ok {
			return nil, false
		}
		return jsonArray(obj["operations"])
	}
	return nil, false
}

// holdsAll reports whether every operation belongs to the key space.
func (ks reservedKeySpace) holdsAll(ops []json.RawMessage) bool {
	for _, raw := range ops {
		if !ks.holds(raw) {
			return false
		}
	}
	return true
}

// holds reports whether one operation is an object naming the key space's
// namespace exactly, an allowed op, and at least one key field, every one
// of which carries the key prefix.
func (ks reservedKeySpace) holds(raw json.RawMessage) bool {
	op, ok := jsonObject(raw)
	if !ok {
		return false
	}
	if ns, ok := jsonString(op["ns"]); !ok || ns != ks.ns {
		return false
	}
	if name, ok := jsonString(op["op"]); !ok || !slices.Contains(ks.ops, name) {
		return false
	}
	return ks.keyFieldsQualify(op)
}

// keyFieldsQualify checks the key, keys and prefix fields: each one present
// must carry the key prefix, and at least one must be present. A field that
// is present with the wrong type (null included) disqualifies the operation.
func (ks reservedKeySpace) keyFieldsQualify(op map[string]json.RawMessage) bool {
	present := 0
	if raw, ok := op["key"]; ok {
		present++
		if !ks.qualifiesString(raw) {
			return false
		}
	}
	if raw, ok := op["prefix"]; ok {
		present++
		if !ks.qualifiesString(raw) {
			return false
		}
	}
	if raw, ok := op["keys"]; ok {
		present++
		if !ks.qualifiesKeys(raw) {
			return false
		}
	}
	return present > 0
}

func (ks reservedKeySpace) qualifiesString(raw json.RawMessage) bool {
	s, ok := jsonString(raw)
	return ok && strings.HasPrefix(s, ks.keyPrefix)
}

// qualifiesKeys requires a non-empty array of strings, all with the prefix.
func (ks reservedKeySpace) qualifiesKeys(raw json.RawMessage) bool {
	keys, ok := jsonArray(raw)
	if !ok || len(keys) == 0 {
		return false
	}
	for _, k := range keys {
		if !ks.qualifiesString(k) {
			return false
		}
	}
	return true
}

// opGrows reports whether one batch operation may add stored data. Anything
// but an object whose op is in the closed non-growing set counts as growing.
func opGrows(raw json.RawMessage) bool {
	op, ok := jsonObject(raw)
	if !ok {
		return true
	}
	name, ok := jsonString(op["op"])
	if !ok {
		return true
	}
	switch name {
	case "get", "getPrefix", "delete", "cancel":
		return false
	}
	return true
}

// jsonKind returns the first byte of a JSON value after any leading
// whitespace, or 0 when there is none. It tells the value's type without
// decoding it; json.Unmarshal would accept null into a map, slice or string
// without complaint.
func jsonKind(raw []byte) byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// jsonObject decodes raw when it is exactly one JSON object.
func jsonObject(raw []byte) (map[string]json.RawMessage, bool) {
	if jsonKind(raw) != '{' {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, false
	}
	return obj, true
}

// jsonArray decodes raw when it is exactly one JSON array.
func jsonArray(raw []byte) ([]json.RawMessage, bool) {
	if jsonKind(raw) != '[' {
		return nil, false
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil {
		return nil, false
	}
	return arr, true
}

// jsonString decodes raw when it is exactly one JSON string.
func jsonString(raw []byte) (string, bool) {
	if jsonKind(raw) != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
