package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevCommandFromREADME runs README's first command the way a newcomer
// does (no database configured, no broker running) and follows the printed
// instructions: push and pop through the gateway with the printed key.
func TestDevCommandFromREADME(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "queengate-dev")
	build := exec.Command("go", "build", "-o", bin, "../cmd/queengate-dev")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/queengate-dev: %v\n%s", err, out)
	}
	port := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"QUEENGATE_DATABASE_URL=",
		fmt.Sprintf("QUEENGATE_HTTP_PORT=%d", port),
		fmt.Sprintf("QUEENGATE_BROKER_URL=http://127.0.0.1:%d", freePort(t)),
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var printed strings.Builder
	keyPattern := regexp.MustCompile(`Dev API key \(shown once\): (qk_dev_[A-Za-z0-9_-]{43})`)
	var key string
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(printed.String(), "Press Ctrl-C to stop.") {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("queengate-dev exited early:\n%s\nstderr:\n%s", printed.String(), stderr.String())
			}
			printed.WriteString(line + "\n")
			if m := keyPattern.FindStringSubmatch(line); m != nil {
				key = m[1]
			}
		case <-deadline:
			t.Fatalf("queengate-dev not ready within 2 minutes:\n%s\nstderr:\n%s", printed.String(), stderr.String())
		}
	}
	go func() {
		for range lines { // keep draining so the program never blocks on stdout
		}
	}()
	if key == "" || !strings.Contains(printed.String(), "IN-MEMORY FAKE BROKER") {
		t.Fatalf("output lacks the key or the fake-broker label:\n%s", printed.String())
	}

	c := client(port)
	base := fmt.Sprintf("http://dev.localhost:%d", port)
	r := do(t, c, "POST", base+"/api/v1/push", key, `{"items":[{"queue":"hello","payload":{"msg":"hi"}}]}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"status":"queued"`) {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	r = do(t, c, "GET", base+"/api/v1/pop/queue/hello?batch=10", key, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"msg":"hi"`) {
		t.Fatalf("pop: %d %s", r.status, r.body)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("queengate-dev exit: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("queengate-dev did not stop within 30s of SIGINT")
	}
}
