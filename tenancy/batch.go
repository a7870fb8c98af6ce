package tenancy

import (
	"bytes"
	"slices"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/wire"
)

// A KV or timers batch is read once (limits.ReadOperations, which also
// sizes its operations for the plan's caps), and what the gateway decides
// from its operations is decided here, in the same walk: whether it stays
// inside a reserved key space (a carve-out) and whether it may add stored
// data (a push block refuses it then). Both fail closed: a body that is not
// a batch the gateway reads exactly as the broker does never earns a
// carve-out, and counts as growing. Member names match exactly once
// unescaped (never case-insensitively), and the last of a repeated member
// wins, as at the broker.

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

// CarveOutBatch is what the gateway bounds and meters of a carve-out batch.
type CarveOutBatch struct {
	// Ops is the number of operations in the batch.
	Ops int
	// Heaviest is the first operation with the largest value: its index and
	// the length of its value's raw JSON text as sent (0 and 0 when no
	// operation carries a value).
	Heaviest struct{ Index, Bytes int }
}

// Batch is a body that may or may not add stored data, as the gateway
// decides on it: a POST /api/v1/kv or /api/v1/timers batch (ReadBatch), or
// a streams cycle (limits.ReadCycle fills Items, Grows and Err; a cycle
// has no carve-out).
type Batch struct {
	// Items is the operations as items for the plan's size caps
	// (limits.ReadOperations); empty when Err is set.
	Items limits.ProduceBatch
	// Err is why the body is refused with 400: its text, its shape, or
	// U+0000 in it; nil for a batch the broker reads and stores as the
	// gateway does.
	Err error
	// Grows reports whether the batch may add stored data: any operation
	// whose op is not get, getPrefix, delete or cancel (a missing or
	// non-string op grows). A body that is not a batch grows too: what
	// the broker would do with it is not known. Only an empty batch stores
	// nothing for certain.
	Grows bool
	// CarveOut is set (Ops > 0) when every operation of the batch stays
	// inside one reserved key space (the Kafka facade's or the S3 sink's).
	// On /api/v1/kv, the only route the caller asks it of, that is the
	// facade keeping consumer state, which the caller reclassifies as
	// ClassConsume (no kv plan flag, no push block, consume-scope
	// authorization) and bounds on its own.
	CarveOut CarveOutBatch
}

// ReadBatch reads a KV or timers batch once, for every decision on it.
func ReadBatch(body []byte) Batch {
	var v opValues
	var carve CarveOutBatch
	kafka, s3, grows := true, true, false
	items, isBatch, err := limits.ReadOperations(body, opNames, v[:], func() {
		kafka = kafka && kafkaKeySpace.holds(&v)
		s3 = s3 && s3KeySpace.holds(&v)
		grows = grows || opGrows(&v)
		if val := v[opValue]; val != nil && len(val) > carve.Heaviest.Bytes {
			carve.Heaviest.Index, carve.Heaviest.Bytes = carve.Ops, len(val)
		}
		carve.Ops++
	})
	b := Batch{Items: items, Err: err, Grows: !isBatch || grows}
	if isBatch && (kafka || s3) {
		b.CarveOut = carve
	}
	return b
}

// The members of an operation ReadBatch reads.
const (
	opNS = iota
	opOp
	opKey
	opPrefix
	opKeys
	opValue
	opMembers
)

var opNames = []string{opNS: "ns", opOp: "op", opKey: "key", opPrefix: "prefix", opKeys: "keys", opValue: "value"}

// opValues is the raw values of an operation's members (nil: absent, or
// the operation is not an object).
type opValues [opMembers][]byte

// stringIs reports whether the raw value v is a string whose text is s.
func stringIs(v []byte, s string) bool {
	return len(v) >= 2 && v[0] == '"' && wire.UnescapedIs(v[1:len(v)-1], s)
}

// holds reports whether one operation is an object naming the key space's
// namespace exactly, an allowed op, and at least one key field, every one
// of which carries the key prefix.
func (ks reservedKeySpace) holds(v *opValues) bool {
	if !stringIs(v[opNS], ks.ns) {
		return false
	}
	if !slices.ContainsFunc(ks.ops, func(op string) bool { return stringIs(v[opOp], op) }) {
		return false
	}
	return ks.keyFieldsQualify(v)
}

// keyFieldsQualify checks the key, keys and prefix fields: each one present
// must carry the key prefix, and at least one must be present. A field that
// is present with the wrong type (null included) disqualifies the operation.
func (ks reservedKeySpace) keyFieldsQualify(v *opValues) bool {
	present := 0
	for _, f := range [...]int{opKey, opPrefix} {
		if raw := v[f]; raw != nil {
			present++
			if !ks.qualifiesString(raw) {
				return false
			}
		}
	}
	if raw := v[opKeys]; raw != nil {
		present++
		if !ks.qualifiesKeys(raw) {
			return false
		}
	}
	return present > 0
}

// qualifiesString requires a string whose text starts with the key prefix.
func (ks reservedKeySpace) qualifiesString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	var buf [64]byte
	text, ok := wire.Unquote(raw[1:len(raw)-1], buf[:0])
	return ok && bytes.HasPrefix(text, []byte(ks.keyPrefix))
}

// qualifiesKeys requires a non-empty array of strings, all with the prefix.
func (ks reservedKeySpace) qualifiesKeys(raw []byte) bool {
	if raw[0] != '[' {
		return false
	}
	n, all := 0, true
	wire.Elements(raw, 0, func(i int) int {
		n++
		end := wire.ValueEnd(raw, i)
		all = all && ks.qualifiesString(raw[i:end])
		return end
	})
	return n > 0 && all
}

// opGrows reports whether one batch operation may add stored data. Anything
// but an object whose op is in the closed non-growing set counts as growing.
func opGrows(v *opValues) bool {
	for _, op := range [...]string{"get", "getPrefix", "delete", "cancel"} {
		if stringIs(v[opOp], op) {
			return false
		}
	}
	return true
}
