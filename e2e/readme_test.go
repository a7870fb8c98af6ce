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

	"github.com/queengate/queengate/internal/pgtest"
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
// the block goes to bash unchanged, from the repository root, with what the
// README says it needs first (caddy and fakebroker on PATH, an empty
// database in QUEENGATE_DATABASE_URL, its ports free). The push must be
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

	bin := t.TempDir()
	if err := os.Symlink(caddyBinary(t), filepath.Join(bin, "caddy")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "fakebroker"), "../cmd/fakebroker").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fakebroker: %v\n%s", err, out)
	}
	home := t.TempDir()
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
		"QUEENGATE_DATABASE_URL=" + pgtest.NewDatabase(t),
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		// What the walk-through's Caddyfile and commands would read besides.
		if !strings.HasPrefix(name, "QUEENGATE_") && !slices.Contains([]string{"PATH", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"}, name) {
			env = append(env, kv)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
