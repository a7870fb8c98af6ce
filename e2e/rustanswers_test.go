package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestMeteringOnRustAnswers: the Rust brokers answer a stored push 201, an
// empty pop 204 with no body, a missing queue 404 and an error 500. Each is
// relayed as the broker sent it (the broker's own messages unchanged, a
// database error's details withheld) and
// billed by what it says: the pushed and delivered messages, one read for
// the 404, one request and no messages for the 500.
func TestMeteringOnRustAnswers(t *testing.T) {
	s := newIsolationSetup(t, "rust5", rustCell)
	startGateway(t, s.caddyfile(t, ""))
	call := func(method, path, body string) response {
		return do(t, s.c, method, s.url(s.acme, path), s.acmeKey, body)
	}
	if r := call("POST", "/api/v1/configure", `{"queue":"orders","options":{}}`); r.status != http.StatusOK {
		t.Fatalf("configure: %d %s", r.status, r.body)
	}
	if r := call("GET", "/api/v1/pop/queue/orders?batch=5", ""); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("empty pop: %d %q, want 204 with no body", r.status, r.body)
	}
	r := call("POST", "/api/v1/push", `{"items":[{"queue":"orders","payload":{"n":1}},{"queue":"orders","payload":{"n":2}}]}`)
	if r.status != http.StatusCreated || strings.Count(string(r.body), `"queued"`) != 2 {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	if r := call("GET", "/api/v1/pop/queue/orders?batch=5&autoAck=true", ""); r.status != http.StatusOK || strings.Count(string(r.body), `"transactionId"`) != 2 {
		t.Fatalf("pop: %d %s", r.status, r.body)
	}
	r = call("GET", "/api/v1/resources/queues/missing", "")
	if r.status != http.StatusNotFound || r.json(t)["error"] != "Queue not found" {
		t.Fatalf("missing queue: %d %s, want the broker's 404 relayed", r.status, r.body)
	}
	// Configure without options: the broker's JSON library error, 500 on a
	// Rust broker (an error that does not say "not found").
	r = call("POST", "/api/v1/configure", `{"queue":"bare"}`)
	if r.status != http.StatusInternalServerError {
		t.Fatalf("configure without options: %d %s, want the broker's 500", r.status, r.body)
	}
	// A database error passed through with a real status: still withheld.
	r = call("GET", "/api/v1/pop/queue/orders?batch=-1", "")
	if r.status != http.StatusInternalServerError || r.json(t)["code"] != "internal_error" || strings.Contains(string(r.body), "LIMIT") {
		t.Fatalf("pop with a negative batch: %d %s, want the broker's 500 with its details withheld", r.status, r.body)
	}

	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}
	if err := func() error {
		if reqs, msgs := s.cp.usageOf(s.acme.id, "push"); reqs != 1 || msgs != 2 {
			return fmt.Errorf("push usage %d requests %d messages, want 1 and 2 (usage: %s)", reqs, msgs,
				s.cp.scalar(`SELECT coalesce(string_agg(op_class || ':' || reqs || '/' || msgs, ' '), '') FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid`, s.acme.id))
		}
		if reqs, msgs := s.cp.usageOf(s.acme.id, "delivery"); reqs != 3 || msgs != 2 {
			return fmt.Errorf("delivery usage %d requests %d messages, want 3 (one empty, one 500) and 2", reqs, msgs)
		}
		if reqs, _ := s.cp.usageOf(s.acme.id, "read"); reqs != 1 {
			return fmt.Errorf("read usage %d requests, want the 404's 1", reqs)
		}
		if reqs, msgs := s.cp.usageOf(s.acme.id, "configure"); reqs != 2 || msgs != 0 {
			return fmt.Errorf("configure usage %d requests %d messages, want 2 (the 500 a request, no messages) and 0", reqs, msgs)
		}
		return nil
	}(); err != nil {
		t.Fatal(err)
	}
}

// TestStorageQuotaWithALaggingBroker: a 1.x broker refreshes retainedBytes
// every ten minutes, so a new queue reads 0 for that long. The gateway's
// in-flight estimate (from the pushes it let through, answered 201) blocks
// the cluster at its cap meanwhile; once the broker's figure arrives it
// keeps the block, and clearing the cap releases it.
func TestStorageQuotaWithALaggingBroker(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "lag-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("lag-cell", broker.URL(), "")
	full := cp.cluster(cp.tenant("lag"), "lag-full", cell)
	_, key := cp.key(full.id)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_retained_bytes": 250}')`, full.id)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "reconcile_interval 300ms", ""))
	c := client(port)
	url := func(path string) string { return fmt.Sprintf("http://%s.eu1.example.test:%d%s", full.slug, port, path) }
	push := func() response {
		return do(t, c, "POST", url("/api/v1/push"), key, fmt.Sprintf(`{"items":[{"queue":"big","payload":%q}]}`, strings.Repeat("x", 100)))
	}
	retained := func() float64 {
		req, _ := http.NewRequest("GET", broker.URL()+"/api/v1/resources/queues", nil)
		req.Header.Set(fakebroker.TenantHeader, full.brokerTenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var listing struct {
			Queues []struct {
				RetainedBytes float64 `json:"retainedBytes"`
			} `json:"queues"`
			KVBytes *float64 `json:"kvBytes"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&listing); err != nil || len(listing.Queues) != 1 || listing.KVBytes != nil {
			t.Fatalf("broker listing: %+v %v", listing, err)
		}
		return listing.Queues[0].RetainedBytes
	}
	// The first push creates the queue; the reconciler then reads a listing
	// whose retainedBytes is 0 (the broker's lane has not run), and keeps
	// counting what it lets through on top of it.
	if r := push(); r.status != http.StatusCreated {
		t.Fatalf("first push: %d %s", r.status, r.body)
	}
	accepted := 1
	time.Sleep(time.Second)
	eventually(t, 10*time.Second, func() error {
		r := push()
		switch r.status {
		case http.StatusCreated:
			accepted++
			return fmt.Errorf("push %d accepted", accepted)
		case http.StatusForbidden:
			assertRefusal(t, r, http.StatusForbidden, "storage_quota_exceeded")
			return nil
		}
		t.Fatalf("push: %d %s", r.status, r.body)
		return nil
	})
	// 3 when the gateway had measured the cluster before its first push; 4
	// when its first measurement (0) came after that push and reset the
	// estimate, forgetting it: one reconcile interval's pushes at most.
	if accepted < 3 || accepted > 4 {
		t.Fatalf("%d pushes of 100 bytes were accepted under a 250-byte cap", accepted)
	}
	if got := retained(); got != 0 {
		t.Fatalf("the broker already reports %v retained bytes; the test needs its lag", got)
	}
	// The broker's figure arrives: still over the cap, still blocked.
	broker.RunRetainedBytesLane()
	if got := retained(); got != float64(102*accepted) { // the payload is the JSON string, quotes included
		t.Fatalf("broker reports %v retained bytes after its lane, want %d", got, 102*accepted)
	}
	time.Sleep(time.Second)
	assertRefusal(t, push(), http.StatusForbidden, "storage_quota_exceeded")
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{}')`, full.id)
	eventually(t, 10*time.Second, func() error {
		if r := push(); r.status != http.StatusCreated {
			return fmt.Errorf("push after clearing the cap: %d %s", r.status, r.body)
		}
		return nil
	})
}

// TestCarveOutNeedsTheBrokersGrant: on a tenancy broker a Kafka offset
// commit (a KV batch inside the reserved key space) answers 403
// feature_gated until the operator grants the cluster's tenant KV on the
// broker. The gateway relays the broker's refusal as it is and bills no
// messages for it; once granted, the batch is served and billed.
func TestCarveOutNeedsTheBrokersGrant(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "grant-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("grant-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("grant"), "grant", cell)
	_, key := cp.key(cl.id)
	port := freePort(t)
	startMeteredGateway(t, port)
	c := client(port)
	commit := `[{"ns":"queen-kafka","op":"put","key":"qk:g/t/0","value":{"offset":7}},` +
		`{"ns":"queen-kafka","op":"put","key":"qk:g/t/1","value":{"offset":9}},` +
		`{"ns":"queen-kafka","op":"put","key":"qk:g/t/2","value":{"offset":3}}]`
	kv := func() response {
		return do(t, c, "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/kv", cl.slug, port), key, commit)
	}
	r := kv()
	if r.status != http.StatusForbidden || r.json(t)["error"] != "feature_gated" {
		t.Fatalf("offset commit without the broker's grant: %d %s, want its 403 feature_gated", r.status, r.body)
	}
	broker.SetGrant(cl.brokerTenant, fakebroker.GrantKV, true)
	if r := kv(); r.status != http.StatusOK || strings.Count(string(r.body), `"applied":true`) != 3 {
		t.Fatalf("offset commit with the grant: %d %s", r.status, r.body)
	}
	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "read"); reqs != 2 || msgs != 3 {
		t.Fatalf("usage_minutes read: %d requests, %d messages; want 2 (one refused by the broker) and 3", reqs, msgs)
	}
}

// TestRaftCellConditionsReachTheClient: a raft-storage cell without a
// leader answers 503 with Retry-After, one with a full disk 507, in its
// {"error","code"} envelope. The client gets both as the cell sent them
// (the Retry-After included), and neither bills a message.
func TestRaftCellConditionsReachTheClient(t *testing.T) {
	s := newIsolationSetup(t, "rust6", rustCell)
	startGateway(t, s.caddyfile(t, ""))
	push := func() response {
		return do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"q","payload":1}]}`)
	}
	for _, c := range []struct {
		status     int
		code       string
		retryAfter string
	}{{fakebroker.RustNoLeader, "no_leader", "1"}, {fakebroker.RustDiskFull, "disk_full", ""}} {
		s.broker.SetRustCellCondition(c.status)
		r := push()
		if r.status != c.status || r.json(t)["code"] != c.code || r.header.Get("Retry-After") != c.retryAfter {
			t.Fatalf("push under %d: %d Retry-After %q %s", c.status, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	s.broker.SetRustCellCondition(0)
	if r := push(); r.status != http.StatusCreated {
		t.Fatalf("push after the conditions: %d %s", r.status, r.body)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if reqs, msgs := s.cp.usageOf(s.acme.id, "push"); reqs != 3 || msgs != 1 {
		t.Fatalf("push usage %d requests %d messages, want 3 and only the stored 1", reqs, msgs)
	}
}
