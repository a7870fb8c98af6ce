package limits

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/queengate/queengate/wire"
)

// retentionKeys are the /configure options the retention ceiling applies to,
// in the order they are checked.
var retentionKeys = [...]string{"retentionSeconds", "completedRetentionSeconds"}

// CheckConfigure reads a POST /api/v1/configure body and applies the plan's
// retention ceiling (max_retention_seconds).
//
// The body is an object with a string "queue" (the empty string included);
// its options are the "options" object, or the top-level object when
// "options" is absent or not an object. ok is false when the body is not
// such an object; the caller refuses it, as the broker does ("queue is
// required", fixtures C10 and C11).
//
// The ceiling applies to retentionSeconds and completedRetentionSeconds,
// each a JSON number or a string holding an integer; only positive values
// count (0 and negative values mean "disabled" or "unchanged", and clients
// send 0 by default). A number with a fraction counts by its integer part,
// since that is what the broker keeps. When the ceiling is set and a value
// is over it, refusal is the 403 quota_exceeded message naming the first
// such key; the gateway refuses and never rewrites the body. A refusal
// honours shadow mode (the caller logs it and forwards); when there is none
// the caller admits (queue, "Default"), the partition /configure creates.
func CheckConfigure(body []byte, lim Effective) (queue string, refusal string, ok bool) {
	var top objectText
	if !decodeWhole(body, &top) || !top.isObject() {
		return "", "", false
	}
	var queueV, options []byte
	hasQueue := false
	for it := wire.Object(top.raw); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case wire.UnescapedIs(k, "queue"):
			queueV, hasQueue = v, true
		case wire.UnescapedIs(k, "options"):
			options = v
		}
	}
	var names nameBuf
	q, isString := names.text(0, queueV)
	if !hasQueue || !isString {
		return "", "", false
	}
	queue = string(q)
	bag := top.raw
	if len(options) > 0 && options[0] == '{' {
		bag = options
	}
	ceiling := lim.MaxRetentionSeconds
	if ceiling.IsUnlimited() {
		return queue, "", true
	}
	var values [len(retentionKeys)][]byte
	for it := wire.Object(bag); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		for i, name := range retentionKeys {
			if wire.UnescapedIs(k, name) {
				values[i] = v
			}
		}
	}
	for i, name := range retentionKeys {
		if shown, over := overCeiling(values[i], int64(ceiling)); over {
			return queue, name + " of " + shown + "s exceeds the plan's max_retention_seconds (" +
				strconv.FormatInt(int64(ceiling), 10) + "s)", true
		}
	}
	return queue, "", true
}

// overCeiling reports whether the raw retention value v is a positive number
// of seconds above ceiling, and the number as the refusal shows it.
func overCeiling(v []byte, ceiling int64) (shown string, over bool) {
	if len(v) == 0 {
		return "", false
	}
	text := string(v)
	if v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n <= 0 || n <= ceiling {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	}
	if c := v[0]; c != '-' && (c < '0' || c > '9') {
		return "", false // true, false, null, an object or an array
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		return text, n > 0 && n > ceiling
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !isRangeErr(err) {
		return "", false
	}
	f = math.Trunc(f)
	switch {
	case f < 1:
		return "", false
	case f >= math.MaxInt64:
		return text, true // beyond any ceiling
	}
	n := int64(f)
	return strconv.FormatInt(n, 10), n > ceiling
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// ParseReplayDestination reads the body of POST /api/v1/dlq/{id}/replay,
// which may name where the message goes: {"queue"?: string, "partition"?:
// string}. Values are trimmed, and a blank or null value counts as absent.
// An empty or all-whitespace body names nothing.
//
// ok is false when the body is not such an object; the caller refuses it
// rather than guess where the broker would put the message. When both are
// named, queue and partition
// are the pair to admit. When only one is named, refusal is the 400
// invalid_request message (which honours shadow mode). When neither is,
// there is nothing to admit. The caller forwards the body as received,
// untrimmed.
func ParseReplayDestination(body []byte) (queue, partition string, refusal string, ok bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", "", "", true
	}
	var top objectText
	if !decodeWhole(body, &top) || !top.isObject() {
		return "", "", "", false
	}
	var qv, pv []byte
	for it := wire.Object(top.raw); ; {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch {
		case wire.UnescapedIs(k, "queue"):
			qv = v
		case wire.UnescapedIs(k, "partition"):
			pv = v
		}
	}
	var names nameBuf
	q, qok := optionalName(&names, 0, qv)
	p, pok := optionalName(&names, 1, pv)
	if !qok || !pok {
		return "", "", "", false
	}
	switch {
	case q != "" && p != "":
		return q, p, "", true
	case q != "":
		return "", "", replayHalfDestination("partition"), true
	case p != "":
		return "", "", replayHalfDestination("queue"), true
	}
	return "", "", "", true
}

func replayHalfDestination(missing string) string {
	return missing + " override missing: a replay destination must name both `queue` and `partition`, " +
		"or neither to replay to the message's original queue and partition"
}

// optionalName reads an optional string field: absent or null is "", a
// string is trimmed; ok is false for any other value.
func optionalName(names *nameBuf, slot int, v []byte) (string, bool) {
	if v == nil || string(v) == "null" {
		return "", true
	}
	t, isString := names.text(slot, v)
	if !isString {
		return "", false
	}
	return strings.TrimSpace(string(t)), true
}

// objectText is a JSON value's raw text, kept by a json.Unmarshaler for
// small bodies read whole.
type objectText struct{ raw []byte }

func (o *objectText) UnmarshalJSON(b []byte) error {
	o.raw = append(o.raw[:0], b...)
	return nil
}

func (o *objectText) isObject() bool { return len(o.raw) > 0 && o.raw[0] == '{' }

// decodeWhole decodes body (after a UTF-8 byte-order mark) as exactly one
// JSON value into v.
func decodeWhole(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))))
	if dec.Decode(v) != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}
