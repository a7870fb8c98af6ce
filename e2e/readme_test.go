package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// walkThrough returns the README's walk-through block as printed.
func walkThrough(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- walk-through -->\\s*```sh\\n(.*?)```\\s*<!-- /walk-through -->").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no walk-through block")
	}
	return string(m[1])
}

// walkThroughPorts are the loopback ports the walk-through uses as printed:
// the fake broker, the gateway and Caddy's admin endpoint.
var walkThroughPorts = []string{"127.0.0.1:6632", "127.0.0.1:8080", "127.0.0.1:2019"}

// TestREADMEWalkThrough runs the README's walk-through exactly as printed:
// the block goes to bash unchanged, from the repository root, as on a fresh
// machine: no caddy, fakebroker or devdb on PATH, no
// QUEENGATE_DATABASE_URL, nothing running, only Go (and its caches, so
// that the build takes seconds) and the ports free. The push must be
// queued and the usage it prints must bill that one push.
func TestREADMEWalkThrough(t *testing.T) {
	script := walkThrough(t)
	for _, addr := range walkThroughPorts {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the walk-through needs %s free: %v", addr, err)
		}
		l.Close()
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("the walk-through runs curl: %v", err)
	}

	for _, cmd := range []string{"caddy", "fakebroker", "devdb"} {
		if p, err := exec.LookPath(cmd); err == nil {
			t.Fatalf("%s is on PATH (%s): the walk-through must work without it", cmd, p)
		}
	}
	// What the walk-through builds and writes in the repository, removed
	// after it unless it was there before.
	for _, made := range []string{"../bin", "../devdb.env"} {
		if _, err := os.Stat(made); err == nil {
			t.Fatalf("%s exists before the walk-through: remove it", made)
		}
		t.Cleanup(func() { _ = os.RemoveAll(made) })
	}
	// Go's caches as the machine has them, so the build is the warm one a
	// returning reader gets; HOME is fresh.
	var goEnv []string
	for _, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		v, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		goEnv = append(goEnv, name+"="+strings.TrimSpace(string(v)))
	}
	home := t.TempDir()
	env := append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
	}, goEnv...)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		// What the walk-through's Caddyfile and commands would read besides.
		if !strings.HasPrefix(name, "QUEENGATE_") && !slices.Contains([]string{"PATH", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "GOCACHE", "GOMODCACHE", "GOPATH"}, name) {
			env = append(env, kv)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Files, not pipes: what the walk-through leaves running when a line
	// fails holds them open, and Wait would wait for it.
	logs := t.TempDir()
	stdout, err := os.Create(filepath.Join(logs, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(logs, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	// -e: a line that fails ends the run there, as a reader would stop.
	sh := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	sh.Dir = ".."
	sh.Env = env
	sh.Stdout, sh.Stderr = stdout, stderr
	// Its own process group, so that what it leaves running in the
	// background (the fake broker, Caddy) is stopped with it on failure.
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) })
	runErr := sh.Wait()
	out, err := os.ReadFile(stdout.Name())
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("the walk-through failed: %v\nstdout:\n%s\nstderr:\n%s", runErr, out, errOut)
	}

	printed := string(out)
	if !strings.Contains(printed, `"status":"queued"`) {
		t.Fatalf("the walk-through's push was not queued:\n%s\nstderr:\n%s", printed, errOut)
	}
	// usage --cluster acme-prod prints a table: its header, then the cluster.
	rows := lines(printed[strings.Index(printed, `"status":"queued"`):])
	header := slices.IndexFunc(rows, func(r []string) bool { return slices.Contains(r, "BILLABLE MSGS") })
	if header < 0 || header+1 >= len(rows) || rows[header+1][0] != "acme-prod" {
		t.Fatalf("the walk-through printed no usage row for acme-prod:\n%s", printed)
	}
	pushed := slices.Index(rows[header], "BILLABLE MSGS")
	if got := rows[header+1][pushed]; got != "1" {
		t.Fatalf("usage bills %s pushed messages, want the walk-through's one push:\n%s", got, printed)
	}
	// It cleans up after itself: the gateway and the fake broker are gone.
	for _, addr := range walkThroughPorts {
		pollEvery(t, 10*time.Second, 100*time.Millisecond, func() error {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s is still in use after the walk-through: %w", addr, err)
			}
			return l.Close()
		})
	}
}
