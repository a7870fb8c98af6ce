package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestKeeperDataNeverPassesOn, end to end, on a cell whose broker ignores
// x-queen-tenant: a cluster moved in later never
// takes the cell from its keeper, and the keeper leaves (cluster move) only
// once its queues are gone from the broker, so the next keeper is served
// nothing of the old keeper's data.
func TestKeeperDataNeverPassesOn(t *testing.T) {
	s := newIsolationSetup(t, "keep", fakebroker.Options{IgnoreTenant: true})
	away := fakebroker.New(fakebroker.Options{IgnoreTenant: true})
	awayURL, err := away.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = away.Close() })
	awayID := s.cp.cell("keep-away", awayURL, "")
	q := cliFor(t)(s.db)
	keeperOf := func() string {
		t.Helper()
		var cells []struct {
			Slug   string
			Keeper string `json:"keeper_cluster"`
		}
		q.okJSON(t, &cells, "cell", "list")
		for _, c := range cells {
			if c.Slug == "keep-cell" {
				return c.Keeper
			}
		}
		t.Fatalf("no keep-cell in %+v", cells)
		return ""
	}

	// An older cluster moved onto the cell does not demote its keeper.
	initech := s.cp.cluster(s.cp.tenant("keep-initech"), "keep-initech", awayID)
	s.cp.exec(`UPDATE queen_proxy.clusters SET created_at = now() - interval '30 days' WHERE id = $1::uuid`, initech.id)
	q.ok(t, "cluster", "move", initech.slug, "--to", "keep-cell")
	if k := keeperOf(); k != s.acme.slug {
		t.Fatalf("keeper after an older cluster moved in: %q, want %q", k, s.acme.slug)
	}
	// initech left keep-away empty, which remembers it: placing it back
	// checks initech's queues there first (there are none). A non-keeper
	// leaves keep-cell without a check.
	q.ok(t, "cluster", "move", initech.slug, "--to", "keep-away")
	if n := len(s.broker.Requests()); n != 0 {
		t.Fatalf("moving a non-keeper off the cell sent %d requests to its broker", n)
	}
	for _, req := range away.Requests() {
		if req.Method != http.MethodGet || req.Path != "/api/v1/resources/queues" || req.Header.Get("X-Queen-Tenant") != initech.brokerTenant {
			t.Fatalf("the residue check sent %s %s (tenant %q) to the emptied cell's broker", req.Method, req.Path, req.Header.Get("X-Queen-Tenant"))
		}
	}
	if len(away.Requests()) != 1 {
		t.Fatalf("the residue check sent %d requests, want one listing", len(away.Requests()))
	}
	s.cp.exec(`DELETE FROM queen_proxy.clusters WHERE id = $1::uuid`, initech.id) // keep-away must be empty for the move below

	startGateway(t, s.caddyfile(t, ""))
	r := do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"payroll","payload":{"salary":"acme-secret"}}]}`)
	if r.status != http.StatusOK {
		t.Fatalf("acme push: %d %s", r.status, r.body)
	}
	s.awaitVerdict(t, "unscoped")

	// Refused while the keeper has queues, saying what to do.
	move := func(stdin string, extra ...string) cliRun {
		return q.run(t, nil, stdin, append([]string{"cluster", "move", s.acme.slug, "--to", "keep-away"}, extra...)...)
	}
	res := move("")
	if res.code != 1 || res.stdout != "" || strings.Count(res.stderr, "\n") != 1 ||
		!strings.HasPrefix(res.stderr, `queen cluster move: cluster "keep-acme" is the keeper of cell "keep-cell", whose broker is not known to keep tenants apart, and has 1 queue(s) there (payroll)`) ||
		!strings.Contains(res.stderr, "--delete-queues") {
		t.Fatalf("move of the keeper with queues: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// Declining the question changes nothing.
	res = move("n\n", "--delete-queues")
	if res.code != 1 || !strings.HasSuffix(res.stderr, "queen cluster move: not confirmed; nothing changed\n") ||
		!strings.Contains(res.stderr, `delete 1 queue(s) of cluster "keep-acme" on cell "keep-cell"'s broker (payroll)`) {
		t.Fatalf("declined move: exit %d, stderr %q", res.code, res.stderr)
	}
	if names := s.broker.QueueNames(""); strings.Join(names, ",") != "payroll" {
		t.Fatalf("queues after refused moves: %v", names)
	}
	if k := keeperOf(); k != s.acme.slug {
		t.Fatalf("a refused move changed the keeper to %q", k)
	}

	// --delete-queues --yes deletes them on the broker, then moves.
	out := q.ok(t, "cluster", "move", s.acme.slug, "--to", "keep-away", "--delete-queues", "--yes")
	if !strings.HasPrefix(out, `deleted 1 queue(s) of cluster "keep-acme" on cell "keep-cell"'s broker`+"\n"+
		`moved cluster "keep-acme" from cell "keep-cell" to cell "keep-away"`+"\n"+
		`note: it was the keeper of cell "keep-cell"; its queues there are gone`) {
		t.Fatalf("move --delete-queues --yes: %q", out)
	}
	for _, n := range s.broker.QueueNames("") {
		if !strings.HasPrefix(n, "queengate-isolation-probe-") {
			t.Fatalf("queue %q left on the broker after the keeper's queues were deleted", n)
		}
	}
	if k := keeperOf(); k != s.globex.slug {
		t.Fatalf("keeper after the move: %q, want %q", k, s.globex.slug)
	}
	meta := s.cp.scalar(`SELECT meta::text FROM queen_proxy.operations WHERE action = 'keeper_released' AND cluster_id = $1::uuid`, s.acme.id)
	var m map[string]any
	if err := json.Unmarshal([]byte(meta), &m); err != nil || m["cell_id"] != s.cellID || len(m["queues_deleted"].([]any)) != 1 {
		t.Fatalf("keeper_released audit %s", meta)
	}

	// The next keeper (a new backend reads the keeper at once) is served,
	// and sees nothing of the old keeper's data.
	startGateway(t, s.caddyfile(t, "isolation_probe_interval 59m"))
	r = do(t, s.c, "GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, "")
	if r.status != http.StatusOK || strings.Contains(string(r.body), "payroll") {
		t.Fatalf("globex, the new keeper, lists: %d %s", r.status, r.body)
	}
	r = do(t, s.c, "GET", s.url(s.globex, "/api/v1/pop/queue/payroll?autoAck=true"), s.gKey, "")
	if strings.Contains(string(r.body), "acme-secret") {
		t.Fatalf("globex popped acme's message: %d %s", r.status, r.body)
	}

	// The last cluster may leave without a check (its forced tenant delete
	// empties the cell), but its queues stay: the next cluster placed on
	// the cell, its keeper, is refused until they are deleted.
	r = do(t, s.c, "POST", s.url(s.globex, "/api/v1/push"), s.gKey, `{"items":[{"queue":"ledger","payload":{"v":"globex-secret"}}]}`)
	if r.status != http.StatusOK {
		t.Fatalf("globex push: %d %s", r.status, r.body)
	}
	q.ok(t, "tenant", "delete", "keep-globex", "--force")
	create := q.run(t, nil, "", "cluster", "create", "keep-next", "--tenant", "keep-initech", "--cell", "keep-cell")
	if create.code != 1 || create.stdout != "" || !strings.HasPrefix(create.stderr,
		`queen cluster create: cell "keep-cell", whose broker is not known to keep tenants apart, still holds 1 queue(s) (ledger) of cluster "keep-globex", which left it as its keeper`) {
		t.Fatalf("create on a cell holding a residue: exit %d, stdout %q, stderr %q", create.code, create.stdout, create.stderr)
	}
	out = q.ok(t, "cluster", "create", "keep-next", "--tenant", "keep-initech", "--cell", "keep-cell", "--delete-queues", "--yes")
	if !strings.Contains(out, `created cluster "keep-next"`) {
		t.Fatalf("create --delete-queues --yes: %q", out)
	}
	for _, n := range s.broker.QueueNames("") {
		if !strings.HasPrefix(n, "queengate-isolation-probe-") {
			t.Fatalf("queue %q left on the broker for the new keeper", n)
		}
	}
	if k := keeperOf(); k != "keep-next" {
		t.Fatalf("keeper %q, want keep-next", k)
	}
}

// TestTenantDeleteOfAKeeper: a tenant delete (forced here) of the keeper of
// a cell not yet known to scope, with another tenant's cluster staying, is
// refused while the keeper's queues are on the broker; --delete-queues
// --yes deletes them, then the tenant.
func TestTenantDeleteOfAKeeper(t *testing.T) {
	db := pgtest.NewDatabase(t)
	cp := newControlPlane(t, db)
	broker := fakebroker.New(fakebroker.Options{IgnoreTenant: true})
	brokerURL, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	cell := cp.cell("deep-cell", brokerURL, "cell-secret")
	keeper := cp.cluster(cp.tenant("deep-acme"), "deep-acme", cell)
	cp.cluster(cp.tenant("deep-globex"), "deep-globex", cell)
	req, err := http.NewRequest(http.MethodPost, brokerURL+"/api/v1/configure", strings.NewReader(`{"queue":"invoices"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer cell-secret")
	req.Header.Set("x-queen-tenant", keeper.brokerTenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if names := broker.QueueNames(""); strings.Join(names, ",") != "invoices" {
		t.Fatalf("queues on the broker: %v", names)
	}

	q := cliFor(t)(db)
	r := q.run(t, nil, "", "tenant", "delete", "deep-acme", "--force")
	if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr,
		`queen tenant delete: cluster "deep-acme" is the keeper of cell "deep-cell", whose broker is not known to keep tenants apart, and has 1 queue(s) there (invoices)`) {
		t.Fatalf("tenant delete of a keeper with queues: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.tenants WHERE slug = 'deep-acme'`); n != "1" {
		t.Fatal("a refused delete removed the tenant")
	}
	for _, seen := range broker.Requests() {
		if seen.Method != http.MethodGet && seen.Method != http.MethodPost {
			t.Fatalf("the refused delete sent %s %s to the broker", seen.Method, seen.Path)
		}
		if seen.Method == http.MethodGet && seen.Header.Get("Authorization") != "Bearer cell-secret" {
			t.Fatalf("the listing presented %q, want the cell's secret", seen.Header.Get("Authorization"))
		}
	}

	out := q.ok(t, "tenant", "delete", "deep-acme", "--force", "--delete-queues", "--yes")
	if !strings.HasPrefix(out, `deleted 1 queue(s) of cluster "deep-acme" on cell "deep-cell"'s broker`+"\n"+`deleted tenant "deep-acme": 1 cluster(s)`) ||
		!strings.Contains(out, `cluster "deep-acme" was the keeper of cell "deep-cell"; its queues there are gone, and the next cluster on the cell is its keeper now`) {
		t.Fatalf("tenant delete --delete-queues --yes: %q", out)
	}
	if names := broker.QueueNames(""); len(names) != 0 {
		t.Fatalf("queues left on the broker: %v", names)
	}
	if k := cp.scalar(`SELECT c.slug FROM queen_proxy.clusters c WHERE c.id = queen_proxy.cell_keeper_cluster($1::uuid)`, cell); k != "deep-globex" {
		t.Fatalf("keeper after the delete: %q", k)
	}
}
