package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// memorySource is a tenancy.Source and tenancy.IdentitySource held in
// memory, so the pipeline can be tested and measured without a database.
type memorySource struct {
	clusters map[string]*tenancy.Cluster
	keys     map[string]*tenancy.APIKey
	roles    map[[2]string]tenancy.Role // (user, cluster id)
	users    map[string]bool            // user id → operator bit
	revoked  map[string]bool

	keyLookups atomic.Int64 // APIKeyByHash calls: what reached the "database"
}

func (m *memorySource) ClusterBySlug(_ context.Context, slug string) (*tenancy.Cluster, error) {
	if c, ok := m.clusters[slug]; ok {
		return c, nil
	}
	return nil, tenancy.ErrNotFound
}

func (m *memorySource) ClusterByID(_ context.Context, id string) (*tenancy.Cluster, error) {
	for _, c := range m.clusters {
		if c.ID == id {
			return c, nil
		}
	}
	return nil, tenancy.ErrNotFound
}

func (m *memorySource) APIKeyByHash(_ context.Context, hash string) (*tenancy.APIKey, error) {
	m.keyLookups.Add(1)
	if k, ok := m.keys[hash]; ok {
		return k, nil
	}
	return nil, tenancy.ErrNotFound
}

func (m *memorySource) RoleOnCluster(_ context.Context, user, cluster string) (tenancy.Role, error) {
	if r, ok := m.roles[[2]string{user, cluster}]; ok {
		return r, nil
	}
	return tenancy.RoleNone, tenancy.ErrNotFound
}

func (m *memorySource) UserStanding(_ context.Context, user string) (bool, bool, error) {
	op, ok := m.users[user]
	return ok, op, nil
}

func (m *memorySource) AnyRevoked(_ context.Context, ids []string) (bool, error) {
	for _, id := range ids {
		if m.revoked[id] {
			return true, nil
		}
	}
	return false, nil
}

// memoryQueues is an admission registry store that starts empty.
type memoryQueues struct{}

func (memoryQueues) LoadQueues(context.Context, string) ([]limits.QueueRow, error) { return nil, nil }
func (memoryQueues) PersistQueues(context.Context, []limits.QueueRow) error        { return nil }

// Users and clusters of the test gateway.
const (
	userAdmin    = "11111111-1111-4111-8111-111111111111"
	userProducer = "22222222-2222-4222-8222-222222222222"
	userViewer   = "33333333-3333-4333-8333-333333333333"
	userOperator = "44444444-4444-4444-8444-444444444444"
	userNoRole   = "55555555-5555-4555-8555-555555555555"
	userGone     = "66666666-6666-4666-8666-666666666666"

	idAcme = "a0000000-0000-4000-8000-00000000000a"
	idHeld = "b0000000-0000-4000-8000-00000000000b"
	idGone = "c0000000-0000-4000-8000-00000000000c"
	idPro  = "d0000000-0000-4000-8000-00000000000d"
)

// Keys of the generated shape (tenancy.WellFormedAPIKey); the others of
// the test gateway are hand-made.
const (
	strongAcmeKey = "qk_live_acmeAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	strongProKey  = "qk_live_proBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
)

var testSessionSecret = []byte("0123456789abcdef0123456789abcdef-test-only")

type testEnv struct {
	g    *Gateway
	src  *memorySource
	keys *tenancy.SessionKeys
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	all := tenancy.Features{Streams: true, Traces: true, KV: true, Timers: true, Ephemeral: true}
	acme := &tenancy.Cluster{ID: idAcme, Slug: "acme", BrokerTenant: "bt-acme", Status: tenancy.StatusActive, CellSlug: "cell-1", CellURL: "http://127.0.0.1:6632", CellSecret: "acme-cell-secret", Limits: limits.AllUnlimited()}
	held := &tenancy.Cluster{ID: idHeld, Slug: "held", BrokerTenant: "bt-held", Status: tenancy.StatusPushBlocked, CellSlug: "cell-1", Features: all, Limits: limits.AllUnlimited()}
	gone := &tenancy.Cluster{ID: idGone, Slug: "gone", BrokerTenant: "bt-gone", Status: tenancy.StatusSuspended, CellSlug: "cell-1", Limits: limits.AllUnlimited()}
	pro := &tenancy.Cluster{ID: idPro, Slug: "pro", BrokerTenant: "bt-pro", Status: tenancy.StatusActive, CellSlug: "cell-1", Features: all, Limits: limits.AllUnlimited()}
	key := func(id string, c *tenancy.Cluster, s tenancy.ScopeSet) *tenancy.APIKey {
		return &tenancy.APIKey{ID: id, Cluster: c, Scopes: s}
	}
	src := &memorySource{
		clusters: map[string]*tenancy.Cluster{"acme": acme, "held": held, "gone": gone, "pro": pro},
		keys: map[string]*tenancy.APIKey{
			tenancy.HashAPIKey("qk_live_acme"):    key("k-acme", acme, tenancy.AllScopes),
			tenancy.HashAPIKey("qk_live_produce"): key("k-produce", pro, tenancy.ScopeSet(tenancy.ScopeProduce)),
			tenancy.HashAPIKey("qk_live_consume"): key("k-consume", pro, tenancy.ScopeSet(tenancy.ScopeConsume)),
			tenancy.HashAPIKey("qk_live_read"):    key("k-read", pro, tenancy.ScopeSet(tenancy.ScopeRead)),
			tenancy.HashAPIKey("qk_live_admin"):   key("k-admin", pro, tenancy.ScopeSet(tenancy.ScopeAdmin)),
			tenancy.HashAPIKey("qk_live_held"):    key("k-held", held, tenancy.AllScopes),
			tenancy.HashAPIKey("qk_live_gone"):    key("k-gone", gone, tenancy.AllScopes),
			tenancy.HashAPIKey(strongAcmeKey):     key("k-strong", acme, tenancy.AllScopes),
			tenancy.HashAPIKey(strongProKey):      key("k-strong-pro", pro, tenancy.AllScopes),
			tenancy.HashAPIKey("qk_live_expired"): {ID: "k-exp", Cluster: acme, Scopes: tenancy.AllScopes, ExpiresAt: time.Now().Add(-time.Second)},
		},
		roles: map[[2]string]tenancy.Role{
			{userAdmin, idPro}:    tenancy.RoleAdmin,
			{userAdmin, idAcme}:   tenancy.RoleAdmin,
			{userProducer, idPro}: tenancy.RoleProducer,
			{userViewer, idPro}:   tenancy.RoleViewer,
		},
		users:   map[string]bool{userAdmin: false, userProducer: false, userViewer: false, userOperator: true, userNoRole: false},
		revoked: map[string]bool{},
	}
	keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: testSessionSecret})
	if err != nil {
		t.Fatal(err)
	}
	app := &App{
		BaseDomains:     []string{"eu1.example.com"},
		OperatorEnabled: true,
		sessionKeys:     keys,
		cookieNames:     tenancy.CookieNames{Fleet: defaultCookieName},
		backend: &backend{
			cache:       tenancy.NewClusterCache(src, tenancy.CacheConfig{}, nil),
			identity:    tenancy.NewIdentityCache(src, tenancy.IdentityCacheConfig{}, nil),
			toucher:     tenancy.NewKeyToucher(nil, time.Second, nil),
			storage:     limits.NewStorage(nil),
			admission:   limits.NewAdmission(memoryQueues{}),
			isolation:   scopedCells(t),
			hostLookups: harden.NewHostLookups(harden.HostLookupsConfig{}),
			drains:      tenancy.NewDrains(tenancy.DrainConfig{GatewayID: "test"}),
		},
		limits: &limitState{
			buckets:      limits.NewBuckets(nil),
			parked:       limits.NewParked(0),
			redeliveries: limits.NewRedeliveries(0, 0, nil),
		},
		MaxBatchItems: 10000,
		readiness:     new(readinessCache),
	}
	app.pushBlockSources = []limits.PushBlockSource{app.backend.storage}
	g := &Gateway{
		UpstreamTimeout: caddy.Duration(35 * time.Second),
		LongPollMax:     caddy.Duration(90 * time.Second),
		LongPollMargin:  caddy.Duration(10 * time.Second),
		MaxBodyBytes:    1 << 20,
		app:             app,
		logger:          zap.NewNop(),
		headLimits:      harden.HeadLimits{}.WithDefaults(),
		failures:        harden.NewFailureGuard(harden.FailureGuardConfig{Rate: 1, Burst: 1000}),
	}
	return &testEnv{g: g, src: src, keys: keys}
}

func testGateway(t testing.TB) *Gateway { return newTestEnv(t).g }

// scopedCells is an isolation tracker that finds every cell's broker
// scoping by tenant, as the fake sources' cells are taken to.
func scopedCells(t testing.TB) *tenancy.CellIsolation {
	iso := tenancy.NewCellIsolation(tenancy.CellIsolationConfig{
		Probe: func(context.Context, tenancy.ProbeCell) (tenancy.TenantScoping, error) {
			return tenancy.ScopingScoped, nil
		},
		Record: func(context.Context, tenancy.ProbeCell, tenancy.TenantScoping, string) error { return nil },
		Keeper: func(context.Context, string) (string, error) { return "", nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go iso.Run(ctx)
	return iso
}

// session mints a session token for user, optionally bound to a cluster.
func (e *testEnv) session(t testing.TB, user, cluster string) string {
	t.Helper()
	tok, _, err := e.keys.Mint(user, "", "viewer", cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// upstreamSeen records what the handler after the pipeline received.
type upstreamSeen struct {
	called  bool
	header  http.Header
	body    string
	cluster *tenancy.Cluster
	dead    time.Duration
}

func (u *upstreamSeen) handler(err error) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		u.called = true
		u.header = r.Header.Clone()
		u.cluster, _ = r.Context().Value(clusterCtxKey{}).(*tenancy.Cluster)
		if d, ok := r.Context().Deadline(); ok {
			u.dead = time.Until(d)
		}
		if r.Body != nil {
			b, rerr := io.ReadAll(r.Body)
			if rerr != nil {
				return rerr
			}
			u.body = string(b)
		}
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	})
}

// call describes one request to the pipeline.
type call struct {
	method, host, target, auth, body string
	header                           map[string]string
	remote                           string    // the peer's address, when not httptest's 192.0.2.1:1234
	bodyReader                       io.Reader // instead of body
}

func (g *Gateway) do(t testing.TB, c call, upstreamErr error) (*httptest.ResponseRecorder, *upstreamSeen) {
	t.Helper()
	method := c.method
	if method == "" {
		method = "GET"
	}
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	if c.bodyReader != nil {
		body = c.bodyReader
	}
	r := httptest.NewRequest(method, c.target, body)
	r.Host = c.host
	if c.remote != "" {
		r.RemoteAddr = c.remote
	}
	if c.auth != "" {
		r.Header.Set("Authorization", "Bearer "+c.auth)
	}
	for k, v := range c.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	seen := &upstreamSeen{}
	if err := g.ServeHTTP(w, r, seen.handler(upstreamErr)); err != nil {
		t.Fatalf("ServeHTTP returned %v", err)
	}
	return w, seen
}

func serve(t *testing.T, g *Gateway, host, target, key string, upstreamErr error) (*httptest.ResponseRecorder, *upstreamSeen) {
	t.Helper()
	return g.do(t, call{host: host, target: target, auth: key}, upstreamErr)
}

// expect checks one answer: forwarded when code is "", else refused with
// that status and code, in the envelope, never reaching the cell.
func expect(t *testing.T, w *httptest.ResponseRecorder, seen *upstreamSeen, status int, code string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	rid := w.Header().Get(headerRequestID)
	if rid == "" {
		t.Fatal("no x-queen-request-id")
	}
	if code == "" {
		if !seen.called || seen.cluster == nil || seen.header.Get(headerRequestID) != rid {
			t.Fatalf("not forwarded properly: %+v", seen)
		}
		return
	}
	if seen.called {
		t.Fatal("a refused request reached the upstream")
	}
	var body map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["code"] != code || body["request_id"] != rid {
		t.Fatalf("body %s, want code %s", w.Body, code)
	}
}

func TestPipelineOrder(t *testing.T) {
	g := testGateway(t)
	cases := []struct {
		name, method, host, target, key string
		status                          int
		code                            string
	}{
		{"unknown host wins over a missing credential", "POST", "nosuch.eu1.example.com", "/api/v1/push", "", 421, "cluster_unknown"},
		{"unknown host wins over a blocked route", "GET", "nosuch.eu1.example.com", "/api/v1/system/shared-state", "", 421, "cluster_unknown"},
		{"host outside the base domain", "POST", "acme.other.example", "/api/v1/push", "qk_live_acme", 421, "cluster_unknown"},
		{"extra label", "POST", "x.acme.eu1.example.com", "/api/v1/push", "qk_live_acme", 421, "cluster_unknown"},
		{"status gate runs before authentication", "POST", "gone.eu1.example.com", "/api/v1/push", "", 403, "cluster_suspended"},
		{"suspended even with its own key", "POST", "gone.eu1.example.com", "/api/v1/push", "qk_live_gone", 403, "cluster_suspended"},
		{"ambiguous path before authentication", "POST", "acme.eu1.example.com", "/api/v1/pu%73h", "", 400, "bad_request"},
		{"dot segments", "GET", "acme.eu1.example.com", "/api/v1/resources/../system/maintenance", "qk_live_acme", 400, "bad_request"},
		{"blocked route before authentication", "GET", "acme.eu1.example.com", "/api/v1/pop", "", 404, "route_blocked"},
		{"unknown api route", "POST", "acme.eu1.example.com", "/api/v1/locks", "qk_live_acme", 404, "route_blocked"},
		{"unknown streams route", "GET", "pro.eu1.example.com", "/streams/v1/anything", "qk_live_produce", 404, "route_blocked"},
		{"write under a read prefix", "DELETE", "pro.eu1.example.com", "/api/v1/resources/tenant", "qk_live_admin", 404, "route_blocked"},
		{"feature gate before authentication", "POST", "acme.eu1.example.com", "/api/v1/traces", "", 403, "feature_gated"},
		{"billing hold before authentication", "POST", "held.eu1.example.com", "/api/v1/push", "", 403, "push_blocked"},
		{"billing hold blocks a growing gated route", "PUT", "held.eu1.example.com", "/api/v1/kv/ns/k", "qk_live_held", 403, "push_blocked"},
		{"billing hold blocks DLQ replay", "POST", "held.eu1.example.com", "/api/v1/dlq/7/replay", "qk_live_held", 403, "push_blocked"},
		{"billing hold lets pops through", "GET", "held.eu1.example.com:443", "/api/v1/pop/queue/q", "qk_live_held", 200, ""},
		{"missing credential", "POST", "acme.eu1.example.com", "/api/v1/push", "", 401, "unauthorized"},
		{"garbage session token", "POST", "acme.eu1.example.com", "/api/v1/push", "eyJhbGciOiJIUzI1NiJ9.e30.x", 401, "unauthorized"},
		{"unknown key", "POST", "acme.eu1.example.com", "/api/v1/push", "qk_live_nope", 401, "unauthorized"},
		{"implausible key is never looked up", "POST", "acme.eu1.example.com", "/api/v1/push", "qk_li ve", 401, "unauthorized"},
		{"expired key", "POST", "acme.eu1.example.com", "/api/v1/push", "qk_live_expired", 401, "unauthorized"},
		{"another cluster's key", "POST", "acme.eu1.example.com", "/api/v1/push", "qk_live_held", 403, "forbidden"},
		{"operator route refused to a key", "GET", "acme.eu1.example.com", "/api/v1/status", "qk_live_acme", 404, "route_blocked"},
		{"own key", "POST", "ACME.eu1.example.com.", "/api/v1/push", "qk_live_acme", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := ""
			if tc.target == "/api/v1/push" {
				body = `{"items":[]}` // a push the gateway reads (an empty one is refused)
			}
			w, seen := g.do(t, call{method: tc.method, host: tc.host, target: tc.target, auth: tc.key, body: body}, nil)
			expect(t, w, seen, tc.status, tc.code)
		})
	}
}

func TestPipelineUpstreamErrors(t *testing.T) {
	g := testGateway(t)
	w, _ := serve(t, g, "acme.eu1.example.com", "/api/v1/resources/queues", "qk_live_acme",
		caddyhttp.Error(http.StatusBadGateway, errors.New("dial tcp: connection refused")))
	if w.Code != 502 || !json.Valid(w.Body.Bytes()) {
		t.Fatalf("unreachable: %d %s", w.Code, w.Body)
	}
	w, _ = serve(t, g, "acme.eu1.example.com", "/api/v1/resources/queues", "qk_live_acme",
		caddyhttp.Error(http.StatusGatewayTimeout, context.DeadlineExceeded))
	if w.Code != 504 {
		t.Fatalf("timeout: %d %s", w.Code, w.Body)
	}
	_, seen := serve(t, g, "acme.eu1.example.com", "/api/v1/pop/queue/q?wait=true&timeout=2000", "qk_live_acme", nil)
	if seen.dead < 11*time.Second || seen.dead > 12*time.Second {
		t.Fatalf("long-poll deadline %v, want about 12s", seen.dead)
	}
}

// BenchmarkPipelineCacheHit measures the gateway's own work for one
// authenticated request whose cluster and key are cached.
func BenchmarkPipelineCacheHit(b *testing.B) {
	g := testGateway(b)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	r := httptest.NewRequest("POST", "/api/v1/push", nil)
	r.Host = "acme.eu1.example.com"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r.Header = http.Header{"Authorization": {"Bearer qk_live_acme"}}
		if err := g.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassifyAuthenticateAuthorize measures the enforcement steps
// alone on a cache hit: classification, credential extraction, the key
// lookup and the authorization matrix.
func BenchmarkClassifyAuthenticateAuthorize(b *testing.B) {
	g := testGateway(b)
	r := httptest.NewRequest("POST", "/api/v1/push", nil)
	r.Host = "acme.eu1.example.com"
	r.Header.Set("Authorization", "Bearer qk_live_acme")
	t, e := g.resolveTarget(r)
	if e != nil {
		b.Fatal(e)
	}
	st := &requestState{}
	b.ReportAllocs()
	for b.Loop() {
		if e := g.classify(r, st); e != nil {
			b.Fatal(e)
		}
		if _, e := g.authenticate(r, st, t); e != nil {
			b.Fatal(e)
		}
		if !tenancy.Authorize(&st.principal, st.route) {
			b.Fatal("refused")
		}
	}
}

// TestRequestVariablesRenderAsText: the request id and the cluster slug
// are Caddy variables that placeholders ({http.vars.queen.request_id},
// {http.vars.queen.cluster}) render as text, for access logs.
func TestRequestVariablesRenderAsText(t *testing.T) {
	g := testGateway(t)
	vars := map[string]any{}
	r := httptest.NewRequest("GET", "/api/v1/resources/queues", nil)
	r.Host = "acme.eu1.example.com"
	r.Header.Set("Authorization", "Bearer qk_live_acme")
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	w := httptest.NewRecorder()
	seen := &upstreamSeen{}
	if err := g.ServeHTTP(w, r, seen.handler(nil)); err != nil || !seen.called {
		t.Fatalf("ServeHTTP: %v, forwarded %v", err, seen.called)
	}
	if got, want := caddy.ToString(vars[varRequestID]), w.Header().Get(headerRequestID); got != want || want == "" {
		t.Fatalf("queen.request_id renders %q, want %q", got, want)
	}
	if got := caddy.ToString(vars[varClusterSlug]); got != "acme" {
		t.Fatalf("queen.cluster renders %q, want acme", got)
	}
}
