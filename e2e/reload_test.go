package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestReloadKeepsTheBackend reloads the configuration under a running
// gateway: the database pool, the cache and the one LISTEN connection
// carry over (no second listener, no gap in invalidation), and traffic
// keeps flowing.
func TestReloadKeepsTheBackend(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "reload-cell"})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("reload-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("reload"), "reload", cell)
	_, key := cp.key(cl.id)

	// The backend pid of the LISTEN connection identifies it; a reload
	// that rebuilt the backend would show a different one.
	listeners := func() string {
		return cp.scalar(`SELECT count(*)::text || ' ' || coalesce(min(pid), 0)::text FROM pg_stat_activity
			WHERE application_name = 'queengate-listen' AND datname = current_database()`)
	}
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	c := client(port)
	url := fmt.Sprintf("http://reload.eu1.example.test:%d/api/v1/resources/queues", port)
	if r := do(t, c, "GET", url, key, ""); r.status != 200 {
		t.Fatalf("before reload: %d %s", r.status, r.body)
	}
	before := listeners()
	if before[:2] != "1 " {
		t.Fatalf("listeners (count pid) before reload: %s, want one", before)
	}

	reloaded, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(
		[]byte(gatewayCaddyfile(port, pgtest.URL(t), "", "upstream_timeout 20s")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(reloaded, false); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitServing(t, port)
	// The old server closes its idle keep-alive connections; a request
	// racing that close would see EOF, which is not what this test is about.
	c.CloseIdleConnections()
	if r := do(t, c, "GET", url, key, ""); r.status != 200 {
		t.Fatalf("after reload: %d %s", r.status, r.body)
	}
	if after := listeners(); after != before {
		t.Fatalf("listeners (count pid) after reload: %s, want the same single one as before: %s", after, before)
	}
	cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, cl.id)
	eventually(t, time.Second, func() error {
		if r := do(t, c, "GET", url, key, ""); r.status != 403 {
			return fmt.Errorf("status %d", r.status)
		}
		return nil
	})
}
