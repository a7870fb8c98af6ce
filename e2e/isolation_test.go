package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// isolationSetup is one cell with two clusters of two tenants, through a
// real Caddy.
type isolationSetup struct {
	cp            *controlPlane
	db            string
	broker        *fakebroker.Broker
	cellID        string
	acme, globex  cluster
	acmeKey, gKey string
	port          int
	metricsPort   int
	c             *http.Client
}

func newIsolationSetup(t *testing.T, prefix string, opts fakebroker.Options) *isolationSetup {
	t.Helper()
	s := &isolationSetup{db: pgtest.NewDatabase(t)}
	s.broker = startBroker(t, opts)
	s.cp = newControlPlane(t, s.db)
	s.cellID = s.cp.cell(prefix+"-cell", s.broker.URL(), "")
	// acme's cluster is created first: on a cell that does not scope it
	// is the one that keeps being served.
	s.acme = s.cp.cluster(s.cp.tenant(prefix+"-acme"), prefix+"-acme", s.cellID)
	s.cp.exec(`UPDATE queen_proxy.clusters SET created_at = now() - interval '1 day' WHERE id = $1::uuid`, s.acme.id)
	s.globex = s.cp.cluster(s.cp.tenant(prefix+"-globex"), prefix+"-globex", s.cellID)
	_, s.acmeKey = s.cp.key(s.acme.id)
	_, s.gKey = s.cp.key(s.globex.id)
	s.port, s.metricsPort = freePort(t), freePort(t)
	s.c = client(s.port)
	return s
}

func (s *isolationSetup) caddyfile(t *testing.T, appOptions string) string {
	return gatewayCaddyfile(s.port, s.db, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir()+"\n\t\t"+appOptions, "") +
		fmt.Sprintf("http://127.0.0.1:%d {\n\tmetrics\n}\n", s.metricsPort)
}

func (s *isolationSetup) url(cl cluster, path string) string {
	return fmt.Sprintf("http://%s.eu1.example.test:%d%s", cl.slug, s.port, path)
}

func (s *isolationSetup) verdict() string {
	return s.cp.scalar(`SELECT tenant_scoping FROM queen_proxy.cells WHERE id = $1::uuid`, s.cellID)
}

// awaitVerdict waits for the gateway to record want for the cell (it
// records after it acts on a verdict).
func (s *isolationSetup) awaitVerdict(t *testing.T, want string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if v := s.verdict(); v != want {
			return fmt.Errorf("cells.tenant_scoping = %q, want %q", v, want)
		}
		return nil
	})
}

// clientRequests is what reached the cell for a cluster's clients: the
// requests that carry a gateway request id and the cluster's tenant.
func clientRequests(b *fakebroker.Broker, cl cluster) int {
	n := 0
	for _, r := range forwarded(b) {
		if r.Tenant() == cl.brokerTenant {
			n++
		}
	}
	return n
}

// TestUnscopedCellServesOnlyItsOldestCluster: on a cell whose broker ignores x-queen-tenant (the public 0.15.1 broker):
// acme's secret must never reach globex, whose cluster shares the cell.
func TestUnscopedCellServesOnlyItsOldestCluster(t *testing.T) {
	s := newIsolationSetup(t, "iso1", fakebroker.Options{IgnoreTenant: true})
	startGateway(t, s.caddyfile(t, ""))

	r := do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"payroll","payload":{"salary":"acme-secret"}}]}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"queued"`) {
		t.Fatalf("acme push: %d %s", r.status, r.body)
	}
	before := len(forwarded(s.broker))
	for _, path := range []string{"/api/v1/pop/queue/payroll?autoAck=true", "/api/v1/resources/queues", "/api/v1/messages?queue=payroll"} {
		r := do(t, s.c, "GET", s.url(s.globex, path), s.gKey, "")
		assertRefusal(t, r, http.StatusServiceUnavailable, "cell_not_isolated")
		if strings.Contains(string(r.body), "acme-secret") || strings.Contains(string(r.body), "payroll") {
			t.Fatalf("globex saw acme's data: %s", r.body)
		}
	}
	r = do(t, s.c, "POST", s.url(s.globex, "/api/v1/push"), s.gKey, `{"items":[{"queue":"payroll","payload":{"salary":"globex"}}]}`)
	assertRefusal(t, r, http.StatusServiceUnavailable, "cell_not_isolated")
	if n := clientRequests(s.broker, s.globex); n != 0 {
		t.Fatalf("%d of globex's requests reached the cell", n)
	}
	if after := len(forwarded(s.broker)); after != before {
		t.Fatalf("the refusals sent %d requests to the cell", after-before)
	}

	// acme keeps being served, and gets its own message.
	r = do(t, s.c, "GET", s.url(s.acme, "/api/v1/pop/queue/payroll?autoAck=true"), s.acmeKey, "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "acme-secret") {
		t.Fatalf("acme pop: %d %s", r.status, r.body)
	}

	// The verdict is in the database, on /readyz and in the metrics; the
	// probe left no queue behind.
	s.awaitVerdict(t, "unscoped")
	ready := do(t, s.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port), "", "")
	if !strings.Contains(ready.json(t)["cell_isolation"].(string), "iso1-cell: unscoped") {
		t.Fatalf("/readyz: %s", ready.body)
	}
	scrape := do(t, http.DefaultClient, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", s.metricsPort), "", "")
	for _, want := range []string{`queengate_cell_tenant_scoping{cell="iso1-cell",verdict="unscoped"} 1`,
		`queengate_cell_tenant_scoping{cell="iso1-cell",verdict="scoped"} 0`, `queengate_refusals_total{code="cell_not_isolated"}`} {
		if !strings.Contains(string(scrape.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if names := s.broker.QueueNames(""); strings.Join(names, ",") != "payroll" {
		t.Fatalf("queues on the cell: %v, want only payroll", names)
	}

	// A restart (a new backend: a changed setting) keeps the same keeper.
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 59m"))
	if r := do(t, s.c, "GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, ""); r.status != http.StatusOK {
		t.Fatalf("acme after restart: %d %s", r.status, r.body)
	}
	assertRefusal(t, do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""),
		http.StatusServiceUnavailable, "cell_not_isolated")

	// The probes were never anybody's usage; globex was billed nothing.
	// (The restart flushed the old backend's open minute.)
	eventually(t, 10*time.Second, func() error {
		if _, msgs := s.cp.usageOf(s.acme.id, "push"); msgs != 1 {
			return fmt.Errorf("acme's push not flushed yet (%d messages)", msgs)
		}
		return nil
	})
	for _, op := range []string{"push", "delivery", "read", "configure", "txn"} {
		if reqs, msgs := s.cp.usageOf(s.globex.id, op); reqs != 0 || msgs != 0 {
			t.Errorf("globex billed %d requests, %d messages of %s for refused requests", reqs, msgs, op)
		}
	}
	if reqs, _ := s.cp.usageOf(s.acme.id, "configure"); reqs != 0 {
		t.Errorf("acme billed %d configure requests: the probe's?", reqs)
	}

	// The CLI refuses to place a third cluster on the cell, or move one
	// onto it.
	q := cliFor(t)(s.db)
	tenant := "iso1-acme"
	r3 := q.run(t, nil, "", "cluster", "create", "iso1-third", "--tenant", tenant, "--plan", "pro", "--cell", "iso1-cell")
	if r3.code != 1 || !strings.Contains(r3.stderr, "does not scope by x-queen-tenant") || !strings.Contains(r3.stderr, "dedicated cell") {
		t.Fatalf("cluster create on an unscoped cell: exit %d, stderr %q", r3.code, r3.stderr)
	}
	other := s.cp.cell("iso1-other", "http://127.0.0.1:1", "")
	moved := s.cp.cluster(s.cp.tenant("iso1-initech"), "iso1-initech", other)
	r4 := q.run(t, nil, "", "cluster", "move", moved.slug, "--to", "iso1-cell")
	if r4.code != 1 || !strings.Contains(r4.stderr, "does not scope by x-queen-tenant") {
		t.Fatalf("cluster move onto an unscoped cell: exit %d, stderr %q", r4.code, r4.stderr)
	}
	cells := q.ok(t, "cell", "list")
	if !strings.Contains(cells, "TENANT SCOPING") || !strings.Contains(cells, "unscoped (") {
		t.Fatalf("cell list does not show the verdict:\n%s", cells)
	}
}

// TestScopedCellServesEveryClusterApart: on a broker that scopes by
// x-queen-tenant both clusters are served, each in its own namespace.
func TestScopedCellServesEveryClusterApart(t *testing.T) {
	s := newIsolationSetup(t, "iso2", rustCell)
	startGateway(t, s.caddyfile(t, ""))

	r := do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"payroll","payload":{"salary":"acme-secret"}}]}`)
	if r.status != http.StatusCreated {
		t.Fatalf("acme push: %d %s", r.status, r.body)
	}
	pop := do(t, s.c, "GET", s.url(s.globex, "/api/v1/pop/queue/payroll?autoAck=true"), s.gKey, "")
	if pop.status/100 != 2 || strings.Contains(string(pop.body), "acme-secret") {
		t.Fatalf("globex pop on a scoped cell: %d %s", pop.status, pop.body)
	}
	list := do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, "")
	if list.status != http.StatusOK || strings.Contains(string(list.body), "payroll") {
		t.Fatalf("globex queue list: %d %s", list.status, list.body)
	}
	if clientRequests(s.broker, s.globex) != 2 {
		t.Fatalf("globex's requests did not reach the cell")
	}
	s.awaitVerdict(t, "scoped")
	// A third cluster may join a scoped cell.
	s.cp.cluster(s.cp.tenant("iso2-initech"), "iso2-initech", s.cellID)
}

// TestCellThatChangesBehaviourIsReprobed: the verdict follows the broker,
// at the probe interval and when the cell comes back after it was
// unreachable (another broker may answer there now).
func TestCellThatChangesBehaviourIsReprobed(t *testing.T) {
	s := newIsolationSetup(t, "iso3", rustCell)
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 1s"))
	queues := func(cl cluster, key string) response {
		return do(t, s.c, "GET", s.url(cl, "/api/v1/resources/queues"), key, "")
	}
	if r := queues(s.globex, s.gKey); r.status != http.StatusOK {
		t.Fatalf("globex on a scoped cell: %d %s", r.status, r.body)
	}

	// The broker loses tenancy: within the interval, globex is refused.
	s.broker.SetIgnoreTenant(true)
	eventually(t, 10*time.Second, func() error {
		if r := queues(s.globex, s.gKey); r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("globex still answered %d", r.status)
		}
		return nil
	})
	s.awaitVerdict(t, "unscoped")
	// It gains it back: globex is served again.
	s.broker.SetIgnoreTenant(false)
	eventually(t, 10*time.Second, func() error {
		if r := queues(s.globex, s.gKey); r.status != http.StatusOK {
			return fmt.Errorf("globex answered %d", r.status)
		}
		return nil
	})

	// The cell goes away and a broker without tenancy answers at its
	// address: the failed request resets the verdict, and globex is
	// refused by the re-probe without waiting for the interval.
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 1h"))
	if r := queues(s.globex, s.gKey); r.status != http.StatusOK {
		t.Fatalf("globex after reload: %d %s", r.status, r.body)
	}
	addr := strings.TrimPrefix(s.broker.URL(), "http://")
	_ = s.broker.Close()
	if r := queues(s.acme, s.acmeKey); r.status != http.StatusBadGateway {
		t.Fatalf("acme with the cell down: %d %s", r.status, r.body)
	}
	replacement := fakebroker.New(fakebroker.Options{IgnoreTenant: true})
	if _, err := replacement.Listen(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replacement.Close() })
	r := queues(s.globex, s.gKey)
	assertRefusal(t, r, http.StatusServiceUnavailable, "cell_not_isolated")
	// The refusal came from the re-probe's verdict, not from waiting.
	ready := do(t, s.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port), "", "")
	if !strings.Contains(ready.json(t)["cell_isolation"].(string), "iso3-cell: unscoped") {
		t.Fatalf("/readyz right after the refusal: %s", ready.body)
	}
	s.awaitVerdict(t, "unscoped")
	if n := clientRequests(replacement, s.globex); n != 0 {
		t.Fatalf("%d of globex's requests reached the replacement broker", n)
	}
	if r := queues(s.acme, s.acmeKey); r.status != http.StatusOK {
		t.Fatalf("acme on the replacement: %d %s", r.status, r.body)
	}
}
