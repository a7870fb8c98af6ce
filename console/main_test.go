package console

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const baseDomain = "eu1.test"

var (
	migrateOnce sync.Once
	migrateErr  error
	uniq        atomic.Int64
)

// sharedPool is a pool on the package's migrated database.
func sharedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	migrateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, migrateErr = migrations.Apply(ctx, pool)
	})
	if migrateErr != nil {
		t.Fatalf("migrations: %v", migrateErr)
	}
	return pool
}

// name returns a fresh DNS label starting with prefix.
func name(prefix string) string { return fmt.Sprintf("%s%d", prefix, uniq.Add(1)) }

// testClusters resolves hosts under baseDomain, like the gateway does.
type testClusters struct {
	cache  *tenancy.ClusterCache
	shared map[string]bool
}

func (c testClusters) ClusterForHost(ctx context.Context, host string) (*tenancy.Cluster, error) {
	slug, ok := tenancy.SlugUnderDomain(host, []string{baseDomain})
	if !ok {
		return nil, tenancy.ErrNotFound
	}
	return c.cache.ClusterBySlug(ctx, slug)
}

func (c testClusters) ClusterByReference(ctx context.Context, ref string) (*tenancy.Cluster, error) {
	ref = strings.ToLower(ref)
	if uuidtext.ValidLower(ref) {
		return c.cache.ClusterByID(ctx, ref)
	}
	return c.cache.ClusterBySlug(ctx, ref)
}

func (c testClusters) SharedHost(host string) bool { return c.shared[host] }

func (c testClusters) APIKey(ctx context.Context, presented string) (*tenancy.APIKey, error) {
	return c.cache.APIKey(ctx, presented)
}

// testState reports no push block and no storage measurement, reads
// queues without a cell credential, and has the unwritten usage tests put
// in live.
type testState struct {
	live    *[]meter.Unflushed
	storage *limits.StorageStatus // nil: no measurement
}

func (s testState) Unflushed(string) []meter.Unflushed {
	if s.live == nil {
		return nil
	}
	return *s.live
}

func (testState) PushBlock(*tenancy.Cluster) string { return "" }
func (s testState) Storage(string) limits.StorageStatus {
	if s.storage != nil {
		return *s.storage
	}
	return limits.StorageStatus{}
}
func (testState) CellCredential(c *tenancy.Cluster) string          { return "" }
func (testState) CellServes(context.Context, *tenancy.Cluster) bool { return true }
func (testState) ServingGateway() (string, string, string)          { return "gw-test", "", "leader" }
func (testState) FrontedCells() []string                            { return []string{"cell-test"} }

// env is one surface on the package database, with its own cell (a fake
// broker) and a clock tests can move.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	keys   *tenancy.SessionKeys
	ids    *tenancy.IdentityCache
	cache  *tenancy.ClusterCache
	s      *Surface
	opts   Options
	broker *httptest.Server
	cellID string
	cell   string
	clock  atomic.Int64 // unix nanoseconds; 0 = real time
	live   []meter.Unflushed
}

func (e *env) now() time.Time {
	if n := e.clock.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Now()
}

// advance moves the surface's clock (and freezes it).
func (e *env) advance(d time.Duration) { e.clock.Store(e.now().Add(d).UnixNano()) }

const hsSecret = "0123456789abcdef0123456789abcdef-test"

func newEnv(t *testing.T, configure ...func(*Options)) *env {
	t.Helper()
	e := &env{t: t, pool: sharedPool(t)}
	keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte(hsSecret)})
	if err != nil {
		t.Fatal(err)
	}
	e.keys = keys
	store := tenancy.NewStore(e.pool)
	e.ids = tenancy.NewIdentityCache(store, tenancy.IdentityCacheConfig{}, nil)
	e.cache = tenancy.NewClusterCache(store, tenancy.CacheConfig{}, nil)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	fb := fakebroker.New(fakebroker.Options{Name: "console-test", RequireTenant: true})
	e.broker = httptest.NewServer(fb)
	t.Cleanup(e.broker.Close)
	e.cell = name("cell")
	e.cellID = e.scalar(`INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ($1, 'test', $2, 'shared') RETURNING id::text`,
		e.cell, e.broker.URL)
	e.opts = Options{
		Pool: e.pool, Sessions: keys, Identities: e.ids,
		Clusters: testClusters{cache: e.cache, shared: map[string]bool{"api." + baseDomain: true}},
		State:    testState{live: &e.live}, StateKey: []byte(strings.Repeat("k", 32)),
		OnClusterChanged: func(id string) { e.cache.InvalidateCluster(id) },
		Now:              e.now,
	}
	for _, f := range configure {
		f(&e.opts)
	}
	s, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) scalar(sql string, args ...any) string {
	e.t.Helper()
	var out string
	if err := e.pool.QueryRow(e.ctx(), sql, args...).Scan(&out); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.ctx(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) tenant() (id, slug string) {
	slug = name("tn")
	return e.scalar(`SELECT queen_proxy.create_tenant($1, $1)::text`, slug), slug
}

// cluster creates a cluster of the tenant on the env's cell; its host is
// <slug>.eu1.test.
func (e *env) cluster(tenantID string) (id, host string) {
	slug := name("cl")
	id = e.scalar(`SELECT queen_proxy.create_cluster($1::uuid, $2, 'pro', $3::uuid)::text`, tenantID, slug, e.cellID)
	return id, slug + "." + baseDomain
}

// user creates a user of the tenant (with a pgcrypto bcrypt password when
// password is not empty) and returns its id and e-mail.
func (e *env) user(tenantID, password string) (id, email string) {
	email = name("u") + "@acme.test"
	var pw any
	if password != "" {
		pw = password
	}
	id = e.scalar(`SELECT queen_proxy.create_user($1::uuid, $2,
		CASE WHEN $3::text IS NULL THEN NULL ELSE public.crypt($3::text, public.gen_salt('bf', 10)) END, 'local')::text`,
		tenantID, email, pw)
	return id, email
}

func (e *env) grant(clusterID, email, role string) {
	e.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, clusterID, email, role)
	e.ids.InvalidateCluster(clusterID)
}

// token mints a login session token for the user.
func (e *env) token(userID string) string {
	tok, _, err := e.keys.Mint(userID, "", "viewer", "", time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// apiKey issues a key on the cluster and returns its id and plaintext.
func (e *env) apiKey(clusterID string) (id, plaintext string) {
	plaintext, hash, err := tenancy.NewAPIKey("test")
	if err != nil {
		e.t.Fatal(err)
	}
	id = e.scalar(`SELECT queen_proxy.issue_api_key($1::uuid, 'test', $2, ARRAY['produce','read'])::text`, clusterID, hash)
	return id, plaintext
}

// req is one request to the surface.
type req struct {
	method, host, path, body string
	bearer                   string // Authorization: Bearer
	cookie                   string // the session cookie's value
	header                   map[string]string
	https                    bool
}

type resp struct {
	*httptest.ResponseRecorder
	t *testing.T
}

func (e *env) do(q req) resp {
	e.t.Helper()
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	scheme := "http"
	if q.https {
		scheme = "https"
	}
	r := httptest.NewRequest(q.method, scheme+"://"+q.host+q.path, body)
	r.RemoteAddr = "192.0.2.10:5555"
	if q.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if q.bearer != "" {
		r.Header.Set("Authorization", "Bearer "+q.bearer)
	}
	if q.cookie != "" {
		r.Header.Set("Cookie", "queen_session="+q.cookie)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	if !q.https {
		r.TLS = nil
	}
	if !e.s.Owns(r.URL.Path) {
		e.t.Fatalf("the surface does not own %s", r.URL.Path)
	}
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, r)
	return resp{ResponseRecorder: rec, t: e.t}
}

// get and write are the common shapes: a Bearer session (no browser
// headers, so no CSRF verdict applies).
func (e *env) get(host, path, tok string) resp {
	e.t.Helper()
	return e.do(req{method: http.MethodGet, host: host, path: path, bearer: tok})
}

func (e *env) write(method, host, path, tok, body string) resp {
	e.t.Helper()
	return e.do(req{method: method, host: host, path: path, bearer: tok, body: body})
}

func (r resp) json() map[string]any {
	r.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &m); err != nil {
		r.t.Fatalf("body is not a JSON object (status %d): %q", r.Code, r.Body.String())
	}
	return m
}

func (r resp) list() []map[string]any {
	r.t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &l); err != nil {
		r.t.Fatalf("body is not a JSON array (status %d): %q", r.Code, r.Body.String())
	}
	return l
}

// want checks the status and, for errors, the envelope's code.
func (r resp) want(status int, code string) resp {
	r.t.Helper()
	if r.Code != status {
		r.t.Fatalf("status %d, want %d; body %s", r.Code, status, r.Body.String())
	}
	if code != "" {
		m := r.json()
		if m["code"] != code || m["error"] == "" || m["request_id"] == "" || m["request_id"] != r.Header().Get("X-Queen-Request-Id") {
			r.t.Fatalf("envelope %s, want code %q", r.Body.String(), code)
		}
	}
	return r
}

// ed25519PEM returns a fresh PKCS#8 Ed25519 private key PEM.
func ed25519PEM(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// countOps counts audit rows of an action on a cluster.
func (e *env) countOps(clusterID, action, actor string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx(), `SELECT count(*) FROM queen_proxy.operations
		WHERE cluster_id = $1::uuid AND action = $2 AND actor = $3`, clusterID, action, actor).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func tenancyKeys(privPEM []byte) (*tenancy.SessionKeys, error) {
	return tenancy.NewSessionKeys(tenancy.SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM})
}

// SharedHosts lists the shared hosts, sorted.
func (c testClusters) SharedHosts() []string {
	out := make([]string, 0, len(c.shared))
	for h := range c.shared {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}
