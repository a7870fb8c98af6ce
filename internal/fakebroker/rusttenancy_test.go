package fakebroker

import (
	"context"
	"strings"
	"testing"
	"time"
)

const (
	rustTenantA = "aabbccdd-1122-3344-5566-778899aabbcc"
	rustTenantB = "0f0e0d0c-0b0a-4908-8706-050403020100"
)

func startRust(t *testing.T) (*Broker, string) {
	t.Helper()
	return startBroker(t, Options{Tenancy: TenancyRust})
}

func configureQueue(t *testing.T, c *client, name string) {
	t.Helper()
	status, v := c.call("POST", "/api/v1/configure", map[string]any{"queue": name, "options": map[string]any{}})
	if status != 200 {
		t.Fatalf("configure %s: %d %v", name, status, v)
	}
}

// The tenant header is trimmed and lower-cased, a malformed one is 400
// before any route, and a request without it acts as the default tenant:
// it is never refused (server/src/tenant.rs).
func TestRustTenantResolution(t *testing.T) {
	b, url := startRust(t)
	upper := &client{t: t, base: url, tenant: "  " + strings.ToUpper(rustTenantA) + " "}
	configureQueue(t, upper, "orders")
	lower := &client{t: t, base: url, tenant: rustTenantA}
	if status, v := lower.call("GET", "/api/v1/resources/queues/orders", nil); status != 200 {
		t.Fatalf("the lower-case spelling of the same tenant does not see its queue: %d %v", status, v)
	}
	if got := b.Requests()[0].Landed; got != rustTenantA {
		t.Fatalf("request landed in %q, want %q", got, rustTenantA)
	}

	for _, bad := range []string{"not-a-uuid", "00000000000000000000000000000001", rustTenantA + "0", "aabbccdd-1122-3344-5566-778899aabbcg", "é" + rustTenantA[1:]} {
		c := &client{t: t, base: url, tenant: bad}
		status, v := c.call("GET", "/health", nil)
		if status != 400 || v.(map[string]any)["error"] != badTenantBody {
			t.Errorf("tenant %q: %d %v, want 400 %q", bad, status, v, badTenantBody)
		}
	}

	none := &client{t: t, base: url}
	configureQueue(t, none, "shared")
	if got := b.Requests()[len(b.Requests())-1].Landed; got != DefaultTenant {
		t.Fatalf("a request without the header landed in %q, want the default tenant", got)
	}
	if status, _ := (&client{t: t, base: url, tenant: " "}).call("GET", "/api/v1/resources/queues/shared", nil); status != 200 {
		t.Fatalf("an empty header is not the default tenant: %d", status)
	}
	if status, _ := lower.call("GET", "/api/v1/resources/queues/shared", nil); status != 404 {
		t.Fatalf("tenant A sees the default tenant's queue: %d", status)
	}
}

func TestRustRefusesModelsWithoutACounterpart(t *testing.T) {
	for _, o := range []Options{{Tenancy: TenancyRust, RequireTenant: true}, {Tenancy: TenancyRust, Token: "s"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not refuse", o)
				}
			}()
			New(o)
		}()
	}
}

// Real statuses: 404 for a missing queue or an unknown route, 201 for a
// stored push, 204 for an empty pop, 413 for an over-long name.
func TestRustStatuses(t *testing.T) {
	_, url := startRust(t)
	c := &client{t: t, base: url, tenant: rustTenantA}
	status, v := c.call("GET", "/api/v1/resources/queues/missing", nil)
	if status != 404 || v.(map[string]any)["error"] != "Queue not found" {
		t.Fatalf("missing queue: %d %v", status, v)
	}
	status, v = c.call("GET", "/api/v1/no/such/route", nil)
	if status != 404 || v.(map[string]any)["code"] != "no_such_route" {
		t.Fatalf("unknown route: %d %v", status, v)
	}
	configureQueue(t, c, "q")
	status, _ = c.call("GET", "/api/v1/pop/queue/q?batch=1", nil)
	if status != 204 {
		t.Fatalf("empty pop: %d, want 204", status)
	}
	status, v = c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": map[string]any{"n": 1}}}})
	if status != 201 || objects(t, v)[0]["status"] != "queued" {
		t.Fatalf("push: %d %v, want 201 queued", status, v)
	}
	status, v = c.call("GET", "/api/v1/messages/00000000-0000-0000-0000-000000000000/x", nil)
	if status != 404 {
		t.Fatalf("missing message: %d %v", status, v)
	}
	long := strings.Repeat("n", rustNameBudget+1)
	status, v = c.call("POST", "/api/v1/configure", map[string]any{"queue": long, "options": map[string]any{}})
	if status != 413 || v.(map[string]any)["code"] != "name_too_long" {
		t.Fatalf("long name: %d %v", status, v)
	}
}

// A consumer group that names no subscription mode starts at the tail: it
// does not receive what was pushed before it first popped.
func TestRustGroupStartsAtTail(t *testing.T) {
	_, url := startRust(t)
	c := &client{t: t, base: url, tenant: rustTenantA}
	configureQueue(t, c, "q")
	c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": 1}}})
	status, _ := c.call("GET", "/api/v1/pop/queue/q?consumerGroup=g", nil)
	if status != 204 {
		t.Fatalf("a new group received history: %d", status)
	}
	time.Sleep(5 * time.Millisecond)
	c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": 2}}})
	status, v := c.call("GET", "/api/v1/pop/queue/q?consumerGroup=g", nil)
	if status != 200 || len(v.(map[string]any)["messages"].([]any)) != 1 {
		t.Fatalf("the group does not receive what came after it: %d %v", status, v)
	}
}

// The tenant and quota routes act on the tenant the CALLER names.
func TestRustCallerTargetedRoutes(t *testing.T) {
	b, url := startRust(t)
	victim := &client{t: t, base: url, tenant: rustTenantA}
	configureQueue(t, victim, "precious")
	attacker := &client{t: t, base: url, tenant: rustTenantB}
	if status, v := attacker.call("DELETE", "/api/v1/resources/tenant?tenant="+rustTenantA, nil); status != 200 {
		t.Fatalf("tenant delete: %d %v", status, v)
	}
	if n := b.TenantQueues(rustTenantA); n != 0 {
		t.Fatalf("the caller-named tenant kept %d queues", n)
	}
	if status, _ := attacker.call("DELETE", "/api/v1/resources/tenant?tenant="+DefaultTenant, nil); status != 400 {
		t.Fatalf("the default tenant can be purged: %d", status)
	}
	for _, path := range []string{"/api/v1/resources/quota", "/api/v1/system/quota", "/api/v1/system/quotas"} {
		b.SetGrant(rustTenantA, GrantKV, false)
		if status, v := attacker.call("POST", path, map[string]any{"tenantId": rustTenantA, "kind": "kv"}); status != 200 {
			t.Fatalf("%s: %d %v", path, status, v)
		}
		if !b.Granted(rustTenantA, GrantKV) || b.Granted(rustTenantB, GrantKV) {
			t.Fatalf("%s did not grant the caller-named tenant", path)
		}
	}
}

// KV, timers, locks and ephemeral queues answer 403 feature_gated until the
// tenant holds a grant, and are scoped per tenant once it does.
func TestRustFeatureGates(t *testing.T) {
	b, url := startRust(t)
	a := &client{t: t, base: url, tenant: rustTenantA}
	other := &client{t: t, base: url, tenant: rustTenantB}
	gated := []struct{ method, path string }{
		{"POST", "/api/v1/kv"}, {"PUT", "/api/v1/kv/ns/k"}, {"GET", "/api/v1/kv/ns/k"}, {"DELETE", "/api/v1/kv/ns/k"},
		{"POST", "/api/v1/timers"}, {"POST", "/api/v1/locks"},
		{"POST", "/api/v1/ephemeral/push"}, {"GET", "/api/v1/ephemeral/pop?queue=e"},
	}
	for _, g := range gated {
		var body any
		if g.method != "GET" && g.method != "DELETE" {
			body = map[string]any{"name": "l", "owner": "o", "queue": "e", "payload": 1}
		}
		status, v := a.call(g.method, g.path, body)
		if status != 403 || v.(map[string]any)["error"] != "feature_gated" {
			t.Errorf("%s %s without a grant: %d %v", g.method, g.path, status, v)
		}
	}
	b.SetGrant(rustTenantA, GrantKV, true)
	b.SetGrant(rustTenantB, GrantKV, true)
	if status, v := a.call("PUT", "/api/v1/kv/ns/k", `"mine"`); status != 200 {
		t.Fatalf("kv put: %d %v", status, v)
	}
	if _, v := other.call("GET", "/api/v1/kv/ns/k", nil); v.(map[string]any)["found"] != false {
		t.Fatalf("another tenant reads A's key: %v", v)
	}
	if _, v := a.call("GET", "/api/v1/kv/ns/k", nil); v.(map[string]any)["value"] != "mine" {
		t.Fatalf("A cannot read its key: %v", v)
	}
	if status, _ := a.call("POST", "/api/v1/ephemeral/push", map[string]any{"queue": "e", "payload": 1}); status != 403 {
		t.Fatalf("the KV grant opened ephemeral queues: %d", status)
	}
}

// retainedBytes is the lane's last value: 0 for a queue the lane has not
// seen, the stored bytes once it ran.
func TestRustRetainedBytesLag(t *testing.T) {
	b, url := startRust(t)
	c := &client{t: t, base: url, tenant: rustTenantA}
	configureQueue(t, c, "q")
	c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": "0123456789"}}})
	retained := func() float64 {
		_, v := c.call("GET", "/api/v1/resources/queues", nil)
		m := v.(map[string]any)
		if _, has := m["kvBytes"]; has {
			t.Fatalf("kvBytes reported though it cannot be read: %v", m)
		}
		return m["queues"].([]any)[0].(map[string]any)["retainedBytes"].(float64)
	}
	if got := retained(); got != 0 {
		t.Fatalf("retainedBytes %v before the lane ran, want 0", got)
	}
	b.RunRetainedBytesLane()
	if got := retained(); got <= 0 {
		t.Fatalf("retainedBytes %v after the lane ran", got)
	}
}

// GET /auth/me answers the broker's own operator identity.
func TestRustAuthMe(t *testing.T) {
	_, url := startBroker(t, Options{Tenancy: TenancyRust, Name: "cell-host-7"})
	status, v := (&client{t: t, base: url}).call("GET", "/auth/me", nil)
	if status != 200 || v.(map[string]any)["cell_slug"] != "cell-host-7" || v.(map[string]any)["role"] != "operator" {
		t.Fatalf("/auth/me: %d %v", status, v)
	}
	_, url = startBroker(t, Options{})
	if status, _, _, err := (&client{t: t, base: url}).do(context.Background(), "GET", "/auth/me", nil); err != nil || status != 404 {
		t.Fatalf("the 0.15.1 model serves /auth/me")
	}
}

// A raft-storage cell without a leader answers 503 with Retry-After, one
// with a full disk 507, both in the {"error","code"} envelope; nothing is
// stored meanwhile.
func TestRustCellConditions(t *testing.T) {
	b, url := startRust(t)
	c := &client{t: t, base: url, tenant: rustTenantA}
	for _, status := range []int{RustNoLeader, RustDiskFull} {
		b.SetRustCellCondition(status)
		got, hdr, data, err := c.do(context.Background(), "POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": 1}}})
		if err != nil || got != status || !strings.Contains(string(data), `"code"`) {
			t.Fatalf("push under %d: %d %s %v", status, got, data, err)
		}
		if (status == RustNoLeader) != (hdr.Get("Retry-After") == "1") {
			t.Fatalf("%d: Retry-After %q", status, hdr.Get("Retry-After"))
		}
	}
	b.SetRustCellCondition(0)
	if n := b.TenantQueues(rustTenantA); n != 0 {
		t.Fatalf("%d queues stored during the conditions", n)
	}
	if status, _ := c.call("GET", "/health", nil); status != 200 {
		t.Fatalf("/health: %d", status)
	}
}

// A transaction's positions rider (server/src/rsm/planner/positions.rs):
// it stores no message, sets where a group reads next, forgets with a null
// offset, names only existing queues, and is refused whole when malformed.
func TestRustTransactionPositions(t *testing.T) {
	_, url := startRust(t)
	c := &client{t: t, base: url, tenant: rustTenantA}
	configureQueue(t, c, "orders")
	for i := 0; i < 3; i++ {
		if status, v := c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "orders", "payload": i}}}); status != 201 {
			t.Fatalf("push %d: %d %v", i, status, v)
		}
	}
	status, v := c.call("POST", "/api/v1/transaction", map[string]any{
		"operations": []any{map[string]any{"type": "push", "items": []any{map[string]any{"queue": "orders", "payload": 3}}}},
		"positions":  []any{map[string]any{"queue": "orders", "consumerGroup": "billing", "offset": 2}},
	})
	if status != 200 || v.(map[string]any)["success"] != true {
		t.Fatalf("transaction with a position: %d %v", status, v)
	}
	if n := len(v.(map[string]any)["results"].([]any)); n != 1 {
		t.Fatalf("%d results, want the one push (a position stores no message)", n)
	}
	status, v = c.call("GET", "/api/v1/pop/queue/orders?consumerGroup=billing&batch=10", nil)
	if status != 200 {
		t.Fatalf("pop: %d %v", status, v)
	}
	msgs := v.(map[string]any)["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["data"] != float64(2) {
		t.Fatalf("the group positioned at offset 2 got %v, want the messages 2 and 3", msgs)
	}

	for _, bad := range []map[string]any{
		{"queue": "orders", "consumerGroup": "g"},
		{"queue": "orders", "consumerGroup": "g", "offset": -1},
		{"queue": "orders", "offset": 1},
		{"queue": "orders", "consumerGroup": "g", "offset": 1, "metadata": 5},
	} {
		status, v := c.call("POST", "/api/v1/transaction", map[string]any{
			"operations": []any{map[string]any{"type": "push", "items": []any{map[string]any{"queue": "orders", "payload": "x"}}}},
			"positions":  []any{bad},
		})
		if status != 400 {
			t.Errorf("position %v: %d %v, want 400", bad, status, v)
		}
	}
	status, v = c.call("POST", "/api/v1/transaction", map[string]any{
		"operations": []any{map[string]any{"type": "push", "items": []any{map[string]any{"queue": "orders", "payload": "y"}}}},
		"positions":  []any{map[string]any{"queue": "nowhere", "consumerGroup": "g", "offset": 0}},
	})
	if status != 400 || v.(map[string]any)["code"] != "queue_not_found" {
		t.Fatalf("a position on a missing queue: %d %v", status, v)
	}
	status, v = c.call("GET", "/api/v1/pop/queue/orders?consumerGroup=audit&subscriptionMode=all&batch=10", nil)
	if status != 200 || len(v.(map[string]any)["messages"].([]any)) != 4 {
		t.Fatalf("a new group reads %d %v, want 4 messages (refused transactions store nothing)", status, v)
	}
}

// The status and worker metrics of a Rust broker take no tenant
// (server/src/handlers/status.rs, analytics.rs): any caller reads every
// tenant's queues there, unlike the 0.15.1 model's per-tenant answer.
func TestRustStatusIsCellWide(t *testing.T) {
	for _, rust := range []bool{true, false} {
		opts := Options{}
		if rust {
			opts.Tenancy = TenancyRust
		}
		_, url := startBroker(t, opts)
		a := &client{t: t, base: url, tenant: rustTenantA}
		b := &client{t: t, base: url, tenant: rustTenantB}
		configureQueue(t, b, "globex-secret")
		configureQueue(t, a, "acme-orders")
		for _, path := range []string{"/api/v1/status", "/api/v1/analytics/worker-metrics"} {
			status, v := a.call("GET", path, nil)
			if status != 200 {
				t.Fatalf("rust=%v %s: %d %v", rust, path, status, v)
			}
			var names []string
			for _, q := range v.(map[string]any)["queues"].([]any) {
				n, _ := q.(map[string]any)["name"].(string)
				if n == "" {
					n, _ = q.(map[string]any)["queueName"].(string)
				}
				names = append(names, n)
			}
			sawOther := strings.Contains(strings.Join(names, ","), "globex-secret")
			if sawOther != rust || !strings.Contains(strings.Join(names, ","), "acme-orders") {
				t.Errorf("rust=%v %s lists %v: another tenant's queue seen=%v, want %v", rust, path, names, sawOther, rust)
			}
		}
	}
}
