package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/tenancy"
)

// memorySource is a tenancy.Source held in memory, so the pipeline can be
// tested and measured without a database.
type memorySource struct {
	clusters map[string]*tenancy.Cluster
	keys     map[string]*tenancy.APIKey
}

func (m *memorySource) ClusterBySlug(_ context.Context, slug string) (*tenancy.Cluster, error) {
	if c, ok := m.clusters[slug]; ok {
		return c, nil
	}
	return nil, tenancy.ErrNotFound
}

func (m *memorySource) ClusterByID(context.Context, string) (*tenancy.Cluster, error) {
	return nil, tenancy.ErrNotFound
}

func (m *memorySource) APIKeyByHash(_ context.Context, hash string) (*tenancy.APIKey, error) {
	if k, ok := m.keys[hash]; ok {
		return k, nil
	}
	return nil, tenancy.ErrNotFound
}

func testGateway(t testing.TB) *Gateway {
	t.Helper()
	active := &tenancy.Cluster{ID: "c1", Slug: "acme", BrokerTenant: "bt-acme", Status: tenancy.StatusActive, CellURL: "http://127.0.0.1:6632"}
	blocked := &tenancy.Cluster{ID: "c2", Slug: "held", BrokerTenant: "bt-held", Status: tenancy.StatusPushBlocked}
	suspended := &tenancy.Cluster{ID: "c3", Slug: "gone", BrokerTenant: "bt-gone", Status: tenancy.StatusSuspended}
	src := &memorySource{
		clusters: map[string]*tenancy.Cluster{"acme": active, "held": blocked, "gone": suspended},
		keys: map[string]*tenancy.APIKey{
			tenancy.HashAPIKey("qk_live_acme"): {ID: "k1", Cluster: active},
			tenancy.HashAPIKey("qk_live_held"): {ID: "k2", Cluster: blocked},
			tenancy.HashAPIKey("qk_live_gone"): {ID: "k3", Cluster: suspended},
		},
	}
	app := &App{
		BaseDomains: []string{"eu1.example.com"},
		backend:     &backend{cache: tenancy.NewClusterCache(src, tenancy.CacheConfig{}, nil)},
	}
	return &Gateway{
		UpstreamTimeout: caddy.Duration(35 * time.Second),
		LongPollMax:     caddy.Duration(90 * time.Second),
		LongPollMargin:  caddy.Duration(10 * time.Second),
		app:             app,
		logger:          zap.NewNop(),
	}
}

// upstreamSeen records what the handler after the pipeline received.
type upstreamSeen struct {
	called  bool
	header  http.Header
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
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	})
}

func serve(t *testing.T, g *Gateway, host, target, key string, upstreamErr error) (*httptest.ResponseRecorder, *upstreamSeen) {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.Host = host
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	seen := &upstreamSeen{}
	if err := g.ServeHTTP(w, r, seen.handler(upstreamErr)); err != nil {
		t.Fatalf("ServeHTTP returned %v", err)
	}
	return w, seen
}

func TestPipelineOrder(t *testing.T) {
	g := testGateway(t)
	cases := []struct {
		name, host, key string
		status          int
		code            string
	}{
		{"unknown host wins over a missing credential", "nosuch.eu1.example.com", "", 421, "cluster_unknown"},
		{"host outside the base domain", "acme.other.example", "qk_live_acme", 421, "cluster_unknown"},
		{"extra label", "x.acme.eu1.example.com", "qk_live_acme", 421, "cluster_unknown"},
		{"status gate runs before authentication", "gone.eu1.example.com", "", 403, "cluster_suspended"},
		{"suspended even with its own key", "gone.eu1.example.com", "qk_live_gone", 403, "cluster_suspended"},
		{"missing credential", "acme.eu1.example.com", "", 401, "unauthorized"},
		{"session tokens are not accepted yet", "acme.eu1.example.com", "eyJhbGciOiJIUzI1NiJ9.e30.x", 401, "unauthorized"},
		{"unknown key", "acme.eu1.example.com", "qk_live_nope", 401, "unauthorized"},
		{"another cluster's key", "acme.eu1.example.com", "qk_live_held", 403, "forbidden"},
		{"push-blocked clusters are served here", "held.eu1.example.com:443", "qk_live_held", 200, ""},
		{"own key", "ACME.eu1.example.com.", "qk_live_acme", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := serve(t, g, tc.host, "/api/v1/push", tc.key, nil)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			rid := w.Header().Get(headerRequestID)
			if rid == "" {
				t.Fatal("no x-queen-request-id")
			}
			if tc.code == "" {
				if !seen.called || seen.cluster == nil || seen.header.Get(headerRequestID) != rid {
					t.Fatalf("not forwarded properly: %+v", seen)
				}
				return
			}
			if seen.called {
				t.Fatal("a refused request reached the upstream")
			}
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["code"] != tc.code || body["request_id"] != rid {
				t.Fatalf("body %s, want code %s", w.Body, tc.code)
			}
		})
	}
}

func TestPipelineUpstreamErrors(t *testing.T) {
	g := testGateway(t)
	w, _ := serve(t, g, "acme.eu1.example.com", "/api/v1/push", "qk_live_acme",
		caddyhttp.Error(http.StatusBadGateway, errors.New("dial tcp: connection refused")))
	if w.Code != 502 || !json.Valid(w.Body.Bytes()) {
		t.Fatalf("unreachable: %d %s", w.Code, w.Body)
	}
	w, _ = serve(t, g, "acme.eu1.example.com", "/api/v1/push", "qk_live_acme",
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
