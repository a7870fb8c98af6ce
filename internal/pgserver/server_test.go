package pgserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func queryInt(ctx context.Context, url, sql string) (int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, sql).Scan(&n)
	return n, err
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, Options{})
	if !s.Running() {
		t.Fatal("Running() = false after Start")
	}
	if !strings.HasPrefix(s.URL("x"), "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(s.URL("x"), "/x?sslmode=disable") {
		t.Fatalf("URL = %q", s.URL("x"))
	}
	if err := s.CreateDatabase(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.URL("life"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t(v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var addr string
	if err := conn.QueryRow(ctx, "SELECT inet_server_addr()::text").Scan(&addr); err != nil || addr != "127.0.0.1/32" {
		t.Fatalf("server address %q, %v", addr, err)
	}
	port := s.Port()

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if s.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("query on a stopped server succeeded")
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := queryInt(short, s.URL("life"), "SELECT 1"); err == nil {
		t.Fatal("connect to a stopped server succeeded")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, s.Port())
	}
	if v, err := queryInt(ctx, s.URL("life"), "SELECT v FROM t"); err != nil || v != 42 {
		t.Fatalf("data after restart: %d, %v", v, err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart of a running server: %v", err)
	}
	if err := s.DropDatabase(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if _, err := queryInt(ctx, s.URL("life"), "SELECT 1"); err == nil {
		t.Fatal("dropped database still reachable")
	}
}

func TestCloseKillsAndRemoves(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	pid := s.proc.pid
	s.mu.Unlock()
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("postmaster %d still exists after Close (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Close: %v", dir, err)
	}
}

func TestGivenDirIsKeptAndReused(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	// The server may run as another OS user, which must be able to reach dir.
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "pg")
	s := startServer(t, Options{Dir: dir})
	if err := s.CreateDatabase(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("data directory not kept: %v", err)
	}
	s2 := startServer(t, Options{Dir: dir})
	if n, err := queryInt(ctx, s2.URL("keep"), "SELECT 7"); err != nil || n != 7 {
		t.Fatalf("reused data directory lost database: %d, %v", n, err)
	}
}

func TestMissingBinariesExplainFix(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(EnvBinDir, empty)
	_, err := FindBinDir()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("FindBinDir with bad %s: %v", EnvBinDir, err)
	}
	for _, want := range []string{"apt-get update && apt-get install -y postgresql", "QUEENGATE_TEST_DATABASE_URL", EnvBinDir, empty} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = Start(context.Background(), Options{})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Fatalf("Start with bad %s: %v", EnvBinDir, err)
	}
	_, err = Start(context.Background(), Options{BinDir: empty})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Start with bad BinDir: %v", err)
	}
}

func TestStartFailureIncludesLogTail(t *testing.T) {
	_, err := Start(context.Background(), Options{Settings: map[string]string{"shared_buffers": "nonsense"}})
	if err == nil {
		t.Fatal("Start with an invalid setting succeeded")
	}
	for _, want := range []string{"did not start", "shared_buffers", "apt-get install -y postgresql"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestFindBinDirDefault(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	dir, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := hasServerBinaries(dir); err != nil {
		t.Fatal(err)
	}
}
