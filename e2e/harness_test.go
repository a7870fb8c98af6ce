package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"
	"github.com/jackc/pgx/v5/pgxpool"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/queengate/queengate/caddymodule"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/freeport"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

func TestMain(m *testing.M) {
	// Caddy writes its data and autosaved config under the home directory
	// unless told otherwise; keep every run inside a temporary folder.
	tmp, err := os.MkdirTemp("", "queengate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", tmp)
	os.Setenv("XDG_CONFIG_HOME", tmp)
	// Caddy computes these from the environment at init, before TestMain.
	caddy.ConfigAutosavePath = filepath.Join(tmp, "autosave.json")
	caddy.DefaultStorage = &certmagic.FileStorage{Path: filepath.Join(tmp, "data")}
	builtCaddy.path = filepath.Join(tmp, "bin", "caddy")
	// The tests provision tenants, clusters and cells under fixed slugs:
	// each gets a database of its own, so -count=N runs them again.
	code := pgtest.MainWith(m, pgtest.Options{DatabasePerTest: true})
	os.RemoveAll(tmp)
	os.Exit(code)
}

// freePort returns a loopback port nobody listens on right now, never one
// it returned before (freeport.Pick).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startGateway loads a Caddyfile into the in-process Caddy and unloads it
// when the test ends.
func startGateway(t testing.TB, caddyfile string) {
	t.Helper()
	adapter := caddyconfig.GetAdapter("caddyfile")
	cfg, warnings, err := adapter.Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapt Caddyfile: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		t.Logf("Caddyfile warning: %s", w.String())
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("load config: %v", err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stop caddy: %v", err)
		}
	})
}

// gatewayCaddyfile is a test gateway on httpPort against databaseURL, with
// extra lines for the queen app and the queen_gateway directive.
func gatewayCaddyfile(httpPort int, databaseURL, appOptions, gatewayOptions string) string {
	return fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	log {
		level ERROR
	}
	queen {
		database_url %s
		base_domain eu1.example.test
		%s
	}
}
http:// {
	queen_gateway {
		%s
	}
}
`, httpPort, databaseURL, appOptions, gatewayOptions)
}

// client sends every request to 127.0.0.1:port whatever the URL's host,
// so cluster hostnames need no DNS.
func client(port int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
			},
		},
	}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %q", r.body)
	}
	return m
}

func do(t *testing.T, c *http.Client, method, url, key, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// assertRefusal checks the error envelope of a gateway refusal.
func assertRefusal(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	m := r.json(t)
	rid := r.header.Get("X-Queen-Request-Id")
	if m["code"] != code || m["error"] == "" || m["request_id"] != rid || rid == "" {
		t.Fatalf("envelope %s (x-queen-request-id %q), want code %q", r.body, rid, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
}

// eventually retries check until it passes or within has gone by.
func eventually(t *testing.T, within time.Duration, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startBroker(t testing.TB, opts fakebroker.Options) *fakebroker.Broker {
	t.Helper()
	b := fakebroker.New(opts)
	if _, err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// controlPlane provisions rows through the control-plane SQL functions,
// exactly as an operator would.
type controlPlane struct {
	t    testing.TB
	pool *pgxpool.Pool
}

func newControlPlane(t testing.TB, url string) *controlPlane {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	return &controlPlane{t: t, pool: pool}
}

func (cp *controlPlane) scalar(sql string, args ...any) string {
	cp.t.Helper()
	var out string
	if err := cp.pool.QueryRow(context.Background(), sql, args...).Scan(&out); err != nil {
		cp.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (cp *controlPlane) exec(sql string, args ...any) {
	cp.t.Helper()
	if _, err := cp.pool.Exec(context.Background(), sql, args...); err != nil {
		cp.t.Fatalf("%s: %v", sql, err)
	}
}

// cell inserts a cell (cells are infrastructure rows: no SQL function
// creates them).
func (cp *controlPlane) cell(slug, baseURL, secret string) string {
	var s any
	if secret != "" {
		s = secret
	}
	return cp.scalar(`INSERT INTO queen_proxy.cells (slug, region, base_url, class, cell_secret)
		VALUES ($1, 'test', $2, 'shared', $3) RETURNING id::text`, slug, baseURL, s)
}

func (cp *controlPlane) tenant(slug string) string {
	return cp.scalar(`SELECT queen_proxy.create_tenant($1, $2)::text`, slug, slug+" Inc")
}

type cluster struct {
	id, slug, brokerTenant string
}

func (cp *controlPlane) cluster(tenantID, slug, cellID string) cluster {
	id := cp.scalar(`SELECT queen_proxy.create_cluster($1::uuid, $2, 'pro', $3::uuid)::text`, tenantID, slug, cellID)
	bt := cp.scalar(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE id = $1::uuid`, id)
	return cluster{id: id, slug: slug, brokerTenant: bt}
}

// key issues an API key with all scopes and returns its id and plaintext.
func (cp *controlPlane) key(clusterID string) (id, plaintext string) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	plaintext = "qk_test_" + base64.RawURLEncoding.EncodeToString(raw)
	id = cp.scalar(`SELECT queen_proxy.issue_api_key($1::uuid, 'e2e', $2,
		ARRAY['produce','consume','read','admin'])::text`, clusterID, tenancy.HashAPIKey(plaintext))
	return id, plaintext
}

// forwarded is what the gateway forwarded to a cell on behalf of clients:
// the cell's request log without the gateway's own background reads (the
// queue inventory), which carry no request id.
func forwarded(b *fakebroker.Broker) []fakebroker.Request {
	var out []fakebroker.Request
	for _, r := range b.Requests() {
		if r.Header.Get("X-Queen-Request-Id") != "" {
			out = append(out, r)
		}
	}
	return out
}

// builtCaddy is the gateway binary, built once per test run by the first
// test that needs it.
var builtCaddy struct {
	once sync.Once
	path string
	err  error
}

// caddyBinary builds ./cmd/caddy (once) and returns its path.
func caddyBinary(t *testing.T) string {
	t.Helper()
	builtCaddy.once.Do(func() {
		out, err := exec.Command("go", "build", "-o", builtCaddy.path, "../cmd/caddy").CombinedOutput()
		if err != nil {
			builtCaddy.err = fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
		}
	})
	if builtCaddy.err != nil {
		t.Fatal(builtCaddy.err)
	}
	return builtCaddy.path
}

// waitServing waits until the configuration a reload replaced has let go
// of the port, then until a new connection gets an HTTP answer (any
// status). Caddy binds each configuration's own SO_REUSEPORT socket, so
// while the old one is open the kernel hands it some new connections, and
// net/http closes unanswered any request its server reads after Shutdown
// began: one fresh connection per reload under load (docs/troubleshooting.md).
// An answered probe alone does not prove the old socket is gone, and
// neither does Caddy's usage count, which drops just before the close.
func waitServing(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for listeningSockets(t, port) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the replaced configuration still holds port %d after 10s", port)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not answer after the reload: %v", err)
		}
		t.Logf("after the reload: %v (trying again)", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// listeningSockets counts the sockets listening on port, from the kernel's
// own tables: during a reload the old and the new configuration each hold
// one.
func listeningSockets(t *testing.T, port int) int {
	t.Helper()
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatalf("reading the kernel's socket table: %v", err)
		}
		local := fmt.Sprintf(":%04X", port)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// f[1] is the local address, f[3] the state; 0A is LISTEN.
			if len(f) > 3 && strings.HasSuffix(f[1], local) && f[3] == "0A" {
				n++
			}
		}
	}
	return n
}
