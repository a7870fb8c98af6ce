package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

// TestTwoGatewaysStartTogether builds the real binary (go build ./cmd/caddy),
// lists its modules, and starts two gateways at the same moment with
// Caddyfile.example against one empty database: both must come up (the
// migrations serialise on the advisory lock) and both must serve.
func TestTwoGatewaysStartTogether(t *testing.T) {
	bin := caddyBinary(t)
	out, err := exec.Command(bin, "list-modules", "--skip-standard").Output()
	if err != nil {
		t.Fatalf("list-modules: %v", err)
	}
	for _, m := range []string{"queen", "http.handlers.queen_gateway", "http.reverse_proxy.upstreams.queen", "tls.permission.queen"} {
		if !strings.Contains("\n"+string(out), "\n"+m+"\n") {
			t.Errorf("caddy list-modules does not list %s:\n%s", m, out)
		}
	}

	dbURL := pgtest.NewDatabase(t) // empty: the gateways migrate it
	example, err := filepath.Abs("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	ports := []int{freePort(t), freePort(t)}
	for i, port := range ports {
		home := t.TempDir()
		cmd := exec.Command(bin, "run", "--config", example, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(),
			"HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home,
			"QUEENGATE_DATABASE_URL="+dbURL,
			"QUEENGATE_BASE_DOMAIN=eu7.example.test",
			fmt.Sprintf("QUEENGATE_HTTP_PORT=%d", port),
			fmt.Sprintf("QUEENGATE_ADMIN=localhost:%d", freePort(t)),
		)
		logPath := filepath.Join(home, "caddy.log")
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("gateway %d log:\n%s", i, b)
			}
		})
	}

	// Both answer (421 for a cluster that does not exist yet) once started.
	for _, port := range ports {
		c := client(port)
		eventually(t, 30*time.Second, func() error {
			resp, err := c.Get(fmt.Sprintf("http://nobody.eu7.example.test:%d/api/v1/resources/queues", port))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
	}

	// Provision a cluster on the schema they created; both serve it.
	broker := startBroker(t, fakebroker.Options{Name: "binary-cell"})
	cp := newControlPlane(t, dbURL)
	if n, want := cp.scalar(`SELECT count(*)::text FROM queen_proxy.schema_migrations`), strconv.Itoa(len(migrations.Names())); n != want {
		t.Fatalf("%s migrations recorded, want %s", n, want)
	}
	cl := cp.cluster(cp.tenant("binary"), "binary", cp.cell("binary-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)
	for _, port := range ports {
		r := do(t, client(port), "POST", fmt.Sprintf("http://binary.eu7.example.test:%d/api/v1/push", port), key,
			`{"items":[{"queue":"q","payload":1}]}`)
		if r.status != 200 {
			t.Fatalf("push through gateway on %d: %d %s", port, r.status, r.body)
		}
	}
}
