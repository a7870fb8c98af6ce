// Package pgtest gives each test package its own fresh PostgreSQL database.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// When QUEENGATE_TEST_DATABASE_URL is set (a URL whose user may create
// databases), the databases are created on that server; otherwise Main starts
// a throwaway server with internal/pgserver. Either way the package's
// database is dropped after the tests. When PostgreSQL cannot be found or
// started, Main prints how to install it and fails: tests never skip for a
// missing database.
//
// Tests that create rows under fixed names use MainWith and
// Options.DatabasePerTest, so that URL and Pool give each test its own
// database and the tests pass again under -count=N.
//
// This package is for _test.go files only.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgserver"
)

// EnvDatabaseURL names the environment variable with the URL of an existing
// server to create the test databases on (any database on it; the path is
// replaced).
const EnvDatabaseURL = "QUEENGATE_TEST_DATABASE_URL"

// state is set up once by Main.
var state struct {
	mu       sync.Mutex
	ready    bool
	adminURL string
	dbName   string
	dbURL    string
	server   *pgserver.Server  // nil with an external server
	perTest  map[string]string // test name -> its database URL, with Options.DatabasePerTest
}

// Options adjust MainWith.
type Options struct {
	// DatabasePerTest makes URL and Pool give every test a fresh database
	// of its own (a subtest shares its parent's when the parent asked
	// first), dropped when the test ends, instead of the package's one. For
	// tests that create rows with fixed names: they then pass again under
	// -count=N.
	DatabasePerTest bool
}

// Main provisions the package database, runs the tests and removes the
// database (and the throwaway server). It returns the exit code for os.Exit.
func Main(m *testing.M) int { return MainWith(m, Options{}) }

// MainWith is Main with options.
func MainWith(m *testing.M, opts Options) int {
	if opts.DatabasePerTest {
		state.mu.Lock()
		state.perTest = make(map[string]string)
		state.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := setup(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: cannot provide a PostgreSQL database for the tests: %v\n", err)
		teardown()
		return 1
	}
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: cleanup: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func setup(ctx context.Context) error {
	state.mu.Lock()
	defer state.mu.Unlock()
	if external := os.Getenv(EnvDatabaseURL); external != "" {
		admin, err := withDatabase(external, "postgres")
		if err != nil {
			return fmt.Errorf("%s: %w", EnvDatabaseURL, err)
		}
		state.adminURL = admin
	} else {
		srv, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			return err
		}
		state.server = srv
		state.adminURL = srv.URL("postgres")
	}
	name := uniqueName(packageName())
	if err := createDatabase(ctx, state.adminURL, name); err != nil {
		return err
	}
	state.dbName = name
	state.dbURL, _ = withDatabase(state.adminURL, name)
	state.ready = true
	return nil
}

func teardown() error {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.ready = false
	var firstErr error
	if state.dbName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		firstErr = dropDatabase(ctx, state.adminURL, state.dbName)
		cancel()
		state.dbName = ""
	}
	if state.server != nil {
		if err := state.server.Close(); err != nil && firstErr == nil {
			firstErr = err
		}
		state.server = nil
	}
	return firstErr
}

// mustReady fails t when Main has not provisioned the database.
func mustReady(t testing.TB) {
	t.Helper()
	state.mu.Lock()
	ok := state.ready
	state.mu.Unlock()
	if !ok {
		t.Fatal("pgtest: no database; add `func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }` to the package")
	}
}

// URL returns the URL of this test package's database (with
// Options.DatabasePerTest, of this test's).
func URL(t testing.TB) string {
	t.Helper()
	mustReady(t)
	state.mu.Lock()
	perTest := state.perTest != nil
	if !perTest {
		state.mu.Unlock()
		return state.dbURL
	}
	for name := t.Name(); ; {
		if u, ok := state.perTest[name]; ok {
			state.mu.Unlock()
			return u
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			break
		}
		name = name[:i]
	}
	state.mu.Unlock()
	u := NewDatabase(t)
	name := t.Name()
	state.mu.Lock()
	state.perTest[name] = u
	state.mu.Unlock()
	// Runs before NewDatabase's drop; a later run of the same test
	// (-count=N) gets a new database.
	t.Cleanup(func() {
		state.mu.Lock()
		delete(state.perTest, name)
		state.mu.Unlock()
	})
	return u
}

// AdminURL returns the URL of the server's maintenance database ("postgres").
// It is empty before Main has set up the server.
func AdminURL() string {
	state.mu.Lock()
	defer state.mu.Unlock()
	return state.adminURL
}

// Server returns the throwaway server, or nil when the tests use the server
// named by QUEENGATE_TEST_DATABASE_URL. Tests that stop and restart the
// database need their own pgserver.Server rather than this shared one.
func Server() *pgserver.Server {
	state.mu.Lock()
	defer state.mu.Unlock()
	return state.server
}

// Pool returns a pool on this package's database, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolFor(t, URL(t))
}

// PoolFor returns a pool on the database at url, closed when t ends.
func PoolFor(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("pgtest: ping: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewDatabase creates an additional empty database, dropped when t ends
// (after pools registered later with t.Cleanup are closed), and returns its
// URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	mustReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := uniqueName(packageName() + "_x")
	if err := createDatabase(ctx, state.adminURL, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, state.adminURL, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	u, _ := withDatabase(state.adminURL, name)
	return u
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	return adminExec(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

func dropDatabase(ctx context.Context, adminURL, name string) error {
	return adminExec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// withDatabase returns rawURL with its database replaced by name.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("want a postgres:// URL, got %q", redact(rawURL))
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// redact hides a password in a URL for error messages.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// packageName derives a short identifier from the test binary's name.
func packageName() string {
	base := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	base = unsafeChars.ReplaceAllString(strings.ToLower(base), "_")
	if len(base) > 30 {
		base = base[:30]
	}
	if base == "" {
		base = "pkg"
	}
	return base
}

// uniqueName returns qg_<prefix>_<random hex>, a valid database name.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "qg_" + prefix + "_" + hex.EncodeToString(b[:])
}
