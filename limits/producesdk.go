package limits

import "github.com/queengate/queengate/internal/jsonscan"

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
	const queue, partition, payload, txn, trace = `{"queue":`, `,"partition":`, `,"payload":`, `,"transactionId":`, `,"traceId":`
	if !textAt(body, i, queue) {
		return -1
	}
	at := i + len(queue)
	end := quotedShortPlain(body, at)
	if end == 0 || !textAt(body, end, partition) {
		return -1
	}
	q := body[at:end]
	at = end + len(partition)
	if end = quotedShortPlain(body, at); end == 0 || !textAt(body, end, payload) {
		return -1
	}
	p := body[at:end]
	at = end + len(payload)
	if end = jsonscan.SkipValid(body, at, depth, true); end < 0 || !textAt(body, end, txn) {
		return -1
	}
	y := body[at:end]
	at = end + len(txn)
	if !jsonscan.PlainString36(body, at) {
		return -1
	}
	t := body[at : at+quotedUUIDLen]
	end = at + quotedUUIDLen
	var u []byte
	bits := plainQueue | plainPartition
	if textAt(body, end, trace) {
		at = end + len(trace)
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

// textAt reports whether body holds s at i.
func textAt(body []byte, i int, s string) bool {
	return len(body)-i >= len(s) && string(body[i:i+len(s)]) == s
}
