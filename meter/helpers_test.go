package meter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

var (
	migrateOnce sync.Once
	migrateErr  error
)

// db returns a pool on the package database with every migration applied.
func db(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	migrateOnce.Do(func() { _, migrateErr = migrations.Apply(context.Background(), pool) })
	if migrateErr != nil {
		t.Fatalf("migrations: %v", migrateErr)
	}
	return pool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// newCluster creates a tenant, a cell and a cluster on plan and returns the
// cluster id.
func newCluster(t *testing.T, pool *pgxpool.Pool, plan string) string {
	t.Helper()
	cell := scalar[string](t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class)
		VALUES ($1, 'local', 'http://127.0.0.1:6710', 'shared') RETURNING id::text`, "cell-"+randHex(4))
	tenant := scalar[string](t, pool, "SELECT queen_proxy.create_tenant($1, 'Tenant')::text", "t-"+randHex(4))
	return scalar[string](t, pool, "SELECT queen_proxy.create_cluster($1, $2, $3, $4)::text",
		tenant, "c-"+randHex(4), plan, cell)
}

// usage is one usage_minutes row's counters.
type usage struct{ Reqs, Msgs, In, Out int64 }

// totals sums a cluster's usage_minutes rows for op.
func totals(t *testing.T, pool *pgxpool.Pool, cluster string, op Op) usage {
	t.Helper()
	var u usage
	err := pool.QueryRow(ctxT(t), `SELECT coalesce(sum(reqs), 0)::bigint, coalesce(sum(msgs), 0)::bigint,
		coalesce(sum(bytes_in), 0)::bigint, coalesce(sum(bytes_out), 0)::bigint
		FROM queen_proxy.usage_minutes WHERE cluster_id = $1 AND op_class = $2`, cluster, string(op)).
		Scan(&u.Reqs, &u.Msgs, &u.In, &u.Out)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// minuteRow reads one usage_minutes row.
func minuteRow(t *testing.T, pool *pgxpool.Pool, cluster string, minute time.Time, op Op) (usage, bool) {
	t.Helper()
	var u usage
	err := pool.QueryRow(ctxT(t), `SELECT reqs, msgs, bytes_in, bytes_out FROM queen_proxy.usage_minutes
		WHERE cluster_id = $1 AND minute = $2 AND op_class = $3`, cluster, minute, string(op)).
		Scan(&u.Reqs, &u.Msgs, &u.In, &u.Out)
	if err != nil {
		return usage{}, false
	}
	return u, true
}

// clock is an adjustable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// proxyMode is how a flakyProxy treats connections.
type proxyMode int

const (
	proxyUp   proxyMode = iota // forward to PostgreSQL
	proxyDown                  // close every connection at once
	proxyHang                  // accept and never answer
)

// flakyProxy is a TCP proxy in front of the test database that can stop
// answering, so a pool sees the database go down and come back.
type flakyProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   proxyMode
	conns  map[net.Conn]struct{}
}

func newFlakyProxy(t *testing.T) *flakyProxy {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.dropAll()
	})
	return p
}

// url is the package database's URL through the proxy.
func (p *flakyProxy) url(t *testing.T) string {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// pool returns a pool through the proxy.
func (p *flakyProxy) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(p.url(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (p *flakyProxy) set(m proxyMode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
	if m != proxyUp {
		p.dropAll()
	}
}

func (p *flakyProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// trackForwarded keeps a forwarded pair only while the proxy is still up:
// a connection accepted just before set(proxyHang) and dialled just after it
// would otherwise escape dropAll and reach the database.
func (p *flakyProxy) trackForwarded(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil || p.mode != proxyUp {
		return false
	}
	p.conns[c] = struct{}{}
	p.conns[up] = struct{}{}
	return true
}

func (p *flakyProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *flakyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		switch mode {
		case proxyDown:
			c.Close()
		case proxyHang:
			p.track(c)
			go func() { _, _ = io.Copy(io.Discard, c) }()
		default:
			go p.forward(c)
		}
	}
}

func (p *flakyProxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.trackForwarded(c, up) {
		c.Close()
		up.Close()
		return
	}
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
	}()
	_, _ = io.Copy(c, up)
	c.Close()
}

// newMeter returns a Meter with a test logger; cfg.Pool and cfg.SpoolDir
// default to the package database and a temporary directory.
func newMeter(t *testing.T, cfg Config) *Meter {
	t.Helper()
	if cfg.Pool == nil {
		cfg.Pool = db(t)
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// errIs reports errors.Is for tests.
func errIs(err, target error) bool { return errors.Is(err, target) }
