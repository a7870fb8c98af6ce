package limits

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

// The broker (0.15.1) stores what it is given in columns whose types and
// lengths its schema fixes (lib/schema/schema.sql; push_messages_v3 in
// procedures/001_push.sql casts each item's fields into them). A value a
// column cannot hold does not fail the request: the insert fails, the
// broker keeps the whole batch in its failover buffer and retries it
// forever, and the messages batched with it are lost. So the gateway
// refuses, before the cell, every value a push item carries that its column
// would refuse. docs/enforcement.md lists each rule with its column.

// MaxNameChars is the length, in characters, of the broker's varchar(255)
// columns: queues.name (an item's queue), partitions.name (its partition)
// and messages.transaction_id (its transactionId), the ID length cap.
// PostgreSQL counts characters (code points), not bytes.
const MaxNameChars = 255

// nameTooLong reports whether the decoded name s is longer than
// MaxNameChars characters; a name of at most MaxNameChars bytes never is,
// so only long names are counted.
func nameTooLong(s []byte) bool {
	return len(s) > MaxNameChars && utf8.RuneCount(s) > MaxNameChars
}

// rawStringTooLong is nameTooLong for the raw JSON string v (quotes and
// escapes intact), counted without decoding it.
func rawStringTooLong(v []byte) bool {
	return len(v)-2 > MaxNameChars && wire.StringChars(v) > MaxNameChars
}

// tooLongRefusal is the refusal of a name over MaxNameChars characters.
func tooLongRefusal(ref itemRef, field string) *BodyError {
	return &BodyError{ref.String() + ": " + field + " is longer than " + strconv.Itoa(MaxNameChars) +
		" characters, more than the broker can store"}
}

// traceIDStorable reports whether the raw value v of an item's traceId is
// one the broker stores: absent, null or "" (no trace id), or a string
// PostgreSQL reads as a uuid (messages.trace_id is UUID; the procedure
// casts the text of traceId, an empty one made NULL, to uuid). Any other
// JSON value is cast from its text and fails.
func traceIDStorable(v []byte) bool {
	if v == nil || isNull(v) {
		return true
	}
	if v[0] != '"' {
		return false
	}
	s := v[1 : len(v)-1]
	if wire.CanonicalUUID(s) {
		return true // the form every SDK sends, read in one look
	}
	if len(s) > len(`"{01234567-89ab-cdef-0123-456789abcdef}"`)*6 {
		return false // longer than any escaped form of a uuid
	}
	if bytes.IndexByte(s, '\\') >= 0 {
		// A uuid written with escapes: decode it into buf, which holds
		// any text this short (unescaping never lengthens), so nothing is
		// allocated.
		var buf [len(`"{01234567-89ab-cdef-0123-456789abcdef}"`) * 6]byte
		d, ok := wire.Unquote(s, buf[:0])
		if !ok {
			return false
		}
		s = d
	}
	return len(s) == 0 || uuidText(s)
}

// uuidText reports whether s is text PostgreSQL's uuid input accepts: 32
// hex digits, optionally in braces, with an optional hyphen after any
// group of four digits but the last (so the usual 8-4-4-4-12 form, upper
// or lower case, and the compact form without hyphens).
func uuidText(s []byte) bool {
	if len(s) > 0 && s[0] == '{' {
		if s[len(s)-1] != '}' {
			return false
		}
		s = s[1 : len(s)-1]
	}
	digits := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			// After a group of four digits, not first, not last, not doubled.
			if digits == 0 || digits%4 != 0 || digits == 32 || s[i-1] == '-' {
				return false
			}
			continue
		}
		if wire.HexDigit[s[i]] > 0xF {
			return false
		}
		digits++
	}
	return digits == 32
}

// AckNamesError refuses a POST /api/v1/ack or /api/v1/ack/batch body whose
// top-level consumerGroup is a string longer than MaxNameChars characters
// (messages_consumed.consumer_group is varchar(255)). An ack that could
// not hold one (too short, or not naming consumerGroup) is not walked, so
// the common ack costs two searches of a small body; a body that is not
// JSON is left to the broker, which refuses it (and one holding U+0000 to
// StoredTextError).
func AckNamesError(body []byte) error {
	if len(body) <= MaxNameChars || !bytes.Contains(body, []byte("consumerGroup")) || wire.CheckStored(body) != nil {
		return nil
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return nil
	}
	var v [1][]byte
	wire.MemberValues(body, i, []string{"consumerGroup"}, v[:])
	if g := v[0]; len(g) > 0 && g[0] == '"' && rawStringTooLong(g) {
		return &BodyError{"consumerGroup is longer than " + strconv.Itoa(MaxNameChars) +
			" characters, more than the broker can store"}
	}
	return nil
}
