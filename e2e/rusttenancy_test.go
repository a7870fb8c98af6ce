package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
)

// rustCell is the fake broker following the Rust brokers' tenancy
// contract: a request without x-queen-tenant is served, as the default
// tenant, never refused.
var rustCell = fakebroker.Options{Tenancy: fakebroker.TenancyRust}

// TestProbeOnRustTenancyCell: a broker that answers a missing queue 404
// (both Rust brokers) is found scoped and serves both clusters, each in
// its own tenant; the same broker without tenancy (0.15.1's answers) is
// found unscoped and serves only its keeper.
func TestProbeOnRustTenancyCell(t *testing.T) {
	t.Run("scoped", func(t *testing.T) {
		s := newIsolationSetup(t, "rust1", rustCell)
		startGateway(t, s.caddyfile(t, ""))
		r := do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"payroll","payload":{"salary":"acme-secret"}}]}`)
		if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"queued"`) {
			t.Fatalf("acme push: %d %s", r.status, r.body)
		}
		list := do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, "")
		if list.status != http.StatusOK || strings.Contains(string(list.body), "payroll") {
			t.Fatalf("globex queue list: %d %s", list.status, list.body)
		}
		s.awaitVerdict(t, "scoped")
		if n := clientRequests(s.broker, s.globex); n != 1 {
			t.Fatalf("%d of globex's requests reached the cell, want 1", n)
		}
	})
	t.Run("unscoped", func(t *testing.T) {
		opts := rustCell
		opts.IgnoreTenant = true
		s := newIsolationSetup(t, "rust2", opts)
		startGateway(t, s.caddyfile(t, ""))
		assertRefusal(t, do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""),
			http.StatusServiceUnavailable, "cell_not_isolated")
		s.awaitVerdict(t, "unscoped")
		if r := do(t, s.c, "GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, ""); r.status != http.StatusOK {
			t.Fatalf("acme (the keeper): %d %s", r.status, r.body)
		}
	})
}

// TestEveryForwardedRequestLandsInTheClusterTenant: on a real tenancy
// broker a request that lost its tenant header is not refused, it lands
// in the shared default tenant. Whatever Connection tokens, trailers or
// forged tenant headers a client sends, on every route class, every
// request the cell receives from the gateway lands in the cluster's own
// tenant, and nothing at all (the probe included) lands in the default one.
func TestEveryForwardedRequestLandsInTheClusterTenant(t *testing.T) {
	s := newIsolationSetup(t, "rust3", rustCell)
	startGateway(t, s.caddyfile(t, ""))
	const forged = "11111111-2222-4333-8444-555555555555"
	host := s.acme.slug + ".eu1.example.test"
	raw := func(method, path, extra, body string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s\r\n%s",
			method, path, host, s.acmeKey, extra, body)
	}
	get := func(path, extra string) string { return raw("GET", path, extra, "") }
	push := `{"items":[{"queue":"hop","payload":{"n":1}}]}`
	cfg := `{"queue":"hop","options":{"leaseTime":30}}`
	requests := []string{
		raw("POST", "/api/v1/configure", "Content-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(cfg))+"\r\nConnection: x-queen-tenant\r\n", cfg),
		get("/api/v1/resources/queues", "Connection: x-queen-tenant, authorization\r\n"),
		get("/api/v1/resources/queues/hop", "Connection: X-Queen-Tenant\r\nConnection: keep-alive, close\r\n"),
		get("/api/v1/resources/queues", "Connection: \t x-queen-tenant \t,, ,te\r\nTE: trailers\r\n"),
		get("/api/v1/resources/queues", "Proxy-Connection: x-queen-tenant\r\nKeep-Alive: timeout=5\r\n"),
		get("/api/v1/resources/queues", "Connection: Upgrade, x-queen-tenant\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
		get("/api/v1/messages?queue=hop", "X-Queen-Tenant: "+forged+"\r\nx-queen-tenant: "+forged+"\r\n"),
		get("/api/v1/consumer-groups", "X-Queen-Tenant: \r\nConnection: x-queen-tenant\r\n"),
		get("/api/v1/pop/queue/hop?autoAck=true", "X_Queen_Tenant: "+forged+"\r\nConnection: x-queen-tenant\r\n"),
		raw("POST", "/api/v1/push", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nTrailer: X-Queen-Tenant\r\nConnection: x-queen-tenant\r\n",
			chunked(push, "X-Queen-Tenant: "+forged+"\r\n")),
		raw("POST", "/api/v1/push", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
			chunked(push, "X-Queen-Tenant: \r\n")),
		raw("POST", "/api/v1/transaction", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nTrailer: X-Queen-Tenant\r\nTE: trailers\r\nConnection: te, x-queen-tenant\r\n",
			chunked(`{"operations":[{"type":"push","items":[{"queue":"hop","payload":{"n":2}}]}]}`, "X-Queen-Tenant: "+forged+"\r\n")),
		get("/api/v1/pop/queue/hop?batch=5", "Connection: x-queen-tenant\r\n"),
	}
	before := len(s.broker.Requests())
	answered := 0
	for _, req := range requests {
		resp, body := sendRaw(t, s.port, req)
		if resp == nil {
			t.Fatalf("no response to %q", req)
		}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			t.Fatalf("%q: %d %s", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode, body)
		}
		if resp.Header.Get("X-Queen-Request-Id") != "" && resp.StatusCode != http.StatusBadRequest {
			answered++
		}
	}
	all := s.broker.Requests()
	fromClients := 0
	for _, r := range all {
		if r.Landed == fakebroker.DefaultTenant || r.Landed == "" {
			t.Errorf("a request landed in %q (the default tenant, or refused as malformed): %s %s headers %v", r.Landed, r.Method, r.Path, r.Header)
		}
	}
	for _, r := range all[before:] {
		if r.Header.Get("X-Queen-Request-Id") == "" {
			continue // the gateway's own isolation probe, under its random tenants
		}
		fromClients++
		if r.Landed != s.acme.brokerTenant {
			t.Errorf("%s %s landed in %q, want the cluster's %s", r.Method, r.Path, r.Landed, s.acme.brokerTenant)
		}
		if vals := r.Header.Values(fakebroker.TenantHeader); len(vals) != 1 || vals[0] != s.acme.brokerTenant {
			t.Errorf("%s %s carried x-queen-tenant %q", r.Method, r.Path, vals)
		}
	}
	if fromClients < len(requests)-2 || answered < len(requests)-2 {
		t.Fatalf("only %d of %d requests reached the cell (%d answered by it)", fromClients, len(requests), answered)
	}
	if n := s.broker.TenantQueues(forged); n != 0 {
		t.Fatalf("the forged tenant holds %d queues", n)
	}
	if n := s.broker.TenantQueues(s.acme.brokerTenant); n != 1 {
		t.Fatalf("the cluster's tenant holds %d queues, want its one", n)
	}
}

// TestCallerTargetedAndBrokerIdentityRoutesNeverReachTheCell: on a broker
// whose purge and grant routes act on whichever tenant the caller names,
// and which answers /auth/me with its own operator identity, none of them
// is forwarded, for any cluster, and the other tenant keeps its queues and
// gets no grant.
func TestCallerTargetedAndBrokerIdentityRoutesNeverReachTheCell(t *testing.T) {
	s := newIsolationSetup(t, "rust4", rustCell)
	startGateway(t, s.caddyfile(t, ""))
	if r := do(t, s.c, "POST", s.url(s.globex, "/api/v1/configure"), s.gKey, `{"queue":"precious","options":{}}`); r.status != http.StatusOK {
		t.Fatalf("globex configure: %d %s", r.status, r.body)
	}
	victim := s.globex.brokerTenant
	before := len(forwarded(s.broker))
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/api/v1/resources/tenant?tenant=" + victim, ""},
		{"DELETE", "/api/v1/resources/tenant", `{"tenant":"` + victim + `"}`},
		{"GET", "/api/v1/resources/tenant?tenant=" + victim, ""},
		{"POST", "/api/v1/resources/quota", `{"tenantId":"` + s.acme.brokerTenant + `","kind":"kv"}`},
		{"POST", "/api/v1/resources/quota", `{"kind":"ephemeral"}`},
		{"POST", "/api/v1/system/quota", `{"tenant":"` + s.acme.brokerTenant + `","kind":"kv"}`},
		{"POST", "/api/v1/system/quotas", `{"tenant":"` + s.acme.brokerTenant + `","kind":"streams"}`},
		{"GET", "/auth/me", ""},
		{"GET", "/auth/login", ""},
		{"HEAD", "/auth/me", ""},
		{"GET", "/raft/v1/local", ""},
		{"GET", "/api/v1/raft/status", ""},
		{"POST", "/api/v1/locks", `{"name":"l","owner":"o"}`},
	} {
		r := do(t, s.c, c.method, s.url(s.acme, c.path), s.acmeKey, c.body)
		if c.method == "HEAD" {
			if r.status != http.StatusNotFound {
				t.Errorf("HEAD %s: %d", c.path, r.status)
			}
			continue
		}
		assertRefusal(t, r, http.StatusNotFound, "route_blocked")
		if strings.Contains(string(r.body), "operator") || strings.Contains(string(r.body), "rust4-cell") {
			t.Errorf("%s %s: the broker's identity leaked: %s", c.method, c.path, r.body)
		}
	}
	if n := len(forwarded(s.broker)) - before; n != 0 {
		t.Fatalf("%d of the blocked requests reached the cell", n)
	}
	if n := s.broker.TenantQueues(victim); n != 1 {
		t.Fatalf("globex's tenant holds %d queues after the attempts, want 1", n)
	}
	for _, kind := range []string{fakebroker.GrantKV, fakebroker.GrantEphemeral, fakebroker.GrantStreams} {
		if s.broker.Granted(s.acme.brokerTenant, kind) {
			t.Fatalf("acme granted itself %s", kind)
		}
	}
}

// TestTenantCannotReadCellWideStatus: a Rust broker's status and worker
// metrics answer for the whole cell, every tenant's queues, whoever asks
// (the fake shows it below, so this test fails if the gateway ever lets a
// tenant reach them). Through the gateway, a tenant's key reads no other
// tenant's queue from them, however the path is spelled.
func TestTenantCannotReadCellWideStatus(t *testing.T) {
	s := newIsolationSetup(t, "rustwide", rustCell)
	startGateway(t, s.caddyfile(t, ""))
	const secret = "globex-secret-queue"
	if r := do(t, s.c, "POST", s.url(s.globex, "/api/v1/push"), s.gKey, `{"items":[{"queue":"`+secret+`","payload":1}]}`); r.status != http.StatusCreated {
		t.Fatalf("globex push: %d %s", r.status, r.body)
	}

	// The cell itself gives acme's tenant globex's queue on these routes.
	for _, path := range []string{"/api/v1/status", "/api/v1/analytics/worker-metrics"} {
		req, _ := http.NewRequest("GET", s.broker.URL()+path, nil)
		req.Header.Set(fakebroker.TenantHeader, s.acme.brokerTenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), secret) {
			t.Fatalf("the cell's %s does not answer cell-wide, so this test proves nothing: %s", path, body)
		}
	}

	for _, path := range []string{
		"/api/v1/status", "/api/v1/status?queue=" + secret, "/api/v1/status/", "/api/v1/Status",
		"//api/v1/status", "/api/v1/./status", "/api/v1/status%2F", "/api/v1/%73tatus",
		"/api/v1/analytics/worker-metrics", "/api/v1/analytics/worker-metrics/", "/api/v1/analytics/worker-metrics?queue=" + secret,
		"/api/v1/analytics/system-metrics", "/api/v1/analytics/postgres-stats", "/api/v1/status/buffers",
		"/metrics", "/metrics/prometheus", "/status",
	} {
		r := do(t, s.c, "GET", s.url(s.acme, path), s.acmeKey, "")
		if strings.Contains(string(r.body), secret) {
			t.Errorf("acme read globex's queue through %s: %d %s", path, r.status, r.body)
		}
		if r.status == http.StatusOK && (path == "/api/v1/status" || path == "/api/v1/analytics/worker-metrics") {
			t.Errorf("%s answered a tenant 200: %s", path, r.body)
		}
	}
}
