package cellerror

import (
	"encoding/json"
	"testing"

	"github.com/queengate/queengate/wire"
)

// Answers recorded from Queen 0.15.1 (testdata/broker, C65 and C104), and
// others of the same kinds (a connection refused, a deadlock, an allocation
// failure, SQL text) that must be replaced.
var exposing = []string{
	`{"error":"ERROR:  invalid input syntax for type uuid: \"p1\"\nCONTEXT:  PL/pgSQL function queen.ack_messages_v2(jsonb) line 14 at FOR over SELECT rows\n","success":false}`,
	`{"error":"ERROR:  invalid input syntax for type uuid: \"p1\"\nCONTEXT:  unnamed portal parameter $1 = '...'\n","success":false}`,
	`{"error":"ERROR:  LIMIT must not be negative\nCONTEXT:  SQL statement \"WITH message_data AS (SELECT m.id FROM queen.messages m LIMIT -1)\"\nPL/pgSQL function queen.pop_unified_batch(jsonb) line 93 at RETURN QUERY\n","success":false}`,
	`{"error":"Failed to connect to target: connection to server at \"192.0.2.5\", port 5432 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n","success":false}`,
	`{"error":"ACK operation failed: ERROR:  deadlock detected\nDETAIL:  Process 4711 waits for ShareLock"}`,
	`{"success":false,"error":"FATAL:  terminating connection due to administrator command"}`,
	`{"error":"std::bad_alloc"}`,
	`{"error":"WITH message_data AS (SELECT 1) SELECT * FROM message_data"}`,
	`{"error":{"message":"ERROR:  relation \"queen.messages\" does not exist"}}`,
	`  {"ack_result":null,"error":"ERROR:  duplicate key value violates unique constraint \"messages_pkey\"","success":false}`,
}

// Answers that must pass unchanged: the broker's own validation messages
// (from the fixtures), normal answers, user payloads that happen to hold
// SQL-looking text, and per-item errors inside arrays.
var keeping = []string{
	`{"error":"queue is required"}`,
	`{"error":"Invalid JSON: [json.exception.parse_error.101] parse error at line 1, column 15: syntax error while parsing object key - unexpected end of input; expected string literal"}`,
	`{"error":"[json.exception.type_error.306] cannot use value() with null"}`,
	`{"error":"no_available_partition","messages":[],"success":false}`,
	`{"error":"lease_held","messages":[],"success":false}`,
	`{"error":"Queue not found"}`,
	`{"error":"ACK operation failed: Message not found","results":[],"success":false,"transactionId":"t"}`,
	`{"error":"config_hash mismatch: operator chain changed for queryId 'cat.totals'. Pass reset:true to wipe existing state, or use a new queryId.","success":false}`,
	`{"consumerGroup":"__QUEUE_MODE__","messages":[{"data":{"note":"ERROR:  SELECT * FROM x PL/pgSQL"},"id":"1"}],"success":true}`,
	`[{"error":"ERROR:  per-item text is left alone","index":0,"success":false}]`,
	`{"messages":[],"error_count":1}`,
	`not json {"error":"ERROR:  x"`,
	`{"error":null}`,
	`{"deleted":true,"existed":false,"queue":"q"}`,
}

func TestInternalDetail(t *testing.T) {
	for _, body := range exposing {
		detail, exposes := InternalDetail([]byte(body))
		if !exposes || detail == "" {
			t.Errorf("InternalDetail(%s) = %q, %v; want it replaced", body, detail, exposes)
		}
	}
	for _, body := range keeping {
		if detail, exposes := InternalDetail([]byte(body)); exposes {
			t.Errorf("InternalDetail(%s) = %q, true; want it kept", body, detail)
		}
	}
}

// FuzzInternalDetail: a body is only ever judged by its top-level error
// text, so wrapping that text in any normal answer shape changes nothing,
// and text without the marks of internals never makes a body exposing.
func FuzzInternalDetail(f *testing.F) {
	for _, b := range append(append([]string{}, exposing...), keeping...) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		detail, exposes := InternalDetail(body)
		if slow := slowInternal(body); slow != exposes {
			t.Fatalf("%q: InternalDetail says %v, a full parse %v (the shortcut missed a mark)", body, exposes, slow)
		}
		if !exposes {
			return
		}
		if !LooksInternal(detail) {
			t.Fatalf("%q judged exposing for the text %q, which does not look internal", body, detail)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			t.Fatalf("%q judged exposing but is no JSON object: %v", body, err)
		}
		if _, found := top["error"]; !found {
			t.Fatalf("%q judged exposing without an error field", body)
		}
	})
}

// slowInternal is InternalDetail without its shortcuts: always parse what
// the broker's grammar accepts (encoding/json with a map, which matches
// names exactly and keeps the last of a repeated one, as wire does).
func slowInternal(body []byte) bool {
	var top map[string]json.RawMessage
	if wire.Check(body) != nil || json.Unmarshal(body, &top) != nil || len(top["error"]) == 0 {
		return false
	}
	raw := top["error"]
	msg := string(raw)
	if raw[0] == '"' && json.Unmarshal(raw, &msg) != nil {
		return false
	}
	return LooksInternal(msg)
}

func TestShortcutSeesEscapedMarks(t *testing.T) {
	for _, body := range []string{
		`{"error":"\u0045RROR:  x"}`,
		`{"error":"CONTEXT:  PL\/pgSQL function f()"}`,
		`{"error":"boom\n\tat Foo.bar(Foo.java:1)"}`,
		`{"\u0065rror":"ERROR:  x"}`,
	} {
		if _, exposes := InternalDetail([]byte(body)); !exposes {
			t.Errorf("%s not recognised", body)
		}
	}
}

// FuzzCannotExpose: an answer whose head CannotExpose calls decided is
// never judged exposing, however it goes on; and every exposing answer is
// held to its end (no head of it is decided).
func FuzzCannotExpose(f *testing.F) {
	for _, b := range append(append([]string{}, exposing...), keeping...) {
		f.Add([]byte(b), uint(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint) {
		head := body[:min(int(cut), len(body))]
		if CannotExpose(head) {
			if _, exposes := InternalDetail(body); exposes {
				t.Fatalf("%q: its head %q was let through, but the whole answer exposes", body, head)
			}
		}
	})
}

func TestCannotExpose(t *testing.T) {
	for _, body := range exposing {
		for i := range len(body) + 1 {
			if CannotExpose([]byte(body[:i])) {
				t.Fatalf("%q: the head %q of an exposing answer was let through", body, body[:i])
			}
		}
	}
	for _, head := range []string{`[{"index":0`, " \r\n\t[", `"text"`, `not json {"error":"ERROR:  x"`, "\ufeff{"} {
		if !CannotExpose([]byte(head)) {
			t.Errorf("%q opens no object, so it cannot expose", head)
		}
	}
	for _, head := range []string{"", " \n", "{", ` {"messages":[]`} {
		if CannotExpose([]byte(head)) {
			t.Errorf("%q may still open an object that exposes", head)
		}
	}
}
