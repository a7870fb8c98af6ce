package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestCaddyfileExampleLoadsVerbatim loads the repository's
// Caddyfile.example, unchanged, with only its documented environment
// variables set, and pushes through it.
func TestCaddyfileExampleLoadsVerbatim(t *testing.T) {
	example, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	broker := startBroker(t, fakebroker.Options{Name: "example-cell"})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("example-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("example"), "example", cell)
	_, key := cp.key(cl.id)

	port := freePort(t)
	t.Setenv("QUEENGATE_DATABASE_URL", pgtest.URL(t))
	t.Setenv("QUEENGATE_BASE_DOMAIN", "eu9.example.test")
	t.Setenv("QUEENGATE_HTTP_PORT", fmt.Sprint(port))
	t.Setenv("QUEENGATE_ADMIN", fmt.Sprintf("localhost:%d", freePort(t)))
	startGateway(t, string(example))

	c := client(port)
	r := do(t, c, "POST", fmt.Sprintf("http://example.eu9.example.test:%d/api/v1/push", port), key,
		`{"items":[{"queue":"from-example","payload":1}]}`)
	if r.status != 200 {
		t.Fatalf("push through Caddyfile.example: %d %s", r.status, r.body)
	}
	assertRefusal(t, do(t, c, "GET", fmt.Sprintf("http://other.eu9.example.test:%d/health", port), key, ""), 421, "cluster_unknown")
}
