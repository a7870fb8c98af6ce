package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/buildversion"
	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// watchedBody is a request body that records whether anything read it.
type watchedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

// One request per route class (and every mixed batch), each with a body
// whose reading would matter.
var routesWithBodies = []struct{ method, target, body string }{
	{"POST", "/api/v1/push", `{"items":[{"queue":"q","payload":1}]}`},
	{"POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"q","payload":1}]}]}`},
	{"POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"p","status":"completed"}`},
	{"POST", "/api/v1/configure", `{"queue":"q"}`},
	{"POST", "/api/v1/dlq/7/replay", `{"queue":"q"}`},
	{"POST", "/api/v1/kv", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":1}]`},
	{"POST", "/api/v1/kv", `[{"ns":"app","op":"put","key":"k","value":1}]`},
	{"PUT", "/api/v1/kv/ns/k", `{"value":1}`},
	{"POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"q","key":"r"}]}`},
	{"POST", "/streams/v1/cycle", `{"partition_id":"p","push_items":[{"queue":"s","payload":1}]}`},
	{"POST", "/api/v1/ephemeral/push", `{"items":[{"queue":"e","payload":1}]}`},
	{"POST", "/api/v1/traces", `{"traces":[]}`},
	{"POST", "/api/v1/system/maintenance", `{"enabled":true}`},
	{"GET", "/api/v1/resources/queues", `{"q":1}`},
	{"GET", "/api/v1/pop/queue/q?wait=true", `{"q":1}`},
	{"POST", "/api/v1/locks", `{"q":1}`},
}

// Nothing reads a request body before the credential is verified and the
// failure guard is passed, on any route, cluster state or listener: an
// unauthenticated caller must not make the gateway spend a body's worth
// of reading.
func TestNoBodyIsReadBeforeAuthentication(t *testing.T) {
	normal := testGateway(t)
	shielded := testGateway(t)
	shielded.Shield = true
	guarded := testGateway(t)
	guarded.failures = harden.NewFailureGuard(harden.FailureGuardConfig{Rate: 0.001, Burst: 1})
	for i := range 2 {
		w, _ := guarded.do(t, call{method: "POST", host: "pro.eu1.example.com", target: "/api/v1/ack", auth: fmt.Sprintf("qk_live_wrong%d", i)}, nil)
		if w.Code != 401 && w.Code != 429 {
			t.Fatalf("bad key %d: %d", i, w.Code)
		}
	}
	credentials := map[string]string{
		"no credential":       "",
		"unknown key":         "qk_live_nosuchkey",
		"forged session":      "eyJhbGciOiJIUzI1NiJ9.e30.x",
		"implausible key":     "k",
		"another cluster key": "qk_live_held", // authenticates, so its body may be read: not on acme
	}
	gateways := map[string]*Gateway{"normal": normal, "shielded": shielded, "guard spent": guarded}
	for gname, g := range gateways {
		for _, host := range []string{"acme", "pro", "held", "gone"} {
			for cname, cred := range credentials {
				if cname == "another cluster key" && host == "held" {
					continue
				}
				for _, rt := range routesWithBodies {
					name := fmt.Sprintf("%s/%s/%s/%s %s", gname, host, cname, rt.method, rt.target)
					body := &watchedBody{r: strings.NewReader(rt.body)}
					w, seen := g.do(t, call{method: rt.method, host: host + ".eu1.example.com", target: rt.target,
						auth: cred, bodyReader: body}, nil)
					if w.Code < 400 || seen.called {
						t.Fatalf("%s: answered %d, forwarded %v", name, w.Code, seen.called)
					}
					if body.read.Load() {
						t.Fatalf("%s: the body was read before the credential was verified (answer %d %s)", name, w.Code, w.Body)
					}
				}
			}
		}
	}

	// The watch sees reads: an authenticated KV batch is read (and
	// forwarded).
	body := &watchedBody{r: strings.NewReader(`[{"ns":"queen-kafka","op":"put","key":"qk:a","value":1}]`)}
	w, seen := normal.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/kv", auth: "qk_live_acme", bodyReader: body}, nil)
	expect(t, w, seen, 200, "")
	if !body.read.Load() {
		t.Fatal("an authenticated batch was forwarded without the gateway reading it")
	}
}

// Authorization comes after the reclassification it depends on: a
// carve-out batch needs the consume scope (a produce-only key may write
// an ordinary KV batch, not facade state), needs no kv feature, and
// passes a push block.
func TestCarveOutAuthorizedAfterReclassification(t *testing.T) {
	g := testGateway(t)
	carve := `{"operations":[{"ns":"queen-kafka","op":"put","key":"qk:g/t/0","value":{"offset":7}}]}`
	plain := `[{"ns":"app","op":"put","key":"k","value":1}]`
	// U+0000 is refused (400) by the step that refuses what the broker
	// cannot store, after the carve-out, the plan's flags and the push
	// block have judged the batch by its operations.
	carveNUL := `[{"ns":"queen-kafka","op":"put","key":"qk:g/t/0","value":"\u0000"}]`
	plainNUL := `[{"ns":"app","op":"put","key":"k","value":"\u0000"}]`
	readNUL := `{"x":"\u0000","operations":[{"ns":"app","op":"get","key":"k"}]}`
	for _, tc := range []struct {
		host, key, body string
		status          int
		code            string
	}{
		{"pro", "qk_live_produce", plain, 200, ""},
		{"pro", "qk_live_produce", carve, 403, "forbidden"},
		{"pro", "qk_live_consume", carve, 200, ""},
		{"pro", "qk_live_read", carve, 403, "forbidden"},
		{"acme", "qk_live_acme", plain, 403, "feature_gated"},
		{"acme", "qk_live_acme", carve, 200, ""},
		{"held", "qk_live_held", carve, 200, ""},
		{"held", "qk_live_held", plain, 403, "push_blocked"},
		{"acme", "qk_live_acme", carveNUL, 400, "bad_request"},
		{"acme", "qk_live_acme", plainNUL, 403, "feature_gated"},
		{"held", "qk_live_held", carveNUL, 400, "bad_request"},
		{"held", "qk_live_held", plainNUL, 403, "push_blocked"},
		{"held", "qk_live_held", readNUL, 400, "bad_request"},
		{"pro", "qk_live_consume", carveNUL, 400, "bad_request"},
	} {
		w, seen := g.do(t, call{method: "POST", host: tc.host + ".eu1.example.com", target: "/api/v1/kv", auth: tc.key, body: tc.body}, nil)
		if w.Code != tc.status {
			t.Fatalf("%s with %s, %s: %d %s, want %d", tc.host, tc.key, tc.body, w.Code, w.Body, tc.status)
		}
		expect(t, w, seen, tc.status, tc.code)
	}
}

// The carve-out is bounded like any other write: its body, each value
// against the plan's payload cap, its operations against the batch cap.
func TestCarveOutIsBounded(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	g.MaxBodyBytes = 4 << 20
	pro := env.src.clusters["pro"]
	pro.Limits.MaxPayloadBytes = 64
	pro.Limits.MaxBatchItems = 3
	ops := func(n int, value string) string {
		var sb strings.Builder
		sb.WriteByte('[')
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"ns":"queen-kafka","op":"put","key":"qk:%d","value":%s}`, i, value)
		}
		sb.WriteByte(']')
		return sb.String()
	}
	big := `[{"ns":"queen-kafka","op":"getMany","keys":["qk:` + strings.Repeat("k", limits.MaxCarveOutBodyBytes) + `"]}]`
	cases := []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"within the bounds", ops(3, `"`+strings.Repeat("v", 62)+`"`), 200, "", ""},
		{"a value over the payload cap", ops(2, `"`+strings.Repeat("v", 63)+`"`), 413, "payload_too_large",
			"operation 0: value 65 bytes exceeds max_payload_bytes (64)"},
		{"more operations than the batch cap", ops(4, "1"), 413, "payload_too_large",
			"batch of 4 operations exceeds max_batch_items (3)"},
		{"a body over the carve-out cap", big, 413, "payload_too_large", fmt.Sprintf(
			"a reserved key space batch of %d bytes exceeds its cap of %d bytes", len(big), limits.MaxCarveOutBodyBytes)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, call{method: "POST", host: "pro.eu1.example.com", target: "/api/v1/kv", auth: "qk_live_consume", body: tc.body}, nil)
			expect(t, w, seen, tc.status, tc.code)
			if tc.msg != "" {
				var env map[string]string
				_ = json.Unmarshal(w.Body.Bytes(), &env)
				if env["error"] != tc.msg {
					t.Fatalf("message %q, want %q", env["error"], tc.msg)
				}
			}
		})
	}
	// The caps are the carve-out's: an ordinary KV batch is not
	// reclassified, so these bounds do not name it.
	st := &requestState{}
	if carveOutMsgs(st, 200) != 0 {
		t.Fatal("a request that is not a carve-out billed operations")
	}
	st.carveOutOps = 5
	if carveOutMsgs(st, 200) != 5 || carveOutMsgs(st, 400) != 0 || carveOutMsgs(st, 502) != 0 {
		t.Fatal("a carve-out bills its operations when the broker took it, and nothing else")
	}
}

// cutBody fails after its first bytes, as a malformed chunked body does
// to the server's reader.
type cutBody struct {
	head string
	err  error
	done bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if !b.done {
		b.done = true
		return copy(p, b.head), nil
	}
	return 0, b.err
}

// A body that cannot be read is 400, not 413 (the client did not send too
// much, it sent something broken); a body over the cap stays 413.
func TestUnreadableBodyIsBadRequest(t *testing.T) {
	g := testGateway(t)
	for _, err := range []error{errors.New("malformed chunked encoding"), io.ErrUnexpectedEOF} {
		w, seen := g.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/push", auth: "qk_live_acme",
			bodyReader: &cutBody{head: `{"items":[`, err: err}}, nil)
		expect(t, w, seen, 400, "bad_request")
	}
	g.MaxBodyBytes = 16
	w, seen := g.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/ack", auth: "qk_live_acme",
		bodyReader: io.MultiReader(strings.NewReader(strings.Repeat(" ", 64)))}, nil)
	expect(t, w, seen, 413, "payload_too_large")
}

// One tenant's bad keys from an address do not lock out the valid
// credentials of anyone else from that address; and what
// the guard lets through cannot be used to test guesses.
func TestFailureGuardNeverRefusesAKnownCredential(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	// The clock stands still: no address earns a token back, and the
	// budget for looking up generated keys from addresses in backoff holds
	// its burst of 2 and no more.
	frozen := time.Now()
	g.failures = harden.NewFailureGuard(harden.FailureGuardConfig{Rate: 0.001, Burst: 3, UnguessableLookups: 1,
		Now: func() time.Time { return frozen }})
	const nat, other = "203.0.113.9:4000", "198.51.100.4:4000"
	req := func(host, key, remote string) int {
		w, _ := g.do(t, call{method: "GET", host: host + ".eu1.example.com", target: "/api/v1/resources/queues", auth: key, remote: remote}, nil)
		return w.Code
	}
	// Tenants behind one address authenticate...
	for _, k := range []struct{ host, key string }{{"acme", strongAcmeKey}, {"pro", "qk_live_read"}} {
		if got := req(k.host, k.key, nat); got != 200 {
			t.Fatalf("%s: %d", k.key, got)
		}
	}
	// ... until another tenant there spends the address's burst.
	for i := range 3 {
		if got := req("acme", fmt.Sprintf("qk_live_guess%d", i), nat); got != 401 {
			t.Fatalf("guess %d: %d", i, got)
		}
	}
	if got := req("acme", "qk_live_guess9", nat); got != 429 {
		t.Fatalf("the spent address was not refused: %d", got)
	}
	lookups := env.src.keyLookups.Load()
	// Both valid keys still serve there, hand-made or generated.
	if got := req("acme", strongAcmeKey, nat); got != 200 {
		t.Fatalf("a generated key known valid got %d from the spent address", got)
	}
	if got := req("pro", "qk_live_read", nat); got != 200 {
		t.Fatalf("a hand-made key known valid from this address got %d", got)
	}
	// A session token that verifies is valid whatever the address did.
	if got := req("pro", env.session(t, userViewer, ""), nat); got != 200 {
		t.Fatalf("a valid session got %d from the spent address", got)
	}
	// What could be a guess and is not known valid is refused without a
	// lookup: guessable keys, a forged token, a hand-made key never seen
	// to authenticate from here.
	for _, key := range []string{"qk_live_guess10", "eyJhbGciOiJIUzI1NiJ9.e30.x", "qk_live_admin"} {
		if got := req("pro", key, nat); got != 429 {
			t.Fatalf("%s from the spent address: %d, want 429", key, got)
		}
	}
	if n := env.src.keyLookups.Load() - lookups; n != 0 {
		t.Fatalf("the spent address caused %d key lookups beyond the known keys'", n)
	}
	// A hand-made key is known only for the address it authenticated
	// from: another spent address cannot test it, a generated key passes.
	for i := range 3 {
		req("acme", fmt.Sprintf("qk_live_other%d", i), other)
	}
	if got := req("pro", "qk_live_read", other); got != 429 {
		t.Fatalf("a hand-made key from an address it never authenticated from: %d, want 429", got)
	}
	if got := req("acme", strongAcmeKey, other); got != 200 {
		t.Fatalf("a generated key known valid got %d from another spent address", got)
	}
	// A generated key that authenticated through another site (another
	// handler, its own guard) is live in the shared key cache: known too.
	// A hand-made one is not, since the cache does not know its address.
	site2 := *g
	site2.failures = harden.NewFailureGuard(harden.FailureGuardConfig{})
	for _, key := range []string{strongProKey, "qk_live_admin"} {
		if w, _ := site2.do(t, call{method: "GET", host: "pro.eu1.example.com", target: "/api/v1/resources/queues", auth: key}, nil); w.Code != 200 {
			t.Fatalf("%s on the second site: %d", key, w.Code)
		}
	}
	if got := req("pro", strongProKey, nat); got != 200 {
		t.Fatalf("a generated key live in the cache got %d from the spent address", got)
	}
	if got := req("pro", "qk_live_admin", nat); got != 429 {
		t.Fatalf("a hand-made key that never authenticated from the spent address got %d, want 429", got)
	}
	// A generated key the gateway has never seen cannot be a guess: it is
	// looked up, within the gateway-wide budget: a valid one is served
	// from the spent address, an invalid one is refused by its lookup, and
	// once the budget is spent the next waits for the backoff.
	fresh := "qk_live_proCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"
	env.src.keys[tenancy.HashAPIKey(fresh)] = &tenancy.APIKey{ID: "k-fresh", Cluster: env.src.clusters["pro"], Scopes: tenancy.AllScopes}
	lookups = env.src.keyLookups.Load()
	if got := req("pro", fresh, nat); got != 200 {
		t.Fatalf("a valid generated key never seen got %d from the spent address, want 200", got)
	}
	if got := req("acme", "qk_live_acme"+strings.Repeat("Z", 39), nat); got != 401 {
		t.Fatalf("an unknown generated key within the budget got %d, want its lookup's 401", got)
	}
	if got := req("acme", "qk_live_acme"+strings.Repeat("Y", 39), nat); got != 429 {
		t.Fatalf("an unknown generated key past the budget got %d, want 429", got)
	}
	if n := env.src.keyLookups.Load() - lookups; n != 2 {
		t.Fatalf("the budget of 2 let %d lookups through", n)
	}
	if got := req("pro", fresh, other); got != 200 {
		t.Fatalf("the generated key, now known, got %d from another spent address", got)
	}
	// A revoked key that was known goes through the guard to its lookup,
	// and is refused there.
	delete(env.src.keys, tenancy.HashAPIKey(strongAcmeKey))
	g.app.backend.cache.InvalidateAll()
	if got := req("acme", strongAcmeKey, nat); got != 401 {
		t.Fatalf("a revoked key: %d, want 401", got)
	}
}

// /readyz detail, and the checks behind it, only on the probe listener or
// to loopback; a cached verdict to anyone else, so that nobody outside
// can learn the gateway's internals or make it run its checks at will.
func TestReadinessDetailOnlyForProbesAndLoopback(t *testing.T) {
	g := testGateway(t)
	var runs atomic.Int64
	g.app.extraReadiness = []ReadinessCheck{func(context.Context) (string, string, bool) {
		runs.Add(1)
		return "cell_isolation", "eu1-a: scoped; eu1-b: unscoped", true
	}}
	get := func(g *Gateway, remote string) (int, map[string]string) {
		c := call{target: "/readyz", host: "acme.eu1.example.com", remote: remote}
		w, seen := g.do(t, c, nil)
		if seen.called {
			t.Fatal("/readyz was forwarded")
		}
		var body map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("/readyz body %s", w.Body)
		}
		return w.Code, body
	}
	// Anonymous callers: the verdict alone (the test gateway has no
	// database, so it is not ready), checked once for many requests.
	for range 20 {
		status, body := get(g, "192.0.2.1:1234")
		if status != 503 || len(body) != 1 || body["status"] != "not ready" {
			t.Fatalf("anonymous /readyz: %d %v", status, body)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("20 anonymous /readyz ran the checks %d times, want once", n)
	}
	// Loopback: the detail, checked every time.
	for _, remote := range []string{"127.0.0.1:5000", "[::1]:5000"} {
		status, body := get(g, remote)
		if status != 503 || body["database"] != "not configured" || body["cell_isolation"] == "" || body["status"] != "not ready" ||
			body["version"] != buildversion.Read().String() || !strings.HasPrefix(body["version"], "github.com/queengate/queengate ") {
			t.Fatalf("loopback /readyz: %d %v", status, body)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("loopback /readyz ran the checks %d times in all, want 3", n)
	}
	// The probe listener: the detail to any caller.
	g.Probes = true
	if status, body := get(g, "192.0.2.1:1234"); status != 503 || body["cell_isolation"] == "" {
		t.Fatalf("probe listener /readyz: %d %v", status, body)
	}
}

// A ready verdict is cached too, and answered 200.
func TestCachedReadinessVerdict(t *testing.T) {
	c := new(readinessCache)
	var runs atomic.Int64
	checks := []ReadinessCheck{func(context.Context) (string, string, bool) {
		runs.Add(1)
		return "database", "ok", true
	}}
	for range 5 {
		if !c.verdict(context.Background(), checks) {
			t.Fatal("not ready")
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("checks ran %d times", runs.Load())
	}
	c.mu.Lock()
	c.at = c.at.Add(-2 * readinessCacheFor)
	c.mu.Unlock()
	c.verdict(context.Background(), checks)
	if runs.Load() != 2 {
		t.Fatalf("a stale verdict was not checked again: %d runs", runs.Load())
	}
	if readinessStatus(true) != http.StatusOK || readinessStatus(false) != http.StatusServiceUnavailable {
		t.Fatal("status")
	}
}
