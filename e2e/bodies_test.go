package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/meter"
)

// Through a real Caddy: every produce
// body is read as the broker reads it, or refused with 400 and never
// forwarded; refusals are not billed; and what is billed is what the broker
// stored, at any answer size.

// startMeteredGateway loads a gateway whose meter is drained by
// stopMeteredGateway (caddy.Stop books the open minute).
func startMeteredGateway(t *testing.T, port int) {
	t.Helper()
	cfg := gatewayCaddyfile(port, pgtest.URL(t), "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), "")
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = caddy.Stop()
		}
	})
	stopMetered = func() {
		stopped = true
		if err := caddy.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

var stopMetered func()

// cellGot returns what reached the cell since the last call, as
// "METHOD path" lines, and forgets it.
func cellGot(b *fakebroker.Broker) []string {
	var out []string
	for _, r := range forwarded(b) {
		out = append(out, r.Method+" "+r.Path)
	}
	b.ResetRequests()
	return out
}

// refusedUnseen asserts a 400 bad_request with exactly message, and that
// nothing reached the cell.
func refusedUnseen(t *testing.T, b *fakebroker.Broker, r response, status int, code, message string) {
	t.Helper()
	assertRefusal(t, r, status, code)
	if got := r.json(t)["error"]; message != "" && got != message {
		t.Errorf("message %q, want %q", got, message)
	}
	if got := cellGot(b); len(got) != 0 {
		t.Errorf("a refused request reached the cell: %v", got)
	}
}

// reachedCell asserts that exactly one request reached the cell, with
// exactly body.
func reachedCell(t *testing.T, b *fakebroker.Broker, path, body string) {
	t.Helper()
	reqs := forwarded(b)
	b.ResetRequests()
	if len(reqs) != 1 || reqs[0].Path != path || string(reqs[0].Body) != body {
		var got []string
		for _, r := range reqs {
			got = append(got, r.Method+" "+r.Path+" "+fmt.Sprintf("%.80q", r.Body))
		}
		t.Fatalf("the cell got %v, want one %s with the body as sent", got, path)
	}
}

func itemsBody(n int, item func(i int) string) string {
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(item(i))
	}
	sb.WriteString(`]}`)
	return sb.String()
}

func TestProduceBodiesFailClosed(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "bodies-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("bodies-cell", broker.URL(), "")
	tn := cp.tenant("bodies")
	cl := cp.cluster(tn, "bodies", cell)
	_, key := cp.key(cl.id)
	heldTenant := cp.tenant("bodies-held")
	held := cp.cluster(heldTenant, "bodies-held", cell)
	_, heldKey := cp.key(held.id)
	cp.exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'grace')`, heldTenant)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_batch_items": 1000, "max_queues": 20,
		"max_payload_bytes": 1024, "max_msgs_per_sec": 1, "msgs_burst": 100}')`, cl.id)

	port := freePort(t)
	startMeteredGateway(t, port)
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}
	push := func(body string) response { return do(t, c, "POST", url(cl.slug, "/api/v1/push"), key, body) }
	noPayload := func(at int) func(int) string {
		return func(i int) string {
			if i == at {
				return `{"queue":"orders"}`
			}
			return fmt.Sprintf(`{"queue":"orders","payload":{"i":%d}}`, i)
		}
	}
	cellGot(broker)

	// Finding 1: an item without "payload" (the broker stores {}) no
	// longer lifts the batch cap, the message bucket, the queue cap, the
	// payload cap or the depth the gateway reads.
	t.Run("a missing payload is an item like any other", func(t *testing.T) {
		refusedUnseen(t, broker, push(itemsBody(1001, noPayload(500))), 413, "payload_too_large",
			"batch of 1001 items exceeds max_batch_items (1000)")
		refusedUnseen(t, broker, push(itemsBody(300, noPayload(0))), 429, "rate_limited", "")
		refusedUnseen(t, broker, push(itemsBody(45, func(i int) string {
			if i == 7 {
				return fmt.Sprintf(`{"queue":"q%d"}`, i)
			}
			return fmt.Sprintf(`{"queue":"q%d","payload":1}`, i)
		})), 403, "quota_exceeded", "queue limit reached (20)")
		refusedUnseen(t, broker, push(`{"items":[{"queue":"orders"},{"queue":"orders","payload":"`+strings.Repeat("x", 2000)+`"}]}`),
			413, "payload_too_large", "item 1: payload 2002 bytes exceeds max_payload_bytes (1024)")
		deep := `{"items":[{"queue":"orders","payload":` + strings.Repeat("[", 1200) + strings.Repeat("]", 1200) + `}]}`
		refusedUnseen(t, broker, push(deep), 400, "bad_request", "body nests deeper than 1000 levels at byte 1035")
		refusedUnseen(t, broker, push(`{"items":[{"queue":"orders","partition":7}]}`), 400, "bad_request",
			"item 0: partition must be a string")

		// What the broker takes is forwarded as sent, and billed.
		ok := itemsBody(3, noPayload(1))
		if r := push(ok); r.status != 200 || acceptedItems(r) != 3 {
			t.Fatalf("a push with an item without payload: %d %s", r.status, r.body)
		}
		reachedCell(t, broker, "/api/v1/push", ok)
		txn := `{"operations":[{"type":"push","items":[{"queue":"orders"},{"queue":"orders","payload":1}]}]}`
		if r := do(t, c, "POST", url(cl.slug, "/api/v1/transaction"), key, txn); r.status != 200 || r.json(t)["success"] != true {
			t.Fatalf("a transaction with an item without payload: %d %s", r.status, r.body)
		}
		reachedCell(t, broker, "/api/v1/transaction", txn)
		refusedUnseen(t, broker, do(t, c, "POST", url(cl.slug, "/api/v1/transaction"), key,
			`{"operations":[{"type":"push","items":[{"payload":1}]}]}`), 400, "bad_request", "operation 0, item 0 has no queue")
	})

	// Finding 3: a body that is not UTF-8 kills the broker; it is refused
	// on every route, before it reaches the cell.
	t.Run("invalid UTF-8 never reaches the cell", func(t *testing.T) {
		bad := "{\"items\":[{\"queue\":\"u\",\"payload\":\"\xff\xfe\"}]}"
		refusedUnseen(t, broker, push(bad), 400, "bad_request", "body is not valid UTF-8 at byte 34")
		ack := "{\"transactionId\":\"t\",\"partitionId\":\"p\",\"status\":\"completed\",\"error\":\"\xc3\"}"
		refusedUnseen(t, broker, do(t, c, "POST", url(cl.slug, "/api/v1/ack"), key, ack), 400, "bad_request",
			"body is not valid UTF-8 at byte 69")
		refusedUnseen(t, broker, do(t, c, "POST", url(cl.slug, "/api/v1/configure"), key, "{\"queue\":\"\xed\xa0\x80\"}"),
			400, "bad_request", "body is not valid UTF-8 at byte 10")
		refusedUnseen(t, broker, do(t, c, "POST", url(cl.slug, "/api/v1/transaction"), key,
			`{"operations":[{"type":"push","items":[{"queue":"u","payload":"\udc00"}]}]}`), 400, "bad_request", "")
		// The same ack in valid UTF-8 is forwarded as usual.
		goodAck := `{"transactionId":"t","partitionId":"p","status":"completed","error":"é"}`
		do(t, c, "POST", url(cl.slug, "/api/v1/ack"), key, goodAck)
		reachedCell(t, broker, "/api/v1/ack", goodAck)
	})

	// Finding 5: a byte-order mark hid a growing batch from the push block.
	t.Run("a byte-order mark is refused", func(t *testing.T) {
		heldURL := func(path string) string { return url(held.slug, path) }
		bom := "\xef\xbb\xbf"
		const bomMessage = "body starts with a UTF-8 byte-order mark; send the JSON without it"
		for _, c2 := range []struct{ path, body string }{
			{"/api/v1/kv", `[{"ns":"app","op":"put","key":"k","value":1}]`},
			{"/api/v1/timers", `{"operations":[{"op":"schedule","queue":"q","key":"r","at":"2031-01-01T00:00:00Z"}]}`},
			{"/streams/v1/cycle", `{"partition_id":"p","push_items":[{"queue":"sink","payload":1}]}`},
		} {
			refusedUnseen(t, broker, do(t, c, "POST", heldURL(c2.path), heldKey, bom+c2.body), 400, "bad_request", bomMessage)
			refusedUnseen(t, broker, do(t, c, "POST", heldURL(c2.path), heldKey, c2.body), 403, "push_blocked", "")
		}
		refusedUnseen(t, broker, push(bom+`{"items":[{"queue":"orders","payload":1}]}`), 400, "bad_request", bomMessage)
		// A batch that only reads passes the push block, as before.
		read := `[{"ns":"app","op":"get","key":"k"}]`
		do(t, c, "POST", heldURL("/api/v1/kv"), heldKey, read)
		reachedCell(t, broker, "/api/v1/kv", read)
	})

	// Nothing refused is billed: the push and the transaction that went
	// through are, with every item the broker stored.
	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "push"); reqs != 1 || msgs != 3 {
		t.Errorf("push usage reqs=%d msgs=%d, want 1 and 3 (refusals are not billed)", reqs, msgs)
	}
	if reqs, msgs := cp.usageOf(cl.id, "txn"); reqs != 1 || msgs != 2 {
		t.Errorf("transaction usage reqs=%d msgs=%d, want 1 and 2", reqs, msgs)
	}
	if reqs, _ := cp.usageOf(held.id, "read"); reqs != 1 {
		t.Errorf("held cluster read usage reqs=%d, want 1 (the one forwarded batch)", reqs)
	}
}

// Finding 2: a push whose answer is larger than the billing copy limit was
// billed 0 messages. 320,000 tiny items answer with about 74 MB.
func TestLargeAnswersAreBilledInFull(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "bigpush-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("bigpush-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("bigpush"), "bigpush", cell)
	_, key := cp.key(cl.id)
	const items = 320_000
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_batch_items": 400000,
		"max_msgs_per_sec": 1000000, "msgs_burst": 1000000}')`, cl.id)

	port := freePort(t)
	startMeteredGateway(t, port)
	body := itemsBody(items, func(int) string { return `{"queue":"t"}` })
	r := do(t, client(port), "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", cl.slug, port), key, body)
	if r.status != 200 {
		t.Fatalf("push: %d %.200s", r.status, r.body)
	}
	if len(r.body) <= meter.MaxBilledBody {
		t.Fatalf("the answer is %d bytes, not over the billing copy limit (%d)", len(r.body), meter.MaxBilledBody)
	}
	if n := acceptedItems(r); n != items {
		t.Fatalf("the broker stored %d of %d items", n, items)
	}
	pushAnswer := len(r.body)

	// The same holds for a transaction: its answer has one result per
	// pushed item.
	const txnItems = 400_000
	txn := `{"operations":[{"type":"push","items":[` + strings.TrimSuffix(strings.Repeat(`{"queue":"t"},`, txnItems), ",") + `]}]}`
	r = do(t, client(port), "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/transaction", cl.slug, port), key, txn)
	if tail := r.body[max(len(r.body)-200, 0):]; r.status != 200 || !strings.Contains(string(tail), `],"success":true,`) {
		t.Fatalf("transaction: %d %.200s", r.status, r.body)
	}
	if len(r.body) <= meter.MaxBilledBody {
		t.Fatalf("the transaction's answer is %d bytes, not over the billing copy limit", len(r.body))
	}
	// And for a pop: 320,000 messages answer with more than the copy
	// limit; they are counted as the answer streams.
	r = do(t, client(port), "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/pop/queue/t?batch=%d&autoAck=true", cl.slug, port, items), key, "")
	if r.status != 200 || len(r.body) <= meter.MaxBilledBody {
		t.Fatalf("pop: %d, %d bytes, want 200 and more than the copy limit (%d)", r.status, len(r.body), meter.MaxBilledBody)
	}
	var popped struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(r.body, &popped); err != nil || len(popped.Messages) == 0 {
		t.Fatalf("pop answer: %v, %d messages", err, len(popped.Messages))
	}
	delivered := int64(len(popped.Messages))
	popAnswer := len(r.body)
	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "delivery"); reqs != 1 || msgs != delivered {
		t.Fatalf("a %d-byte pop answer was billed reqs=%d msgs=%d, want 1 and %d", popAnswer, reqs, msgs, delivered)
	}
	if reqs, msgs := cp.usageOf(cl.id, "push"); reqs != 1 || msgs != items {
		t.Fatalf("a %d-byte answer was billed reqs=%d msgs=%d, want 1 and %d", pushAnswer, reqs, msgs, items)
	}
	if reqs, msgs := cp.usageOf(cl.id, "txn"); reqs != 1 || msgs != txnItems {
		t.Fatalf("a %d-byte transaction answer was billed reqs=%d msgs=%d, want 1 and %d", len(r.body), reqs, msgs, txnItems)
	}
}
