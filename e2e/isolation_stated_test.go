package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
)

func probeConfigures(b *fakebroker.Broker) int {
	n := 0
	for _, r := range b.Requests() {
		if r.Path == "/api/v1/configure" && r.Header.Get("X-Queen-Request-Id") == "" {
			n++
		}
	}
	return n
}

// TestStatedScopedContradictedByTheProbe: the operator states scoped, the
// broker ignores x-queen-tenant. Only the keeper is served, and the
// contradiction shows on the metric, /readyz and in the database.
func TestStatedScopedContradictedByTheProbe(t *testing.T) {
	s := newIsolationSetup(t, "iso8", fakebroker.Options{IgnoreTenant: true})
	s.cp.exec(`UPDATE queen_proxy.cells SET tenancy_stated = 'scoped' WHERE id = $1::uuid`, s.cellID)
	startGateway(t, s.caddyfile(t, ""))

	assertRefusal(t, do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""),
		http.StatusServiceUnavailable, "cell_not_isolated")
	if r := do(t, s.c, "GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, ""); r.status != http.StatusOK {
		t.Fatalf("keeper: %d %s", r.status, r.body)
	}
	if n := clientRequests(s.broker, s.globex); n != 0 {
		t.Fatalf("%d of globex's requests reached the cell", n)
	}
	ready := do(t, s.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port), "", "")
	if iso := ready.json(t)["cell_isolation"].(string); !strings.Contains(iso, "iso8-cell: unscoped (CONTRADICTS") {
		t.Fatalf("/readyz: %s", ready.body)
	}
	scrape := do(t, http.DefaultClient, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", s.metricsPort), "", "")
	if !strings.Contains(string(scrape.body), `queengate_cell_tenancy_contradicted{cell="iso8-cell"} 1`) {
		t.Fatalf("metrics lack the contradiction")
	}
	s.awaitVerdict(t, "unscoped")
	if d := s.cp.scalar(`SELECT tenant_scoping_detail FROM queen_proxy.cells WHERE id = $1::uuid`, s.cellID); !strings.HasPrefix(d, "CONTRADICTION:") || !strings.Contains(d, "cell update") {
		t.Fatalf("database detail %q", d)
	}
}

// TestStatedUnscopedIsNotProbedUntilTheStatementChanges: a cell stated
// unscoped serves its keeper only, even on a broker with tenancy, and is
// not probed; stating probe instead resets it and the probe serves all.
func TestStatedUnscopedIsNotProbedUntilTheStatementChanges(t *testing.T) {
	s := newIsolationSetup(t, "iso9", rustCell)
	s.cp.exec(`UPDATE queen_proxy.cells SET tenancy_stated = 'unscoped' WHERE id = $1::uuid`, s.cellID)
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 1s"))

	assertRefusal(t, do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""),
		http.StatusServiceUnavailable, "cell_not_isolated")
	if r := do(t, s.c, "GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, ""); r.status != http.StatusOK {
		t.Fatalf("keeper: %d %s", r.status, r.body)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := probeConfigures(s.broker); n != 0 {
		t.Fatalf("a cell stated unscoped was probed %d times", n)
	}
	ready := do(t, s.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port), "", "")
	if iso := ready.json(t)["cell_isolation"].(string); !strings.Contains(iso, "stated unscoped") {
		t.Fatalf("/readyz: %s", ready.body)
	}

	s.cp.exec(`UPDATE queen_proxy.cells SET tenancy_stated = 'probe' WHERE id = $1::uuid`, s.cellID)
	eventually(t, 10*time.Second, func() error {
		if r := do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""); r.status != http.StatusOK {
			return fmt.Errorf("globex answered %d", r.status)
		}
		return nil
	})
	if n := probeConfigures(s.broker); n < 3 {
		t.Fatalf("served as scoped after %d probes, want at least 3", n)
	}
	s.awaitVerdict(t, "scoped")
}

// TestChangedCellURLResetsTheVerdict: the operator points a scoped cell
// at another broker, one without tenancy. The database resets the verdict
// in the same statement; the gateway stops serving the second cluster and
// probes the new broker at once, without waiting for the interval.
func TestChangedCellURLResetsTheVerdict(t *testing.T) {
	s := newIsolationSetup(t, "iso10", rustCell)
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 1h"))
	// The first request of a non-keeper waits for the three confirming
	// probes, and is served.
	start := time.Now()
	if r := do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""); r.status != http.StatusOK {
		t.Fatalf("globex on a scoped cell: %d %s", r.status, r.body)
	}
	t.Logf("first request of the second cluster served after %v (three probes of a local scoping broker)", time.Since(start))
	s.awaitVerdict(t, "scoped")

	other := fakebroker.New(fakebroker.Options{IgnoreTenant: true})
	otherURL, err := other.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	s.cp.exec(`UPDATE queen_proxy.cells SET base_url = $2 WHERE id = $1::uuid`, s.cellID, otherURL)
	if v := s.verdict(); v != "unknown" {
		t.Fatalf("cells.tenant_scoping right after the URL changed: %q", v)
	}
	eventually(t, 10*time.Second, func() error {
		r := do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, "")
		if r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("globex answered %d", r.status)
		}
		return nil
	})
	s.awaitVerdict(t, "unscoped")
	if probeConfigures(other) == 0 {
		t.Fatal("the new broker was never probed")
	}
	if n := clientRequests(other, s.globex); n != 0 {
		t.Fatalf("%d of globex's requests reached the new, unscoped broker", n)
	}
	if r := do(t, s.c, "GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, ""); r.status != http.StatusOK {
		t.Fatalf("keeper on the new broker: %d %s", r.status, r.body)
	}
}
