package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestGrantsAtPlacement: on a tenancy cell (the Rust brokers' model) a
// cluster placed through the control plane (caddy queen cluster create,
// move, delete) gets the broker's feature grants its plan needs, so KV
// works through the gateway at once; a cluster placed without that path is
// answered 403 feature_gated by the broker; a move grants on the new cell
// and withdraws on the old one, a deletion withdraws; a cell that cannot
// grant, or does not grant, refuses the placement and says what to do.
func TestGrantsAtPlacement(t *testing.T) {
	db := pgtest.NewDatabase(t)
	q := cliFor(t)(db)
	cp := newControlPlane(t, db)
	start := func() (*fakebroker.Broker, string) {
		b := fakebroker.New(rustCell)
		u, err := b.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b, u
	}
	one, oneURL := start()
	two, twoURL := start()
	onex, onexURL := start()
	q.ok(t, "cell", "add", "gr-one", "--region", "eu1", "--url", oneURL, "--tenancy", "scoped", "--grants", "api")
	q.ok(t, "cell", "add", "gr-two", "--region", "eu1", "--url", twoURL, "--tenancy", "scoped", "--grants", "api")
	q.ok(t, "tenant", "create", "gr-acme")

	// dev has kv, timers and ephemeral, no streams.
	var acme struct {
		ID           string `json:"id"`
		BrokerTenant string `json:"broker_tenant_uuid"`
	}
	q.okJSON(t, &acme, "cluster", "create", "gr-acme", "--tenant", "gr-acme", "--plan", "dev", "--cell", "gr-one")
	for kind, want := range map[string]bool{fakebroker.GrantKV: true, fakebroker.GrantEphemeral: true, fakebroker.GrantStreams: false} {
		if got := one.Granted(acme.BrokerTenant, kind); got != want {
			t.Fatalf("after cluster create: cell gr-one grants %s: %v, want %v", kind, got, want)
		}
	}
	// A cluster placed behind the control plane's back (plain SQL) gets no
	// grant: the broker refuses its KV.
	bare := cp.cluster(cp.tenant("gr-bare"), "gr-bare", cp.scalar(`SELECT id::text FROM queen_proxy.cells WHERE slug = 'gr-one'`))
	_, acmeKey := cp.key(acme.ID)
	_, bareKey := cp.key(bare.id)
	port := freePort(t)
	c := client(port)
	startGateway(t, gatewayCaddyfile(port, db, "spool_dir "+t.TempDir(), ""))
	url := func(slug, path string) string {
		return "http://" + slug + ".eu1.example.test:" + strconv.Itoa(port) + path
	}

	if r := do(t, c, "PUT", url("gr-acme", "/api/v1/kv/app/colour"), acmeKey, `"blue"`); r.status != http.StatusOK {
		t.Fatalf("acme KV put through the gateway: %d %s", r.status, r.body)
	}
	if r := do(t, c, "GET", url("gr-acme", "/api/v1/kv/app/colour"), acmeKey, ""); r.status != http.StatusOK || !strings.Contains(string(r.body), "blue") {
		t.Fatalf("acme KV get through the gateway: %d %s", r.status, r.body)
	}
	if r := do(t, c, "PUT", url("gr-bare", "/api/v1/kv/app/colour"), bareKey, `"red"`); r.status != http.StatusForbidden ||
		!strings.Contains(string(r.body), "feature_gated") {
		t.Fatalf("KV of a cluster placed without grants: %d %s, want the broker's 403 feature_gated", r.status, r.body)
	}

	// Issuing again is harmless: a move there and back leaves one grant.
	out := q.ok(t, "cluster", "move", "gr-acme", "--to", "gr-two")
	if !strings.Contains(out, `moved cluster "gr-acme" from cell "gr-one" to cell "gr-two"`) {
		t.Fatalf("cluster move: %q", out)
	}
	if one.Granted(acme.BrokerTenant, fakebroker.GrantKV) || one.Granted(acme.BrokerTenant, fakebroker.GrantEphemeral) {
		t.Fatal("after the move the old cell still grants the cluster")
	}
	if !two.Granted(acme.BrokerTenant, fakebroker.GrantKV) || !two.Granted(acme.BrokerTenant, fakebroker.GrantEphemeral) {
		t.Fatal("after the move the new cell does not grant the cluster")
	}

	// A cell whose broker cannot be reached for grants refuses the
	// placement, and nothing moves.
	q.ok(t, "cell", "add", "gr-dead", "--region", "eu1", "--url", "http://127.0.0.1:1", "--tenancy", "scoped", "--grants", "api")
	r := q.run(t, nil, "", "cluster", "move", "gr-acme", "--to", "gr-dead")
	if r.code == 0 || !strings.Contains(r.stderr, `cannot issue cluster "gr-acme"'s grants (kv, ephemeral, for plan dev) on cell "gr-dead" (grants: api)`) ||
		!strings.Contains(r.stderr, "the cluster was not placed") {
		t.Fatalf("move to a cell that cannot grant: exit %d, stderr %q", r.code, r.stderr)
	}
	if cell := cp.scalar(`SELECT ce.slug FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE c.slug = 'gr-acme'`); cell != "gr-two" {
		t.Fatalf("after a refused move the cluster is on %s", cell)
	}
	if !two.Granted(acme.BrokerTenant, fakebroker.GrantKV) {
		t.Fatal("a refused move withdrew the grant where the cluster stays")
	}

	// A 1.x cell (grants verify, the default): the broker does not grant a
	// new tenant, so the placement is refused with the SQL the operator
	// runs in the cell's database and the id to create the cluster with.
	q.ok(t, "cell", "add", "gr-onex", "--region", "eu1", "--url", onexURL, "--tenancy", "scoped")
	r = q.run(t, nil, "", "cluster", "create", "gr-x", "--tenant", "gr-acme", "--plan", "dev", "--cell", "gr-onex")
	if r.code != 1 || !strings.Contains(r.stderr, `cell "gr-onex" does not grant broker tenant `) ||
		!strings.Contains(r.stderr, "the kv, ephemeral grant(s) that cluster \"gr-x\" on plan dev needs (its broker answered 403 feature_gated); the cluster was not placed") ||
		!strings.Contains(r.stderr, "INSERT INTO queen.kv_quota (tenant_id) SELECT '") {
		t.Fatalf("create on a verify cell without grants: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.clusters WHERE slug = 'gr-x'`); n != "0" {
		t.Fatal("a refused placement left the cluster behind")
	}
	_, rest, _ := strings.Cut(r.stderr, "--broker-tenant ")
	granted := strings.TrimRight(strings.Fields(rest)[0], ".")
	onex.SetGrant(granted, fakebroker.GrantKV, true)
	onex.SetGrant(granted, fakebroker.GrantEphemeral, true)
	q.ok(t, "cluster", "create", "gr-x", "--tenant", "gr-acme", "--plan", "dev", "--cell", "gr-onex", "--broker-tenant", granted)
	if bt := cp.scalar(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE slug = 'gr-x'`); bt != granted {
		t.Fatalf("cluster gr-x has broker tenant %s, want the granted %s", bt, granted)
	}
	out = q.ok(t, "cluster", "delete", "gr-x", "--force")
	if !strings.Contains(out, "DELETE FROM queen.kv_quota WHERE tenant_id = '"+granted+"'::uuid;") {
		t.Fatalf("delete from a verify cell does not say what to remove: %q", out)
	}

	// Deleting the cluster withdraws its grants.
	q.ok(t, "cluster", "delete", "gr-acme", "--force")
	if two.Granted(acme.BrokerTenant, fakebroker.GrantKV) || two.Granted(acme.BrokerTenant, fakebroker.GrantEphemeral) {
		t.Fatal("after the deletion the cell still grants the cluster")
	}
}
