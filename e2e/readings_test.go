package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// The tests in this file (long-poll query values, method and path case,
// cookie writes, cell internals) run through a real Caddy: what the
// gateway acts on is read exactly as the broker reads it, what it cannot
// read so is refused and never reaches the cell, and what the cell should
// not tell a tenant does not reach the tenant.

// readingsGateway starts a gateway (sessions on, the meter flushing every
// second) in front of one cluster on its own cell, and returns the
// cluster, an all-scopes key and the URL maker.
func readingsGateway(t *testing.T, cp *controlPlane, cellURL, slug, overrides string) (cluster, string, func(string) string, *http.Client) {
	t.Helper()
	cl := cp.cluster(cp.tenant(slug), slug, cp.cell("cell-"+slug, cellURL, ""))
	if overrides != "" {
		cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, $2::jsonb)`, cl.id, overrides)
	}
	_, key := cp.key(cl.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		session {
			hs256_secret %s
		}`, t.TempDir(), sessionHS256Test), ""))
	url := func(path string) string { return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path) }
	return cl, key, url, client(port)
}

// assertNothingForwarded fails when any client request reached the cell.
func assertNothingForwarded(t *testing.T, b *fakebroker.Broker, what string) {
	t.Helper()
	if reqs := forwarded(b); len(reqs) != 0 {
		t.Fatalf("%s reached the cell: %s %s?%s", what, reqs[0].Method, reqs[0].Path, reqs[0].RawQuery)
	}
}

// TestLongPollsReadLikeTheBroker: the broker parks a pop for
// wait=1, await=true or x=wait=true, so each takes a parked slot; on a
// cluster capped at two, six concurrent pops park two and refuse four.
func TestLongPollsReadLikeTheBroker(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-lp", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cl, key, url, c := readingsGateway(t, cp, broker.URL(), "lp-alpha", `{"max_parked_pops": 2, "max_req_per_sec": null}`)

	queries := []string{"wait=1", "await=true", "x=wait=true", "wait=true", "wait=%74rue", "batch=1&wait=1"}
	results := make(chan response, len(queries))
	var wg sync.WaitGroup
	for _, q := range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- do(t, c, "GET", url("/api/v1/pop/queue/idle?timeout=3000&"+q), key, "")
		}()
	}
	eventually(t, 5*time.Second, func() error {
		if n := broker.Parked(); n != 2 {
			return fmt.Errorf("%d pops parked at the broker, want 2 (%d requests)", n, len(broker.Requests()))
		}
		return nil
	})

	// While both slots are held: "await=false&wait=true" is no long poll
	// (the broker's first "wait=" is inside "await=false"), so it needs no
	// slot and the broker answers it at once.
	start := time.Now()
	r := do(t, c, "GET", url("/api/v1/pop/queue/idle?await=false&wait=true"), key, "")
	if r.status != 200 || !strings.Contains(string(r.body), "no_available_partition") || time.Since(start) > 2*time.Second {
		t.Fatalf("await=false&wait=true: %d %s after %v; want the broker's immediate empty answer", r.status, r.body, time.Since(start))
	}
	// A value the broker could decode more than one way is refused.
	broker.ResetRequests()
	for _, q := range []string{"wait=%7", "wait=tru%zz", "autoAck=%+1", "wait=true&timeout=1%"} {
		r := do(t, c, "GET", url("/api/v1/pop/queue/idle?"+q), key, "")
		assertRefusal(t, r, 400, "bad_request")
		if m := r.json(t); !strings.Contains(m["error"].(string), "not followed by two hex digits") {
			t.Fatalf("%s: the message does not say what is wrong: %s", q, r.body)
		}
	}
	assertNothingForwarded(t, broker, "an ambiguous query")

	wg.Wait()
	close(results)
	parked, refused := 0, 0
	for r := range results {
		switch r.status {
		case 200:
			parked++
		case 429:
			assertRefusal(t, r, 429, "rate_limited")
			refused++
		default:
			t.Errorf("pop answered %d %s", r.status, r.body)
		}
	}
	if parked != 2 || refused != 4 {
		t.Fatalf("%d pops parked and %d refused, want 2 and 4", parked, refused)
	}

	// Only what reached the cell is billed: two long polls and the one
	// plain pop; no refusal.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if reqs, _ := cp.usageOf(cl.id, "delivery"); reqs != 3 {
		t.Fatalf("%d pops billed, want 3 (the 4 refused and the 4 ambiguous ones must not be)", reqs)
	}
}

// TestMethodAndPathCase: "post" and "/API/V1/PUSH" are not
// what the classifier reads, so they are refused and never forwarded.
func TestMethodAndPathCase(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-case", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cl, key, url, c := readingsGateway(t, cp, broker.URL(), "case-alpha", `{"max_retention_seconds": 3600}`)
	configure := `{"queue":"orders","options":{"retentionSeconds":999999}}`
	push := `{"items":[{"queue":"orders","payload":1}]}`

	broker.ResetRequests()
	cases := []struct{ method, path, body, says string }{
		{"post", "/api/v1/configure", configure, "upper case"},
		{"Post", "/api/v1/push", push, "upper case"},
		{"POST", "/API/V1/PUSH", push, "lower case"},
		{"POST", "/api/v1/Push", push, "lower case"},
		{"GET", "/api/v1/POP/queue/orders", "", "lower case"},
		{"DELETE", "/API/v1/resources/queues/orders", "", "lower case"},
	}
	for _, tc := range cases {
		r := do(t, c, tc.method, url(tc.path), key, tc.body)
		assertRefusal(t, r, 400, "bad_request")
		if m := r.json(t); !strings.Contains(m["error"].(string), tc.says) {
			t.Fatalf("%s %s: the message does not say what is wrong: %s", tc.method, tc.path, r.body)
		}
	}
	assertNothingForwarded(t, broker, "a request in the wrong case")

	// The exact spelling gets the enforcement the broker's reading needs.
	assertRefusal(t, do(t, c, "POST", url("/api/v1/configure"), key, configure), 403, "quota_exceeded")
	if r := do(t, c, "POST", url("/api/v1/push"), key, push); r.status != 200 {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	if reqs := forwarded(broker); len(reqs) != 1 || reqs[0].Path != "/api/v1/push" {
		t.Fatalf("the cell saw %+v, want the one push", reqs)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if reqs, _ := cp.usageOf(cl.id, "configure"); reqs != 0 {
		t.Fatalf("%d refused configures billed", reqs)
	}
	if reqs, msgs := cp.usageOf(cl.id, "push"); reqs != 1 || msgs != 1 {
		t.Fatalf("push usage %d/%d, want the one forwarded push", reqs, msgs)
	}
}

// TestCookieWritesNeedTheirOwnSite: a session cookie carried
// by a request another site made cannot push, delete or consume; it gets
// the console's 403 csrf_rejected and nothing reaches the cell.
func TestCookieWritesNeedTheirOwnSite(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-csrf", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cl, _, url, c := readingsGateway(t, cp, broker.URL(), "csrf-alpha", "")
	tenantID := cp.scalar(`SELECT tenant_id::text FROM queen_proxy.clusters WHERE id = $1::uuid`, cl.id)
	userID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, 'admin@csrf.test', NULL, 'local')::text`, tenantID)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'admin@csrf.test', 'admin')`, cl.id)
	keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte(sessionHS256Test)})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := keys.Mint(userID, "", "admin", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	own := strings.TrimSuffix(url("/"), "/")
	withCookie := func(method, path, body string, header map[string]string) response {
		t.Helper()
		req, err := http.NewRequest(method, url(path), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Cookie", "queen_session="+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResponse(resp)
	}
	push := `{"items":[{"queue":"orders","payload":{"n":1}}]}`
	evil := map[string]string{"Origin": "http://evil.example"}

	broker.ResetRequests()
	for _, tc := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"POST", "/api/v1/push", push, evil},
		{"POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"orders","payload":1}]}]}`, evil},
		{"POST", "/api/v1/configure", `{"queue":"orders","options":{}}`, evil},
		{"DELETE", "/api/v1/resources/queues/orders", "", evil},
		{"POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"p"}`, map[string]string{"Referer": "http://evil.example/x"}},
		{"GET", "/api/v1/pop/queue/orders?autoAck=true", "", evil},
		{"GET", "/api/v1/pop/queue/orders?batch=10&autoAck=1", "", evil},
		{"GET", "/api/v1/pop/queue/orders?batch=10", "", evil}, // leases: hides the messages from the cluster's consumers
		{"HEAD", "/api/v1/pop/queue/orders?autoAck=true", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"POST", "/api/v1/push", push, nil}, // a cookie and no browser header at all
	} {
		r := withCookie(tc.method, tc.path, tc.body, tc.header)
		if tc.method == "HEAD" {
			if r.status != 403 {
				t.Fatalf("HEAD autoAck pop from another site: %d", r.status)
			}
			continue
		}
		assertRefusal(t, r, 403, "csrf_rejected")
	}
	assertNothingForwarded(t, broker, "a cross-site cookie write")

	// The same writes from the cluster's own origin go through, as do
	// cross-site reads.
	if r := withCookie("POST", "/api/v1/push", push, map[string]string{"Origin": own}); r.status != 200 {
		t.Fatalf("same-origin cookie push: %d %s", r.status, r.body)
	}
	if r := withCookie("GET", "/api/v1/pop/queue/orders?autoAck=true", "", map[string]string{"Sec-Fetch-Site": "same-origin"}); r.status != 200 {
		t.Fatalf("same-origin autoAck pop: %d %s", r.status, r.body)
	}
	if r := withCookie("GET", "/api/v1/resources/queues", "", evil); r.status != 200 {
		t.Fatalf("cross-site cookie read: %d %s", r.status, r.body)
	}
	if reqs := forwarded(broker); len(reqs) != 3 {
		t.Fatalf("the cell saw %d requests, want the 3 allowed ones", len(reqs))
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if reqs, msgs := cp.usageOf(cl.id, "push"); reqs != 1 || msgs != 1 {
		t.Fatalf("push usage %d/%d, want only the same-origin push", reqs, msgs)
	}
	if reqs, _ := cp.usageOf(cl.id, "txn"); reqs != 0 {
		t.Fatalf("%d refused transactions billed", reqs)
	}
}

// TestCellInternalsWithheld: broker answers whose error text
// carries SQL, PL/pgSQL function names or connection details reach the
// tenant as the gateway's envelope with the cell's status and the request
// id; normal answers, payloads that merely look like SQL included, are
// relayed byte for byte.
func TestCellInternalsWithheld(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-leak", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))

	// A second cell whose broker fails with a 500 carrying SQL.
	var stubSeen atomic.Int64
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Queen-Request-Id") != "" && r.URL.Path == "/api/v1/resources/queues" {
			stubSeen.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":"ERROR:  relation \"queen.queues\" does not exist\nLINE 1: SELECT q.name FROM queen.queues q\n"}`)
	}))
	defer stub.Close()
	stubCluster := cp.cluster(cp.tenant("leak-beta"), "leak-beta", cp.cell("cell-leak-stub", stub.URL, ""))
	_, stubKey := cp.key(stubCluster.id)
	_, key, url, c := readingsGateway(t, cp, broker.URL(), "leak-alpha", "")
	stubURL := strings.Replace(url("/api/v1/resources/queues"), "leak-alpha", "leak-beta", 1)

	withheld := func(r response, status int, what string) {
		t.Helper()
		if r.status != status {
			t.Fatalf("%s: %d %s, want %d", what, r.status, r.body, status)
		}
		m := r.json(t)
		if m["code"] != "internal_error" || m["request_id"] != r.header.Get("X-Queen-Request-Id") || m["request_id"] == "" ||
			!strings.Contains(m["error"].(string), "withheld") {
			t.Fatalf("%s: %s is not the envelope", what, r.body)
		}
		for _, leak := range []string{"ERROR:", "PL/pgSQL", "SELECT", "queen."} {
			if strings.Contains(string(r.body), leak) {
				t.Fatalf("%s: %q reached the tenant: %s", what, leak, r.body)
			}
		}
	}

	// 200 with PostgreSQL's error (fixture C65): an ack naming a partition
	// id that is no UUID.
	broker.ResetRequests()
	withheld(do(t, c, "POST", url("/api/v1/ack"), key, `{"transactionId":"t-1","partitionId":"p1","status":"completed"}`), 200, "ack with a bad partition id")
	// 200 with the SQL statement: a pop with a negative batch.
	withheld(do(t, c, "GET", url("/api/v1/pop/queue/orders?batch=-1"), key, ""), 200, "pop with a negative batch")
	if n := len(forwarded(broker)); n != 2 {
		t.Fatalf("the cell saw %d requests, want both (the answer is withheld, the request is not refused)", n)
	}
	// 500 with SQL, from the other cell.
	withheld(do(t, c, "GET", stubURL, stubKey, ""), 500, "a cell failing with SQL in a 500")
	if stubSeen.Load() != 1 {
		t.Fatalf("the failing cell saw %d requests", stubSeen.Load())
	}

	// Normal answers pass unchanged, SQL-looking payloads included, and so
	// do the broker's own messages that tell the client what was wrong.
	payload := `{"note":"ERROR:  SELECT * FROM queen.messages -- PL/pgSQL"}`
	if r := do(t, c, "POST", url("/api/v1/push"), key, `{"items":[{"queue":"orders","payload":`+payload+`}]}`); r.status != 200 {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	r := do(t, c, "GET", url("/api/v1/pop/queue/orders?autoAck=true"), key, "")
	var popped struct {
		Messages []struct{ Data json.RawMessage }
	}
	if err := json.Unmarshal(r.body, &popped); r.status != 200 || err != nil || len(popped.Messages) != 1 ||
		!strings.Contains(string(popped.Messages[0].Data), "PL/pgSQL") {
		t.Fatalf("pop of an SQL-looking payload: %d %s", r.status, r.body)
	}
	r = do(t, c, "POST", url("/api/v1/ack"), key, `{"transactionId":"t-1","status":"completed"}`)
	if r.status != 400 || !strings.Contains(string(r.body), "partitionId is required") {
		t.Fatalf("the broker's own validation message: %d %s", r.status, r.body)
	}
	r = do(t, c, "GET", url("/api/v1/pop/queue/orders"), key, "")
	if r.status != 200 || !strings.Contains(string(r.body), "no_available_partition") {
		t.Fatalf("empty pop: %d %s", r.status, r.body)
	}
}
