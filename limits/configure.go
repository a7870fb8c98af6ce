package limits

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/queengate/queengate/wire"
)

// retentionKeys are the /configure options the retention ceiling applies to,
// in the order they are checked.
var retentionKeys = [...]string{"retentionSeconds", "completedRetentionSeconds"}

// The refusals of configure and replay bodies whose shape the broker
// refuses too, or would act on in a way the gateway cannot know.
var (
	ErrConfigureShape = &BodyError{"queue is required: the body must be a JSON object with a string queue"}
	ErrReplayShape    = &BodyError{"a replay destination must be a JSON object whose queue and partition are strings"}
)

// configureMembers are the top-level members of a configure body read: the
// queue, the options, the other two names the broker stores, and the
// retention keys for a body whose options are the top-level object.
var configureMembers = [...]string{"queue", "options", "namespace", "task", retentionKeys[0], retentionKeys[1]}

// CheckConfigure reads a POST /api/v1/configure body and applies the plan's
// retention ceiling (max_retention_seconds), in one walk of its top level
// after wire.CheckStored.
//
// The body is an object with a string "queue" (the empty string included);
// its options are the "options" object, or the top-level object when
// "options" is absent or not an object. err is the check's
// *wire.SyntaxError, ErrConfigureShape when the body is not such an object
// (the broker answers "queue is required"), or a *BodyError when queue,
// namespace or task is longer than MaxNameChars characters: they land in
// varchar(255) columns, and the broker answers such a body with its
// database's error after trying the insert.
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
func CheckConfigure(body []byte, lim Effective) (queue, refusal string, err error) {
	if err := wire.CheckStored(body); err != nil {
		return "", "", err
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return "", "", ErrConfigureShape
	}
	var v [len(configureMembers)][]byte
	wire.MemberValues(body, i, configureMembers[:], v[:])
	var names nameBuf
	q, isString := names.text(0, v[0])
	if !isString {
		return "", "", ErrConfigureShape
	}
	queue = string(q)
	for _, k := range [...]int{0, 2, 3} { // queue, namespace, task
		if raw := v[k]; len(raw) > 0 && raw[0] == '"' && rawStringTooLong(raw) {
			return "", "", &BodyError{configureMembers[k] + " is longer than " + strconv.Itoa(MaxNameChars) +
				" characters, more than the broker can store"}
		}
	}
	ceiling := lim.MaxRetentionSeconds
	if ceiling.IsUnlimited() {
		return queue, "", nil
	}
	values := [len(retentionKeys)][]byte{v[4], v[5]}
	if options := v[1]; len(options) > 0 && options[0] == '{' {
		values = [len(retentionKeys)][]byte{}
		wire.MemberValues(options, 0, retentionKeys[:], values[:])
	}
	for k, name := range retentionKeys {
		if shown, over := overCeiling(values[k], int64(ceiling)); over {
			return queue, name + " of " + shown + "s exceeds the plan's max_retention_seconds (" +
				strconv.FormatInt(int64(ceiling), 10) + "s)", nil
		}
	}
	return queue, "", nil
}

// overCeiling reports whether the raw retention value v is a positive number
// of seconds above ceiling, and the number as the refusal shows it.
func overCeiling(v []byte, ceiling int64) (shown string, over bool) {
	if len(v) == 0 {
		return "", false
	}
	text := string(v)
	if v[0] == '"' {
		s, ok := wire.Unquote(v[1:len(v)-1], nil)
		if !ok {
			return "", false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(s)), 10, 64)
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
// err is wire.CheckStored's *wire.SyntaxError, or ErrReplayShape when the
// body is not such an object: the caller refuses it rather than guess
// where the broker would put the message. When both are named, queue and
// partition are the pair to admit. When only one is named, refusal is the
// 400 invalid_request message (which honours shadow mode). When neither
// is, there is nothing to admit. The caller forwards the body as received,
// untrimmed.
func ParseReplayDestination(body []byte) (queue, partition, refusal string, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", "", "", nil
	}
	if err := wire.CheckStored(body); err != nil {
		return "", "", "", err
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return "", "", "", ErrReplayShape
	}
	var v [2][]byte
	wire.MemberValues(body, i, []string{"queue", "partition"}, v[:])
	var names nameBuf
	q, qok := optionalName(&names, 0, v[0])
	p, pok := optionalName(&names, 1, v[1])
	if !qok || !pok {
		return "", "", "", ErrReplayShape
	}
	switch {
	case q != "" && p != "":
		return q, p, "", nil
	case q != "":
		return "", "", replayHalfDestination("partition"), nil
	case p != "":
		return "", "", replayHalfDestination("queue"), nil
	}
	return "", "", "", nil
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
