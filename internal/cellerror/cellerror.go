// Package cellerror recognises broker answers that expose the cell's
// internals: PostgreSQL error text (the broker passes its database's
// errors through verbatim, often with HTTP 200), PL/pgSQL function names,
// SQL statements, C++ exception and stack-trace text, database connection
// details. The gateway relays such an answer with its status but replaces
// its body with its own error envelope.
//
// The test is deliberately narrow, so that no normal answer is ever
// replaced: only the top-level "error" field of a JSON object is read
// (never message payloads, never per-item errors inside arrays), and only
// text with the marks of database or runtime internals counts. The
// broker's own validation messages ("queue is required", "Invalid JSON:
// [json.exception.parse_error.101] ...", "Message not found") are kept:
// they tell the client what was wrong.
package cellerror

import (
	"bytes"
	"encoding/json"
	"strings"
)

// InternalDetail reports whether body is an error answer whose error text
// exposes internals, and returns that text (for the gateway's log).
func InternalDetail(body []byte) (detail string, exposes bool) {
	if !bytes.Contains(body, []byte(`"error"`)) {
		return "", false // the common case: no error field at all, no parse
	}
	var top struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &top); err != nil || len(top.Error) == 0 {
		return "", false
	}
	msg := string(top.Error)
	if top.Error[0] == '"' {
		if err := json.Unmarshal(top.Error, &msg); err != nil {
			return "", false
		}
	}
	return msg, LooksInternal(msg)
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
	"connection to server", // libpq: connection to server at "10.0.0.5", port 5432 failed
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
