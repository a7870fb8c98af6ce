package limits

import (
	"encoding/binary"

	"github.com/queengate/queengate/wire"
)

// sdkItem reads the push item at body[i] when it is written exactly as the
// SDKs write one,
//
//	{"queue":Q,"partition":P,"payload":V,"transactionId":T,"traceId":U}
//
// (the traceId may be absent), with Q and P short strings that need no
// look (shortPlainString), T 36 such bytes, U a canonical uuid and V any
// value, whose members are at depth. It sets v and plain as fastFields
// would and returns the index just past the item; for any other text it
// returns -1, having read nothing that counts, and fastFields reads the
// item. It is fastFields without the member loop: the names in the order
// the SDKs send them, each compared in one look.
func sdkItem(body []byte, i, depth int, v *pushFields, plain *uint8) int {
	queue, partition, payload, txn, trace := &sdkQueue, &sdkPartition, &sdkPayload, &sdkTxn, &sdkTrace
	if !textAt(body, i, queue) {
		return -1
	}
	at := i + queue.n
	end := quotedShortPlain(body, at)
	if end == 0 || !textAt(body, end, partition) {
		return -1
	}
	q := body[at:end]
	at = end + partition.n
	if end = quotedShortPlain(body, at); end == 0 || !textAt(body, end, payload) {
		return -1
	}
	p := body[at:end]
	at = end + payload.n
	if end = wire.SkipValid(body, at, depth, true); end < 0 || byteAt(body, end) != ',' || !textAt(body, end+1, txn) {
		return -1
	}
	y := body[at:end]
	at = end + 1 + txn.n
	if !wire.PlainString36(body, at) {
		return -1
	}
	t := body[at : at+quotedUUIDLen]
	end = at + quotedUUIDLen
	var u []byte
	bits := plainQueue | plainPartition
	if textAt(body, end, trace) {
		at = end + trace.n
		if byteAt(body, at) != '"' || !quotedCanonicalUUID(body, at) {
			return -1
		}
		u = body[at : at+quotedUUIDLen]
		end = at + quotedUUIDLen
		bits |= canonicalTrace
	}
	if byteAt(body, end) != '}' {
		return -1
	}
	v[0], v[1], v[2], v[3], v[4] = q, p, t, y, u
	*plain = bits
	return end + 1
}

// quotedShortPlain is shortPlainString for a value that may not be a
// string: 0 unless body[at] is the opening quote of one it takes.
func quotedShortPlain(body []byte, at int) int {
	if byteAt(body, at) != '"' {
		return 0
	}
	return shortPlainString(body, at)
}

// literal is a text of 8 to 16 bytes sdkItem looks for, as its first
// and its last eight bytes (they overlap when it is shorter than 16): two
// word comparisons instead of a call to compare the bytes.
type literal struct {
	first, last uint64
	n           int
}

func newLiteral(s string) literal {
	if len(s) < 8 || len(s) > 16 {
		panic("limits: a literal is 8 to 16 bytes")
	}
	le := binary.LittleEndian
	return literal{first: le.Uint64([]byte(s[:8])), last: le.Uint64([]byte(s[len(s)-8:])), n: len(s)}
}

// The member names of a push item as the SDKs write them, with the
// punctuation around them (`,"transactionId":` is 17 bytes: its opening
// comma is left to the caller).
var (
	sdkQueue     = newLiteral(`{"queue":`)
	sdkPartition = newLiteral(`,"partition":`)
	sdkPayload   = newLiteral(`,"payload":`)
	sdkTxn       = newLiteral(`"transactionId":`)
	sdkTrace     = newLiteral(`,"traceId":`)
)

// textAt reports whether body holds s at i.
func textAt(body []byte, i int, s *literal) bool {
	if len(body)-i < s.n {
		return false
	}
	le := binary.LittleEndian
	return le.Uint64(body[i:i+8]) == s.first && le.Uint64(body[i+s.n-8:i+s.n]) == s.last
}
