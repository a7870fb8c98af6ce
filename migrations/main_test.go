package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	migrateOnce sync.Once
	migrateErr  error
)

// db returns a pool on the package database with every migration applied.
// The function tests run one after the other (no t.Parallel) because they
// assert the exact set of notifications a call sends.
func db(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	migrateOnce.Do(func() { _, migrateErr = Apply(context.Background(), pool) })
	if migrateErr != nil {
		t.Fatalf("Apply: %v", migrateErr)
	}
	return pool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// uniq returns prefix-<random>, a valid, unused slug.
func uniq(prefix string) string { return prefix + "-" + randHex(4) }

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

// wantPgErr asserts err is a PostgreSQL error with the SQLSTATE code and a
// message containing each of parts.
func wantPgErr(t *testing.T, err error, code string, parts ...string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("want PostgreSQL error %s %q, got %v", code, parts, err)
	}
	if pgErr.Code != code {
		t.Errorf("SQLSTATE = %s, want %s (%s)", pgErr.Code, code, pgErr.Message)
	}
	for _, p := range parts {
		if !strings.Contains(pgErr.Message, p) {
			t.Errorf("message %q does not contain %q", pgErr.Message, p)
		}
	}
}

// callErr runs sql and returns its error (the call is expected to fail).
func callErr(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) error {
	t.Helper()
	_, err := pool.Exec(ctxT(t), sql, args...)
	if err == nil {
		t.Fatalf("%s %v: succeeded, want an error", sql, args)
	}
	return err
}

// Fixtures.

func newCell(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return scalar[string](t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class)
		VALUES ($1, 'local', 'http://127.0.0.1:6710', 'shared') RETURNING id::text`, uniq("cell"))
}

func newTenant(t *testing.T, pool *pgxpool.Pool) (id, slug string) {
	t.Helper()
	slug = uniq("t")
	return scalar[string](t, pool, "SELECT queen_proxy.create_tenant($1, 'Tenant')::text", slug), slug
}

func newCluster(t *testing.T, pool *pgxpool.Pool, tenant, cell string) string {
	t.Helper()
	return scalar[string](t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'free', $3)::text", tenant, uniq("c"), cell)
}

func newUser(t *testing.T, pool *pgxpool.Pool, tenant string) (id, email string) {
	t.Helper()
	email = randHex(4) + "@example.com"
	return scalar[string](t, pool, "SELECT queen_proxy.create_user($1, $2, NULL, 'local')::text", tenant, email), email
}

// Audit rows.

type op struct {
	ClusterID *string
	Actor     string
	ActorID   *string
	Target    *string
	Meta      map[string]any
}

// ops returns the audit rows of tenant with action, oldest first.
func ops(t *testing.T, pool *pgxpool.Pool, tenant, action string) []op {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT cluster_id::text, actor, actor_id::text, target, meta
		FROM queen_proxy.operations WHERE tenant_id = $1 AND action = $2 ORDER BY at, id`, tenant, action)
	if err != nil {
		t.Fatal(err)
	}
	var out []op
	for rows.Next() {
		var o op
		var meta []byte
		if err := rows.Scan(&o.ClusterID, &o.Actor, &o.ActorID, &o.Target, &meta); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(meta, &o.Meta); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// oneOp asserts exactly one audit row with action exists and returns it.
func oneOp(t *testing.T, pool *pgxpool.Pool, tenant, action string) op {
	t.Helper()
	got := ops(t, pool, tenant, action)
	if len(got) != 1 {
		t.Fatalf("%d %q audit rows for tenant %s, want 1", len(got), action, tenant)
	}
	return got[0]
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// Notifications.

// listener is a dedicated connection that LISTENs on InvalidationChannel.
type listener struct {
	conn *pgx.Conn
	pool *pgxpool.Pool
}

func listen(t *testing.T, pool *pgxpool.Pool) *listener {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+InvalidationChannel); err != nil {
		t.Fatal(err)
	}
	l := &listener{conn: conn, pool: pool}
	l.take(t)
	return l
}

// take returns the payloads delivered since the previous take. It sends a
// sentinel notification from another session and reads up to it: PostgreSQL
// delivers notifications in commit order, so everything committed before the
// sentinel has arrived by then.
func (l *listener) take(t *testing.T) []string {
	t.Helper()
	sentinel := "sentinel-" + randHex(8)
	exec(t, l.pool, "SELECT pg_notify($1, $2)", InvalidationChannel, sentinel)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := l.conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for notifications: %v (got %v so far)", err, got)
		}
		if n.Payload == sentinel {
			return got
		}
		got = append(got, n.Payload)
	}
}

// expect asserts the notifications since the previous take are exactly want
// (in any order).
func (l *listener) expect(t *testing.T, want ...string) {
	t.Helper()
	got := l.take(t)
	if len(got) != len(want) {
		t.Fatalf("notifications = %v, want %v", got, want)
	}
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Fatalf("notifications = %v, want %v", got, want)
		}
		seen[w]--
	}
}

// ownMigratedDatabase is a database of the test's own with every migration
// applied, for a test that changes tables or partitions others read.
func ownMigratedDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t))
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// newClusters makes n clusters of one new tenant on one new cell.
func newClusters(t *testing.T, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	tenant, _ := newTenant(t, pool)
	cell := newCell(t, pool)
	clusters := make([]string, n)
	for i := range clusters {
		clusters[i] = newCluster(t, pool, tenant, cell)
	}
	return clusters
}

// rowsFromEnv is the row count a cost test fills: the environment
// variable's positive number when it is set, else def.
func rowsFromEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
