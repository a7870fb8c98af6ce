package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/tenancy"
)

// One request per route class, on the pro cluster (every feature on).
var classRequests = map[string]call{
	"produce":    {method: "POST", target: "/api/v1/push", body: `{"items":[]}`},
	"consume":    {method: "GET", target: "/api/v1/pop/queue/orders"},
	"queueadmin": {method: "DELETE", target: "/api/v1/resources/queues/orders"},
	"read":       {method: "GET", target: "/api/v1/resources/queues"},
	"gated-read": {method: "GET", target: "/api/v1/kv/ns/key"},
	"gated-grow": {method: "PUT", target: "/api/v1/kv/ns/key", body: `1`},
	"operator":   {method: "GET", target: "/api/v1/status"},
}

// allowedFor lists, per credential, the classes it may call; every other
// class must be refused 403 forbidden (404 for operator routes).
func checkMatrix(t *testing.T, g *Gateway, who, auth string, allowed ...string) {
	t.Helper()
	for class, c := range classRequests {
		c.host, c.auth = "pro.eu1.example.com", auth
		w, seen := g.do(t, c, nil)
		ok := false
		for _, a := range allowed {
			ok = ok || a == class
		}
		t.Run(who+"/"+class, func(t *testing.T) {
			switch {
			case ok:
				expect(t, w, seen, 200, "")
			case class == "operator":
				expect(t, w, seen, 404, "route_blocked")
			default:
				expect(t, w, seen, 403, "forbidden")
				if !strings.Contains(w.Body.String(), "operation not permitted for this credential") {
					t.Fatalf("refusal %s", w.Body)
				}
			}
		})
	}
}

func TestKeyScopes(t *testing.T) {
	g := testGateway(t)
	checkMatrix(t, g, "produce key", "qk_live_produce", "produce", "gated-read", "gated-grow")
	checkMatrix(t, g, "consume key", "qk_live_consume", "consume", "gated-read", "gated-grow")
	checkMatrix(t, g, "read key", "qk_live_read", "read", "gated-read")
	checkMatrix(t, g, "admin key", "qk_live_admin", "queueadmin", "read", "gated-read")
}

func TestSessionRoles(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	checkMatrix(t, g, "admin", env.session(t, userAdmin, ""), "produce", "consume", "queueadmin", "read", "gated-read", "gated-grow")
	checkMatrix(t, g, "producer", env.session(t, userProducer, ""), "produce", "read", "gated-read", "gated-grow")
	checkMatrix(t, g, "viewer", env.session(t, userViewer, ""), "read", "gated-read")
	checkMatrix(t, g, "operator", env.session(t, userOperator, ""), "produce", "consume", "queueadmin", "read", "gated-read", "gated-grow", "operator")
	// A cluster claim is trusted for its own cluster, with its role.
	claimed, _, err := env.keys.Mint(userNoRole, "", "consumer", idPro, 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, g, "claimed consumer", claimed, "consume", "read", "gated-read", "gated-grow")

	pro := "pro.eu1.example.com"
	cases := []struct {
		name, auth string
		status     int
		code, msg  string
	}{
		{"no role", env.session(t, userNoRole, ""), 403, "forbidden", "no role on this cluster"},
		{"user gone", env.session(t, userGone, ""), 401, "unauthorized", "session no longer valid"},
		{"claim for another cluster", env.session(t, userAdmin, idAcme), 403, "forbidden", "token not valid for this cluster"},
		{"wrong signature", env.session(t, userAdmin, "")[:20] + "x.y.z", 401, "unauthorized", "invalid credential"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, seen := g.do(t, call{host: pro, target: "/api/v1/resources/queues", auth: c.auth}, nil)
			expect(t, w, seen, c.status, c.code)
			if !strings.Contains(w.Body.String(), c.msg) {
				t.Fatalf("message %s, want %q", w.Body, c.msg)
			}
		})
	}

	// Revoking the token, or the session it was minted for, ends it.
	tok, claims, err := env.keys.Mint(userAdmin, "sess-1", "viewer", "", 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	w, seen := g.do(t, call{host: pro, target: "/api/v1/resources/queues", auth: tok}, nil)
	expect(t, w, seen, 200, "")
	env.src.revoked["sess-1"] = true
	g.app.Identities().InvalidateRevocations()
	w, seen = g.do(t, call{host: pro, target: "/api/v1/resources/queues", auth: tok}, nil)
	expect(t, w, seen, 401, "unauthorized")
	if claims.SessionID != "sess-1" {
		t.Fatalf("sid claim = %q", claims.SessionID)
	}
}

func TestSessionCookie(t *testing.T) {
	env := newTestEnv(t)
	tok := env.session(t, userAdmin, "")
	c := call{host: "pro.eu1.example.com", target: "/api/v1/resources/queues",
		header: map[string]string{"Cookie": "theme=dark; queen_session=" + tok}}
	w, seen := env.g.do(t, c, nil)
	expect(t, w, seen, 200, "")
	if got := seen.header.Get("Cookie"); got != "theme=dark" {
		t.Fatalf("the cell got Cookie %q; the session must not reach it", got)
	}
	// Top-level navigations never authenticate by cookie.
	c.header["Sec-Fetch-Mode"] = "navigate"
	w, seen = env.g.do(t, c, nil)
	expect(t, w, seen, 401, "unauthorized")
}

// stripRequestID removes the per-request id so refusals can be compared.
func stripRequestID(body string) string {
	return regexp.MustCompile(`"request_id":"[0-9a-f]+"`).ReplaceAllString(body, "")
}

func TestActAsCluster(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	act := func(auth, ref string) (int, string, *upstreamSeen) {
		w, seen := g.do(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: auth,
			header: map[string]string{"X-Queen-Act-Cluster": ref}}, nil)
		return w.Code, w.Body.String(), seen
	}
	if code, body, _ := act("qk_live_acme", "pro"); code != 403 || !strings.Contains(body, "api keys are bound to their own cluster") {
		t.Fatalf("api key with act-as: %d %s", code, body)
	}
	if code, body, _ := act("", "pro"); code != 401 || !strings.Contains(body, "missing bearer credential") {
		t.Fatalf("no credential with act-as: %d %s", code, body)
	}
	viewer := env.session(t, userViewer, "")
	code, body, seen := act(viewer, "PRO")
	if code != 200 || seen.cluster.ID != idPro || seen.header.Get("X-Queen-Tenant") != "bt-pro" {
		t.Fatalf("member acting on pro: %d %s", code, body)
	}
	if code, _, seen := act(viewer, idPro); code != 200 || seen.cluster.ID != idPro {
		t.Fatalf("act-as by id: %d", code)
	}
	codeA, unknown, _ := act(viewer, "no-such-cluster")
	codeB, notMine, _ := act(viewer, "acme")
	if codeA != 403 || codeB != 403 || stripRequestID(unknown) != stripRequestID(notMine) {
		t.Fatalf("unknown %d %s and not-yours %d %s must be identical 403s", codeA, unknown, codeB, notMine)
	}
	if code, _, seen := act(env.session(t, userOperator, ""), "acme"); code != 200 || seen.cluster.ID != idAcme {
		t.Fatalf("operator acting on acme: %d", code)
	}
	if code, body, _ := act(env.session(t, userAdmin, idPro), "acme"); code != 403 || !strings.Contains(body, "token not valid for this cluster") {
		t.Fatalf("cluster-bound token acting elsewhere: %d %s", code, body)
	}
}

func TestSharedHost(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	g.SharedHosts = []string{"shared.example.com"}
	shared := func(auth string, header map[string]string, host string) (int, string, *upstreamSeen) {
		w, seen := g.do(t, call{method: "POST", host: host, target: "/api/v1/push", auth: auth, body: `{"items":[]}`, header: header}, nil)
		return w.Code, w.Body.String(), seen
	}
	for _, host := range []string{"shared.example.com", "SHARED.example.com.:443"} {
		if code, _, seen := shared("qk_live_acme", nil, host); code != 200 || seen.header.Get("X-Queen-Tenant") != "bt-acme" {
			t.Fatalf("%s: acme key: %d", host, code)
		}
		if code, _, seen := shared("qk_live_produce", nil, host); code != 200 || seen.header.Get("X-Queen-Tenant") != "bt-pro" {
			t.Fatalf("%s: pro key: %d", host, code)
		}
	}
	for name, c := range map[string]struct {
		auth   string
		header map[string]string
		status int
		msg    string
	}{
		"no credential (never 421)": {"", nil, 401, "missing bearer credential"},
		"unknown key":               {"qk_live_nope", nil, 401, "unknown or revoked api key"},
		"garbage token":             {"not-a-token", nil, 401, "invalid credential"},
		"key with act-as":           {"qk_live_acme", map[string]string{"X-Queen-Act-Cluster": "pro"}, 403, "api keys are bound"},
		"session naming nothing":    {env.session(t, userAdmin, ""), nil, 403, "name one with x-queen-act-cluster"},
		"suspended after auth":      {"qk_live_gone", nil, 403, "cluster suspended"},
		"billing hold after auth":   {"qk_live_held", nil, 403, "pushes blocked (billing hold)"},
	} {
		t.Run(name, func(t *testing.T) {
			code, body, seen := shared(c.auth, c.header, "shared.example.com")
			if code != c.status || !strings.Contains(body, c.msg) || seen.called {
				t.Fatalf("%d %s, want %d %q", code, body, c.status, c.msg)
			}
		})
	}
	if code, body, seen := shared(env.session(t, userAdmin, ""), map[string]string{"X-Queen-Act-Cluster": "acme"}, "shared.example.com"); code != 200 || seen.cluster.ID != idAcme {
		t.Fatalf("session naming acme: %d %s", code, body)
	}
	// Non-shared hosts keep their rules on the shielded listener.
	if code, body, _ := shared("qk_live_produce", nil, "acme.eu1.example.com"); code != 403 || !strings.Contains(body, "key/cluster mismatch") {
		t.Fatalf("mismatched key on a cluster host: %d %s", code, body)
	}
}

func TestShieldedListener(t *testing.T) {
	g := testGateway(t)
	g.Shield = true
	cases := []struct {
		name, host, auth string
		status           int
		code             string
	}{
		{"unknown host, no credential", "nosuch.eu1.example.com", "", 401, "unauthorized"},
		{"unknown host, unknown key", "nosuch.eu1.example.com", "qk_live_nope", 401, "unauthorized"},
		{"unknown host, live key", "nosuch.eu1.example.com", "qk_live_acme", 421, "cluster_unknown"},
		{"suspended, anonymous", "gone.eu1.example.com", "", 401, "unauthorized"},
		{"suspended, own key", "gone.eu1.example.com", "qk_live_gone", 403, "cluster_suspended"},
		{"feature gate waits for the key", "acme.eu1.example.com", "", 401, "unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, seen := g.do(t, call{method: "POST", host: c.host, target: "/api/v1/traces", auth: c.auth}, nil)
			expect(t, w, seen, c.status, c.code)
		})
	}
	// Blocked routes still answer before authentication.
	w, seen := g.do(t, call{host: "nosuch.eu1.example.com", target: "/api/v1/pop"}, nil)
	expect(t, w, seen, 404, "route_blocked")
}

func TestOperatorRoutesOff(t *testing.T) {
	env := newTestEnv(t)
	env.g.app.OperatorEnabled = false
	w, seen := env.g.do(t, call{host: "pro.eu1.example.com", target: "/api/v1/status", auth: env.session(t, userOperator, "")}, nil)
	expect(t, w, seen, 404, "route_blocked")
	w, seen = env.g.do(t, call{host: "pro.eu1.example.com", target: "/api/v1/status"}, nil)
	expect(t, w, seen, 404, "route_blocked")
}

func TestHardening(t *testing.T) {
	g := testGateway(t)
	ok := call{host: "acme.eu1.example.com", auth: "qk_live_acme"}

	c := ok
	c.target = "/api/v1/resources/queues?x=" + strings.Repeat("a", 8200)
	w, seen := g.do(t, c, nil)
	expect(t, w, seen, 414, "request_headers_too_large")

	c = ok
	c.target = "/api/v1/resources/queues"
	c.header = map[string]string{"X-Big": strings.Repeat("b", 17<<10)}
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 431, "request_headers_too_large")

	r := httptestRequest("GET", "/api/v1/resources/queues", "")
	r.Host = "acme.eu1.example.com"
	r.Header.Add("Authorization", "Bearer qk_live_acme")
	r.Header.Add("Authorization", "Bearer qk_live_produce")
	w, seen = serveRequest(t, g, r)
	expect(t, w, seen, 400, "bad_request")

	c = ok
	c.method, c.target, c.body = "POST", "/api/v1/ack", strings.Repeat("x", (1<<20)+1)
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 413, "payload_too_large")

	// A body over the cap sent without a length is cut off while the
	// cell reads it, and still answered 413.
	r = httptestRequest("POST", "/api/v1/ack", strings.Repeat("y", (1<<20)+1))
	r.Host, r.ContentLength = "acme.eu1.example.com", -1
	r.Header.Set("Authorization", "Bearer qk_live_acme")
	w, _ = serveRequest(t, g, r)
	if w.Code != 413 {
		t.Fatalf("chunked body over the cap: %d %s", w.Code, w.Body)
	}
}

func TestFailedAuthenticationGuard(t *testing.T) {
	g := testGateway(t)
	g.failures = harden.NewFailureGuard(harden.FailureGuardConfig{Rate: 0.1, Burst: 3})
	bad := call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_guess"}
	for i := range 3 {
		w, seen := g.do(t, bad, nil)
		expect(t, w, seen, 401, "unauthorized")
		_ = i
	}
	w, seen := g.do(t, bad, nil)
	expect(t, w, seen, 429, "rate_limited")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 1 || ra > 10 {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	// Even a good key waits: the address is guessing.
	w, seen = g.do(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_acme"}, nil)
	expect(t, w, seen, 429, "rate_limited")
}

func TestKVBatchCarveOut(t *testing.T) {
	g := testGateway(t) // acme has no kv feature
	kafka := `{"operations":[{"ns":"queen-kafka","op":"put","key":"qk:offsets/g1","value":1}]}`
	c := call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/kv", auth: "qk_live_acme", body: kafka}
	w, seen := g.do(t, c, nil)
	expect(t, w, seen, 200, "")
	if seen.body != kafka {
		t.Fatalf("the cell got body %q", seen.body)
	}
	c.body = `[{"ns":"app","op":"put","key":"k","value":1}]`
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 403, "feature_gated")
}

func TestMixedBatchOnBlockedCluster(t *testing.T) {
	g := testGateway(t)
	c := call{method: "POST", host: "held.eu1.example.com", target: "/api/v1/kv", auth: "qk_live_held"}
	c.body = `[{"ns":"app","op":"get","key":"k"}]`
	w, seen := g.do(t, c, nil)
	expect(t, w, seen, 200, "")
	if seen.body != c.body {
		t.Fatalf("the cell got body %q", seen.body)
	}
	c.body = `[{"ns":"app","op":"get","key":"k"},{"ns":"app","op":"put","key":"k","value":2}]`
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 403, "push_blocked")
	c.target, c.body = "/streams/v1/cycle", `{"push_items":[{"queue":"q","payload":1}]}`
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 403, "push_blocked")
	c.body = `{"ack_items":[]}`
	w, seen = g.do(t, c, nil)
	expect(t, w, seen, 200, "")
}

func TestCellCredential(t *testing.T) {
	g := testGateway(t)
	secret := []byte("broker-secret-broker-secret-0123456789")
	tokens, err := tenancy.NewCellTokens(tenancy.CellTokenConfig{Algorithm: "HS256", HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	g.app.cellTokens = map[string]*tenancy.CellTokens{"cell-1": tokens}
	w, seen := g.do(t, call{method: "POST", host: "pro.eu1.example.com", target: "/api/v1/push", auth: "qk_live_produce", body: `{"items":[]}`}, nil)
	expect(t, w, seen, 200, "")
	raw, ok := strings.CutPrefix(seen.header.Get("Authorization"), "Bearer ")
	if !ok {
		t.Fatalf("cell Authorization %q", seen.header.Get("Authorization"))
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired()); err != nil {
		t.Fatalf("cell token does not verify: %v", err)
	}
	if claims["sub"] != "k-produce" || claims["role"] != "read-write" {
		t.Fatalf("cell token claims %v", claims)
	}
	if strings.Contains(seen.header.Get("Authorization"), "qk_live") {
		t.Fatal("the client's key reached the cell")
	}

	// Without a token configuration the cell's static secret is presented.
	g.app.cellTokens = nil
	w, seen = g.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/push", auth: "qk_live_acme", body: `{"items":[]}`}, nil)
	expect(t, w, seen, 200, "")
	if got := seen.header.Get("Authorization"); got != "Bearer acme-cell-secret" {
		t.Fatalf("cell Authorization %q", got)
	}
}

func serveRequest(t *testing.T, g *Gateway, r *http.Request) (*httptest.ResponseRecorder, *upstreamSeen) {
	t.Helper()
	w := httptest.NewRecorder()
	seen := &upstreamSeen{}
	if err := g.ServeHTTP(w, r, seen.handler(nil)); err != nil {
		t.Fatalf("ServeHTTP returned %v", err)
	}
	return w, seen
}

func httptestRequest(method, target, body string) *http.Request {
	var r *http.Request
	if body == "" {
		r, _ = http.NewRequest(method, "http://x"+target, nil)
	} else {
		r, _ = http.NewRequest(method, "http://x"+target, strings.NewReader(body))
	}
	r.RequestURI = target
	r.RemoteAddr = "192.0.2.10:5555"
	return r
}
