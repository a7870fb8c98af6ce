package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// Through a real Caddy: a value the broker's
// schema cannot store is refused with 400 before the cell on every route
// that stores one, and the plan's per-item and batch caps hold on every
// route that stores a client value. Nothing refused reaches the cell (the
// fake broker's request log) or is billed.
func TestSchemaAndValueCapsThroughTheGateway(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "schema-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("schema-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("schema"), "schema", cell)
	_, key := cp.key(cl.id)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_batch_items": 3, "max_payload_bytes": 64,
		"max_msgs_per_sec": 1000, "msgs_burst": 1000}')`, cl.id)

	port := freePort(t)
	startMeteredGateway(t, port)
	c := client(port)
	send := func(method, path, body string) response {
		return do(t, c, method, fmt.Sprintf("http://%s.eu1.example.test:%d%s", cl.slug, port, path), key, body)
	}
	cellGot(broker)
	long := strings.Repeat("é", 256)
	// atNUL stands for the refusal of the body's one \u0000, at its offset.
	const atNUL = "NUL"
	big := `"` + strings.Repeat("v", 100) + `"`

	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, message            string
	}{
		{"NUL in a payload", "POST", "/api/v1/push", `{"items":[{"queue":"q","payload":{"a":"\u0000"}}]}`, 400, "bad_request", atNUL},
		{"NUL in a member name", "POST", "/api/v1/push", `{"items":[{"queue":"q","payload":{"\u0000":1}}]}`, 400, "bad_request", atNUL},
		{"NUL in a queue", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"\u0000"}]}]}`, 400, "bad_request", atNUL},
		{"NUL in a consumer group", "POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"p","consumerGroup":"\u0000"}`, 400, "bad_request", atNUL},
		{"NUL in a KV key", "POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"\u0000","value":1}]`, 400, "bad_request", atNUL},
		{"NUL in a KV value", "PUT", "/api/v1/kv/n/k", `{"v":"\u0000"}`, 400, "bad_request", atNUL},
		{"NUL in a timer", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"q","payload":"\u0000"}]}`, 400, "bad_request", atNUL},
		{"NUL in stream state", "POST", "/streams/v1/cycle", `{"partition_id":"p","state_ops":[{"type":"upsert","key":"k","value":"\u0000"}]}`, 400, "bad_request", atNUL},
		{"NUL in an ephemeral message", "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":["\u0000"]}`, 400, "bad_request", atNUL},
		{"NUL in a configured queue", "POST", "/api/v1/configure", `{"queue":"q\u0000"}`, 400, "bad_request", atNUL},
		{"NUL in a pop's consumer group", "GET", "/api/v1/pop/queue/q?consumerGroup=a%00b&batch=1", "", 400, "bad_request",
			"query holds U+0000 (%00); the broker cannot store it"},
		{"a pop's consumer group over 255 characters", "GET", "/api/v1/pop/queue/q?consumerGroup=" + strings.Repeat("%C3%A9", 256), "", 400, "bad_request",
			"consumerGroup is longer than 255 characters, more than the broker can store"},
		{"a configured namespace over 255 characters", "POST", "/api/v1/configure", `{"queue":"q","namespace":"` + long + `"}`, 400, "bad_request",
			"namespace is longer than 255 characters, more than the broker can store"},
		{"a configured queue over 255 characters", "POST", "/api/v1/configure", `{"queue":"` + long + `"}`, 400, "bad_request",
			"queue is longer than 255 characters, more than the broker can store"},
		{"a trace's eventType over 100 characters", "POST", "/api/v1/traces", `{"transactionId":"t","partitionId":"p","eventType":"` + strings.Repeat("e", 101) + `"}`, 400, "bad_request",
			"eventType is longer than 100 characters, more than the broker can store"},
		{"a trace's data over the payload cap", "POST", "/api/v1/traces", `{"transactionId":"t","partitionId":"p","data":` + big + `}`, 413, "payload_too_large",
			"item 0: payload 102 bytes exceeds max_payload_bytes (64)"},
		{"a stream state value over the payload cap", "POST", "/streams/v1/cycle", `{"partition_id":"p","state_ops":[{"type":"upsert","key":"k","value":` + big + `}]}`, 413, "payload_too_large",
			"state_ops[0]: value 102 bytes exceeds max_payload_bytes (64)"},
		{"an ack's consumer group over 255 characters", "POST", "/api/v1/ack/batch", `{"consumerGroup":"` + long + `","acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed"}]}`, 400, "bad_request",
			"consumerGroup is longer than 255 characters, more than the broker can store"},
		{"traceId not a UUID", "POST", "/api/v1/push", `{"items":[{"queue":"q","traceId":"bad"}]}`, 400, "bad_request",
			"item 0: traceId must be a UUID (or empty), as the broker stores it"},
		{"transactionId over 255 characters", "POST", "/api/v1/push", `{"items":[{"queue":"q","transactionId":"` + long + `"}]}`, 400, "bad_request",
			"item 0: transactionId is longer than 255 characters, more than the broker can store"},
		{"partition over 255 characters", "POST", "/api/v1/push", `{"items":[{"queue":"q","partition":"` + long + `"}]}`, 400, "bad_request",
			"item 0: partition is longer than 255 characters, more than the broker can store"},
		{"sink queue over 255 characters", "POST", "/streams/v1/cycle", `{"partition_id":"p","push_items":[{"queue":"` + long + `"}]}`, 400, "bad_request",
			"push_items[0]: queue is longer than 255 characters, more than the broker can store"},
		{"ephemeral message over the payload cap", "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[1,` + big + `]}`, 413, "payload_too_large",
			"item 1: payload 102 bytes exceeds max_payload_bytes (64)"},
		{"ephemeral push over the batch cap", "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[1,2,3,4]}`, 413, "payload_too_large",
			"batch of 4 items exceeds max_batch_items (3)"},
		{"KV value over the payload cap", "PUT", "/api/v1/kv/n/k", big, 413, "payload_too_large",
			"item 0: payload 102 bytes exceeds max_payload_bytes (64)"},
		{"KV batch value over the payload cap", "POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"k","value":` + big + `}]`, 413, "payload_too_large",
			"item 0: payload 102 bytes exceeds max_payload_bytes (64)"},
		{"KV batch over the batch cap", "POST", "/api/v1/kv", `[{"op":"get"},{"op":"get"},{"op":"get"},{"op":"get"}]`, 413, "payload_too_large",
			"batch of 4 items exceeds max_batch_items (3)"},
		{"timer over the payload cap", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"q","payload":` + big + `}]}`, 413, "payload_too_large",
			"item 0: payload 102 bytes exceeds max_payload_bytes (64)"},
		{"sink items over the batch cap", "POST", "/streams/v1/cycle", `{"partition_id":"p","push_items":[{"queue":"s"},{"queue":"s"},{"queue":"s"},{"queue":"s"}]}`, 413, "payload_too_large",
			"batch of 4 items exceeds max_batch_items (3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.message == atNUL {
				tc.message = fmt.Sprintf("body holds U+0000 (\\u0000) at byte %d; the broker cannot store it", strings.Index(tc.body, `\u0000`))
			}
			refusedUnseen(t, broker, send(tc.method, tc.path, tc.body), tc.status, tc.code, tc.message)
		})
	}

	// The same shapes within the limits reach the cell as sent.
	for _, ok := range []struct{ method, path, body string }{
		{"POST", "/api/v1/push", `{"items":[{"queue":"q","traceId":"0190b4c8-9a5e-7c3d-8f21-5b6a7c8d9e0f","transactionId":"` + long[2:] + `","payload":"\\u0000"}]}`},
		{"POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"k","value":"small"}]`},
		{"PUT", "/api/v1/kv/n/k", `"small"`},
		{"POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[1,2,3]}`},
		{"POST", "/api/v1/configure", `{"queue":"q","namespace":"` + long[2:] + `"}`},
	} {
		send(ok.method, ok.path, ok.body)
		reachedCell(t, broker, ok.path, ok.body)
	}

	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "push"); reqs > 2 || msgs > 4 {
		t.Errorf("push usage reqs=%d msgs=%d: refusals were billed", reqs, msgs)
	}
}
