// Package cellerror recognises broker answers that expose the cell's
// internals: PostgreSQL error text (the broker passes its database's
// errors through verbatim, often with HTTP 200), PL/pgSQL function names,
// SQL statements, C++ exception and stack-trace text, database connection
// details. The gateway relays such an answer with its status but replaces
// its body with its own error envelope.
//
// The test is deliberately narrow, so that no normal answer is ever
// replaced: only the top-level "error" member of a JSON object is read, by
// package wire's grammar and its rules of answers (the name exactly, the
// last of a repeated one), never message payloads or per-item errors
// inside arrays; and only text with the marks of database or runtime
// internals counts. The broker's own validation messages ("queue is required", "Invalid JSON:
// [json.exception.parse_error.101] ...", "Message not found") are kept:
// they tell the client what was wrong.
package cellerror

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/queengate/queengate/wire"
)

// InternalDetail reports whether body is an error answer whose error text
// exposes internals, and returns that text (for the gateway's log).
func InternalDetail(body []byte) (detail string, exposes bool) {
	escaped := bytes.Contains(body, []byte(`\u`)) // could spell "error" or a mark otherwise
	// The common case: no error field at all, so no parse. (`or"` is
	// implied by `"error"` and several times cheaper to look for in JSON,
	// where quotes are everywhere and an o is rare.)
	if !escaped && !bytes.Contains(body, []byte(`or"`)) {
		return "", false
	}
	if !escaped && !mayLookInternal(body) {
		return "", false // an error field, but no mark of internals anywhere
	}
	// Read by the broker's grammar, as every answer is: the broker writes
	// its answers in it, and text it refuses carries nothing a client sent
	// (the gateway refuses such bodies before the cell).
	var v [1][]byte
	if !wire.TopMembers(body, []string{"error"}, v[:]) || len(v[0]) == 0 {
		return "", false
	}
	raw := v[0]
	msg := string(raw)
	if raw[0] == '"' {
		text, ok := wire.StringValue(raw)
		if !ok {
			return "", false
		}
		msg = text
	}
	return msg, LooksInternal(msg)
}

// CannotExpose reports whether an answer that begins with head can never
// be judged exposing, whatever follows: its first byte past JSON
// whitespace is there and opens no object (a push's answer is an array).
// Only an object's top-level error field is read, so such an answer can
// be relayed as it comes instead of held until it is whole.
func CannotExpose(head []byte) bool {
	for _, c := range head {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c != '{'
	}
	return false
}

// severities are the prefixes libpq gives a server error ("ERROR:  ...").
var severities = []string{"ERROR:", "FATAL:", "PANIC:"}

// markers are text that only database or runtime internals produce.
var markers = []string{
	"ERROR:  ",      // libpq's severity, two spaces, anywhere (wrapped errors)
	"PL/pgSQL",      // CONTEXT: PL/pgSQL function queen.ack_messages_v2(jsonb) line 14
	"SQL statement", // CONTEXT: SQL statement "WITH message_data AS ..."
	"SQLSTATE",
	"CONTEXT:",
	"unnamed portal",
	"connection to server", // libpq: connection to server at "192.0.2.5", port 5432 failed
	"could not connect to server",
	"server closed the connection",
	"terminate called", // C++ runtime
	"std::",            // C++ exception types (std::bad_alloc, std::out_of_range)
	".cpp:",            // source locations
	".hpp:",
	"Traceback (most recent call last)",
	"\n\tat ", // stack frames
	"\n    at ",
}

// sqlShapes are SQL statement fragments as PostgreSQL echoes them; each
// needs all of its parts.
var sqlShapes = [][]string{
	{"SELECT ", " FROM "},
	{"WITH ", " AS ("},
	{"INSERT INTO "},
	{"DELETE FROM "},
	{"UPDATE ", " SET "},
}

// rawMarks are every string LooksInternal looks for, as they appear inside
// a JSON string: a text that looks internal has one of them in its encoded
// form, wherever in the body that text is.
var rawMarks = func() [][]byte {
	var all []string
	all = append(all, severities...)
	all = append(all, markers...)
	for _, shape := range sqlShapes {
		all = append(all, shape[0])
	}
	out := make([][]byte, 0, len(all))
	for _, m := range all {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			panic(err) // a constant string always encodes
		}
		out = append(out, bytes.Trim(bytes.TrimSpace(b.Bytes()), `"`))
	}
	return out
}()

// mayLookInternal is a cheap test that lets most error answers ("lease_held",
// "no_available_partition") through without a parse: false only when no
// mark of internals can be in body. The escaped solidus, which could spell
// a mark another way (PL\/pgSQL), makes it answer true (InternalDetail
// does not ask it at all for a body with \u escapes), so such a body is
// parsed and judged on its decoded text.
func mayLookInternal(body []byte) bool {
	if bytes.Contains(body, []byte(`\/`)) {
		return true
	}
	for _, m := range rawMarks {
		if bytes.Contains(body, m) {
			return true
		}
	}
	return false
}

// LooksInternal reports whether an error text carries the marks of
// database or runtime internals.
func LooksInternal(msg string) bool {
	head := strings.TrimLeft(msg, " \t\r\n")
	for _, s := range severities {
		if strings.HasPrefix(head, s) {
			return true
		}
	}
	for _, m := range markers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	for _, shape := range sqlShapes {
		all := true
		for _, part := range shape {
			if !strings.Contains(msg, part) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
