package caddymodule

import (
	"encoding/json"
	"testing"
)

// TestBodiesReadOrRefused: an item without a payload, invalid UTF-8 and a
// leading byte-order mark, at the handler, on every kind of body: what the gateway cannot read exactly as
// the broker would is refused with 400 and never reaches the cell.
func TestBodiesReadOrRefused(t *testing.T) {
	env := newTestEnv(t)
	withFullProKey(env)
	g := env.g
	const bom = "\xef\xbb\xbf"
	held := func(target, body string) call {
		return call{method: "POST", host: "held.eu1.example.com", target: target, auth: "qk_live_held", body: body}
	}
	refused := []struct {
		name    string
		c       call
		status  int
		code    string
		message string
	}{
		{"push, not UTF-8", proCall("POST", "/api/v1/push", "{\"items\":[{\"queue\":\"u\",\"payload\":\"\xff\xfe\"}]}"),
			400, "bad_request", "body is not valid UTF-8 at byte 34"},
		{"ack, not UTF-8", proCall("POST", "/api/v1/ack", "{\"transactionId\":\"\xc0\xaf\"}"),
			400, "bad_request", "body is not valid UTF-8 at byte 18"},
		{"lease extend, not UTF-8", proCall("POST", "/api/v1/lease/l-1/extend", "\xf5"),
			400, "bad_request", "body is not valid UTF-8 at byte 0"},
		{"push, byte-order mark", proCall("POST", "/api/v1/push", bom+`{"items":[]}`),
			400, "bad_request", "body starts with a UTF-8 byte-order mark; send the JSON without it"},
		{"push, empty", proCall("POST", "/api/v1/push", ""),
			400, "bad_request", "request body is empty; a JSON body is required"},
		{"push, trailing data", proCall("POST", "/api/v1/push", `{"items":[]} []`),
			400, "bad_request", "body is not valid JSON: data after the JSON value at byte 13"},
		{"push, item not an object", proCall("POST", "/api/v1/push", `{"items":[{"queue":"q"},7]}`),
			400, "bad_request", "item 1 is not an object"},
		{"transaction, empty operations", proCall("POST", "/api/v1/transaction", `{"operations":[]}`),
			400, "bad_request", "operations array cannot be empty"},
		{"ephemeral push without messages", proCall("POST", "/api/v1/ephemeral/push", `{"queue":"q"}`),
			400, "bad_request", "ephemeral push body must be a JSON object with a messages array"},
		{"cycle, push_items not an array", proCall("POST", "/streams/v1/cycle", `{"partition_id":"p","push_items":{"queue":"s"}}`),
			400, "bad_request", "push_items must be an array"},
		{"configure, invalid JSON", proCall("POST", "/api/v1/configure", `{"queue":"q",}`),
			400, "bad_request", "body is not valid JSON: expected a member name, found '}' at byte 13"},
		{"configure, queue not a string", proCall("POST", "/api/v1/configure", `{"queue":42}`),
			400, "bad_request", "queue is required: the body must be a JSON object with a string queue"},
		{"replay, queue not a string", proCall("POST", "/api/v1/dlq/7/replay", `{"queue":5,"partition":"p"}`),
			400, "bad_request", "a replay destination must be a JSON object whose queue and partition are strings"},
		{"kv batch, byte-order mark", held("/api/v1/kv", bom+`[{"ns":"n","op":"put","key":"k"}]`),
			400, "bad_request", "body starts with a UTF-8 byte-order mark; send the JSON without it"},
		{"kv batch, unreadable, on a blocked cluster", held("/api/v1/kv", `[{"ns":"n","op":"get","key":"k"}`),
			403, "push_blocked", "pushes blocked (billing hold)"},
		// On a blocked cluster a cycle that would push is refused for
		// that first, whatever else is wrong with it.
		{"cycle, a refused item, on a blocked cluster", held("/streams/v1/cycle", `{"push_items":[{"queue":"s","traceId":"x"}]}`),
			403, "push_blocked", "pushes blocked (billing hold)"},
		{"cycle, push_items not an array, on a blocked cluster", held("/streams/v1/cycle", `{"push_items":{"queue":"s"}}`),
			403, "push_blocked", "pushes blocked (billing hold)"},
		{"cycle, U+0000 and items, on a blocked cluster", held("/streams/v1/cycle", `{"push_items":[{"queue":"\u0000"}]}`),
			403, "push_blocked", "pushes blocked (billing hold)"},
		{"cycle, U+0000 and no items, on a blocked cluster", held("/streams/v1/cycle", `{"push_items":[],"consumer_group":"\u0000"}`),
			400, "bad_request", "body holds U+0000 (\\u0000) at byte 35; the broker cannot store it"},
		{"cycle, byte-order mark, on a blocked cluster", held("/streams/v1/cycle", bom+`{"push_items":[]}`),
			400, "bad_request", "body starts with a UTF-8 byte-order mark; send the JSON without it"},
		{"timers batch, byte-order mark", held("/api/v1/timers", bom+`[{"op":"schedule","key":"k"}]`),
			400, "bad_request", "body starts with a UTF-8 byte-order mark; send the JSON without it"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, tc.c, nil)
			expect(t, w, seen, tc.status, tc.code)
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["error"] != tc.message {
				t.Fatalf("message %q, want %q", body["error"], tc.message)
			}
		})
	}

	forwarded := []struct {
		name string
		c    call
	}{
		{"push with an item without payload", proCall("POST", "/api/v1/push", `{"items":[{"queue":"q"}]}`)},
		{"ack in UTF-8", proCall("POST", "/api/v1/ack", `{"transactionId":"t","error":"é"}`)},
		{"replay without a body", proCall("POST", "/api/v1/dlq/7/replay", "")},
		{"kv read on a blocked cluster", held("/api/v1/kv", `[{"ns":"n","op":"get","key":"k"}]`)},
	}
	for _, tc := range forwarded {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, tc.c, nil)
			expect(t, w, seen, 200, "")
			if seen.body != tc.c.body {
				t.Fatalf("the cell got %q, want the body as sent", seen.body)
			}
		})
	}
}
