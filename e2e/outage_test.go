package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgserver"
)

// TestGatewayDuringDatabaseOutage stops the control-plane database under a
// running gateway: clusters and keys it already knows keep being served
// (past their cache TTL, within the stale grace), ones it has never seen
// fail closed, and everything recovers when the database is back. It runs
// its own PostgreSQL server so that stopping it touches no other test.
func TestGatewayDuringDatabaseOutage(t *testing.T) {
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.CreateDatabase(ctx, "outage"); err != nil {
		t.Fatal(err)
	}
	dbURL := srv.URL("outage")

	broker := startBroker(t, fakebroker.Options{Name: "outage-cell"})
	cp := newControlPlane(t, dbURL)
	cell := cp.cell("outage-cell", broker.URL(), "")
	tn := cp.tenant("outage")
	known := cp.cluster(tn, "known", cell)
	unseen := cp.cluster(tn, "unseen", cell)
	_, knownKey := cp.key(known.id)
	_, unseenKey := cp.key(unseen.id)
	_, knownSecondKey := cp.key(known.id)
	cp.pool.Close()

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, dbURL, "cache_ttl 300ms\n\t\tdatabase_timeout 1s\n\t\tstale_grace 4s", ""))
	c := client(port)
	get := func(slug, key string) response {
		return do(t, c, "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port), key, "")
	}
	if r := get("known", knownKey); r.status != 200 {
		t.Fatalf("before the outage: %d %s", r.status, r.body)
	}
	probe := func(path string) response {
		// Probes hit the pod address: no cluster hostname.
		return do(t, c, "GET", fmt.Sprintf("http://192.0.2.3:%d%s", port, path), "", "")
	}
	if r := probe("/healthz"); r.status != 200 || r.json(t)["status"] != "ok" {
		t.Fatalf("liveness: %d %s", r.status, r.body)
	}
	if r := probe("/readyz"); r.status != 200 || r.json(t)["database"] != "ok" || r.json(t)["invalidation"] != "listening" {
		t.Fatalf("readiness: %d %s", r.status, r.body)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // past the cache TTL
	for range 3 {
		if r := get("known", knownKey); r.status != 200 {
			t.Fatalf("known cluster during the outage: %d %s", r.status, r.body)
		}
	}
	assertRefusal(t, get("unseen", unseenKey), 421, "cluster_unknown")
	assertRefusal(t, get("known", knownSecondKey), 401, "unauthorized")
	if r := probe("/healthz"); r.status != 200 {
		t.Fatalf("liveness must not depend on the database: %d %s", r.status, r.body)
	}
	// Within the stale grace the gateway still serves what it knows: ready,
	// with the database reported down.
	if r := probe("/readyz"); r.status != 200 || !strings.HasPrefix(fmt.Sprint(r.json(t)["database"]), "unreachable") {
		t.Fatalf("readiness during the outage: %d %s", r.status, r.body)
	}
	if r := probe("/healthz"); r.header.Get("X-Queen-Request-Id") == "" {
		t.Fatal("probe answers carry no x-queen-request-id")
	}
	// Past the stale grace nothing can be served any more: not ready.
	eventually(t, 10*time.Second, func() error {
		if r := probe("/readyz"); r.status != 503 || r.json(t)["status"] != "not ready" {
			return fmt.Errorf("readiness past the stale grace: %d %s", r.status, r.body)
		}
		return nil
	})

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 10*time.Second, func() error {
		if r := get("unseen", unseenKey); r.status != 200 {
			return fmt.Errorf("status %d", r.status)
		}
		return nil
	})
	t.Logf("never-seen cluster served %v after the database came back", took)
	if r := get("known", knownSecondKey); r.status != 200 {
		t.Fatalf("after the outage: %d %s", r.status, r.body)
	}
	if r := probe("/readyz"); r.status != 200 {
		t.Fatalf("readiness after the outage: %d %s", r.status, r.body)
	}
}
