package pgtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestPackageDatabase(t *testing.T) {
	ctx := context.Background()
	pool := Pool(t)
	var name string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "qg_pgtest_") {
		t.Fatalf("database name %q does not start with qg_pgtest_", name)
	}
	if !strings.Contains(URL(t), "/"+name+"?") {
		t.Fatalf("URL %q does not name database %q", URL(t), name)
	}
	if os.Getenv(EnvDatabaseURL) == "" && Server() == nil {
		t.Fatal("Server() = nil without an external database")
	}
}

func TestNewDatabaseIsFreshAndDropped(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		ctx := context.Background()
		url := NewDatabase(t)
		pool := PoolFor(t, url)
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name == "" || strings.Contains(URL(t), "/"+name+"?") {
			t.Fatalf("NewDatabase returned the package database %q", name)
		}
		var tables int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil || tables != 0 {
			t.Fatalf("fresh database has %d tables (%v)", tables, err)
		}
		if !databaseExists(t, name) {
			t.Fatalf("database %q does not exist", name)
		}
	})
	if databaseExists(t, name) {
		t.Fatalf("database %q survived its test", name)
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://u:p@h:5/old?sslmode=disable", "new")
	if err != nil || got != "postgres://u:p@h:5/new?sslmode=disable" {
		t.Fatalf("withDatabase = %q, %v", got, err)
	}
	if _, err := withDatabase("host=h dbname=x", "new"); err == nil {
		t.Fatal("keyword/value string accepted")
	}
	if n := uniqueName("a"); len(n) != len("qg_a_")+12 || !strings.HasPrefix(n, "qg_a_") {
		t.Fatalf("uniqueName = %q", n)
	}
}

// childRun runs one test of this binary in a child process with extra env.
func childRun(t *testing.T, test string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMainFailsLoudlyWithoutPostgres(t *testing.T) {
	out, err := childRun(t, "TestPackageDatabase", "QUEENGATE_PG_BIN="+t.TempDir(), EnvDatabaseURL+"=")
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("child exit = %v, want exit code 1\n%s", err, out)
	}
	if !strings.Contains(out, "apt-get update && apt-get install -y postgresql") || strings.Contains(out, "SKIP") {
		t.Fatalf("child output lacks the install hint:\n%s", out)
	}
}

func TestMainUsesExternalDatabase(t *testing.T) {
	out, err := childRun(t, "TestExternalChild", EnvDatabaseURL+"="+AdminURL(), "PGTEST_EXPECT_EXTERNAL=1")
	if err != nil || !strings.Contains(out, "--- PASS: TestExternalChild") {
		t.Fatalf("child with %s failed: %v\n%s", EnvDatabaseURL, err, out)
	}
}

// TestExternalChild is the body of TestMainUsesExternalDatabase's child.
func TestExternalChild(t *testing.T) {
	if os.Getenv("PGTEST_EXPECT_EXTERNAL") == "" {
		return // only meaningful in the child process
	}
	if Server() != nil {
		t.Fatal("a throwaway server was started although an external URL was given")
	}
	if host := strings.Split(AdminURL(), "/")[2]; !strings.Contains(os.Getenv(EnvDatabaseURL), host) {
		t.Fatalf("AdminURL %q is not on the external server %q", AdminURL(), os.Getenv(EnvDatabaseURL))
	}
	var one int
	if err := Pool(t).QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query: %d %v", one, err)
	}
}

func databaseOf(t *testing.T, url string) string {
	t.Helper()
	i := strings.LastIndexByte(url, '/')
	name, _, _ := strings.Cut(url[i+1:], "?")
	return name
}

func TestDatabasePerTest(t *testing.T) {
	state.mu.Lock()
	state.perTest = make(map[string]string)
	state.mu.Unlock()
	t.Cleanup(func() {
		state.mu.Lock()
		state.perTest = nil
		state.mu.Unlock()
	})
	var first, second string
	for run, got := range []*string{&first, &second} {
		t.Run("test", func(t *testing.T) {
			u := URL(t)
			if u == state.dbURL {
				t.Fatal("URL gave the package database")
			}
			if again := URL(t); again != u {
				t.Fatalf("a second URL in the same test: %s, want %s", again, u)
			}
			t.Run("sub", func(t *testing.T) {
				if sub := URL(t); sub != u {
					t.Fatalf("a subtest got %s, want its parent's %s", sub, u)
				}
			})
			if !databaseExists(t, databaseOf(t, u)) {
				t.Fatalf("run %d: database of %s missing", run, u)
			}
			*got = u
		})
	}
	if first == "" || second == "" || first == second {
		t.Fatalf("two runs of one test got %q and %q, want two databases", first, second)
	}
	for _, u := range []string{first, second} {
		if databaseExists(t, databaseOf(t, u)) {
			t.Errorf("database of %s outlived its test", u)
		}
	}
	state.mu.Lock()
	left := len(state.perTest)
	state.mu.Unlock()
	if left != 0 {
		t.Errorf("%d per-test databases still listed", left)
	}
}
