package fakebroker

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// obj is a JSON object under construction. encoding/json writes map keys in
// sorted order, as the recorded broker (nlohmann::json) does.
type obj = map[string]any

// notFoundBody is the uWebSockets 404 page, sent without a content type.
const notFoundBody = "<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>"

// reqCtx carries one request through its handler.
type reqCtx struct {
	w      http.ResponseWriter
	r      *http.Request
	body   []byte
	params map[string]string
	tenant string
	query  url.Values
	// producerSub is the verified JWT sub stamped on pushed messages.
	producerSub string
	// rust: the broker follows TenancyRust for this request.
	rust bool
}

func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"error":"fakebroker: cannot encode response"}`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// writeJSON answers with status and v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data := encodeJSON(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// writeEmptyJSON answers 200 with a JSON content type and a 0-byte body, as
// the broker does for some queries that found no rows.
func writeEmptyJSON(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

func writeNotFound(w http.ResponseWriter) {
	w.Header()["Content-Type"] = nil
	w.Header().Set("Content-Length", strconv.Itoa(len(notFoundBody)))
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(notFoundBody))
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, obj{"error": msg})
}

// ok answers v: with 200, or under TenancyRust with the status a Rust
// broker gives it (rustStatus).
func (rc *reqCtx) ok(v any) {
	status := http.StatusOK
	if rc.rust {
		status = rustStatus(v)
	}
	writeJSON(rc.w, status, v)
}

// object parses the body as a JSON object the way the broker's synchronous
// validation does: an empty body and invalid JSON are answered with 400 here
// (and ok=false). A valid body that is not an object gives an empty map.
func (rc *reqCtx) object() (map[string]json.RawMessage, bool) {
	trimmed := bytes.TrimSpace(rc.body)
	if len(trimmed) == 0 {
		badRequest(rc.w, "Empty request body")
		return nil, false
	}
	var probe any
	if err := json.Unmarshal(trimmed, &probe); err != nil {
		badRequest(rc.w, "Invalid JSON: [json.exception.parse_error.101] parse error: "+err.Error())
		return nil, false
	}
	m := map[string]json.RawMessage{}
	if trimmed[0] == '{' {
		_ = json.Unmarshal(trimmed, &m)
	}
	return m, true
}

// lenientObject parses the body as a JSON object, treating an empty or
// invalid body as {}; for routes that accept no body.
func (rc *reqCtx) lenientObject() map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(rc.body, &m)
	return m
}

// JSON field helpers. A missing field is a nil RawMessage.

func kindOf(raw json.RawMessage) byte {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return 0
	}
	switch s[0] {
	case '"':
		return 's'
	case '{':
		return 'o'
	case '[':
		return 'a'
	case 'n':
		return 'n'
	case 't', 'f':
		return 'b'
	default:
		return 'd'
	}
}

// absent reports whether a field is missing or null.
func absent(raw json.RawMessage) bool {
	k := kindOf(raw)
	return k == 0 || k == 'n'
}

func asString(raw json.RawMessage) (string, bool) {
	if kindOf(raw) != 's' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func asStringOr(raw json.RawMessage, def string) string {
	if s, ok := asString(raw); ok {
		return s
	}
	return def
}

func asInt(raw json.RawMessage, def int) int {
	switch kindOf(raw) {
	case 'd':
		var f float64
		if json.Unmarshal(raw, &f) == nil {
			return int(f)
		}
	case 's':
		s, _ := asString(raw)
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return n
		}
	}
	return def
}

func asBool(raw json.RawMessage, def bool) bool {
	var v bool
	if kindOf(raw) == 'b' && json.Unmarshal(raw, &v) == nil {
		return v
	}
	return def
}

func asArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if kindOf(raw) != 'a' {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false
	}
	if items == nil {
		items = []json.RawMessage{}
	}
	return items, true
}

func asObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if kindOf(raw) != 'o' {
		return nil, false
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false
	}
	return m, true
}

// compactJSON returns raw compacted, or JSON null for a missing value.
func compactJSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return json.RawMessage("null")
	}
	return json.RawMessage(buf.Bytes())
}

// queryInt reads an integer query parameter with a default.
func (rc *reqCtx) queryInt(name string, def int) int {
	v := rc.query.Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return n
}

// pgUUIDError is the PostgreSQL error the broker passes through when a
// partition id is not a UUID.
func pgUUIDError(value, context string) obj {
	return obj{
		"error":   "ERROR:  invalid input syntax for type uuid: \"" + value + "\"\nCONTEXT:  " + context + "\n",
		"success": false,
	}
}

// emptyList returns a non-nil empty JSON array.
func emptyList() []any { return []any{} }
