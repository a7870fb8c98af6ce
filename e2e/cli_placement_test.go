package e2e

import (
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
)

// TestCLIPlacement: cluster create without --cell places on the least
// loaded open cell and says where; cell add|update --capacity, cell list's
// USED/CAPACITY and PLACEMENT, cell remove refused while clusters live on
// the cell, all through the real binary.
func TestCLIPlacement(t *testing.T) {
	q := cliFor(t)(pgtest.NewDatabase(t))
	q.ok(t, "migrate")
	q.ok(t, "cell", "add", "small", "--region", "eu1", "--url", "http://192.0.2.1:6632", "--capacity", "1", "--tenancy", "scoped", "--grants", "none")
	q.ok(t, "cell", "add", "big", "--region", "eu1", "--url", "http://192.0.2.2:6632", "--capacity", "3", "--tenancy", "scoped", "--grants", "none")
	q.ok(t, "cell", "add", "lone", "--region", "eu1", "--url", "http://192.0.2.3:6632") // probe: not known to scope
	q.fails(t, 1, "queen cell add: invalid cell capacity -1: use 0 (no cap) or more\n",
		"cell", "add", "neg", "--region", "eu1", "--url", "http://192.0.2.4:6632", "--capacity", "-1")
	q.ok(t, "tenant", "create", "acme")

	var first struct {
		CellSlug string `json:"cell_slug"`
		Placed   bool
	}
	q.okJSON(t, &first, "cluster", "create", "p1", "--tenant", "acme", "--plan", "pro")
	if first.CellSlug != "big" || !first.Placed {
		t.Fatalf("cluster create --json: %+v, want placed on big (0/3, 0/1 and lone 0 tie: slug)", first)
	}
	// lone takes one cluster only (its keeper); then small 0/1, then big.
	for _, want := range []struct{ slug, cell, now string }{
		{"p2", "lone", "1 cluster(s), no cap"},
		{"p3", "small", "1 of 1 slots used"},
		{"p4", "big", "2 of 3 slots used"},
		{"p5", "big", "3 of 3 slots used"},
	} {
		out := q.ok(t, "cluster", "create", want.slug, "--tenant", "acme", "--plan", "pro")
		if !strings.Contains(out, `for tenant "acme" on cell "`+want.cell+`"`) ||
			!strings.HasSuffix(out, "\nplaced on cell \""+want.cell+"\": the least loaded active shared cell with room; now "+want.now+"\n") {
			t.Fatalf("cluster create %s: %q, want cell %s", want.slug, out, want.cell)
		}
	}
	q.fails(t, 1, "queen cluster create: no active shared cell has room for a cluster of plan pro (shared cells: 2 full, 1 keeper-only): "+
		"add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class shared --capacity N) "+
		"or raise a cell's capacity (caddy queen cell update <cell> --capacity N)"+
		"; a keeper-only cell takes no second cluster whatever its capacity: its broker does not keep clusters apart (docs/isolation.md)\n",
		"cluster", "create", "p6", "--tenant", "acme", "--plan", "pro")
	q.fails(t, 1, "queen cluster create: cell \"small\" is full: it holds 1 of its 1 cluster slot(s); raise its capacity "+
		"(caddy queen cell update small --capacity N) or place the cluster on another cell\n",
		"cluster", "create", "p6", "--tenant", "acme", "--cell", "small")

	cells := lines(q.ok(t, "cell", "list"))
	got := []string{}
	for _, row := range cells {
		got = append(got, strings.Join([]string{row[0], row[4], row[5]}, " "))
	}
	if strings.Join(got, "|") != "SLUG USED/CAPACITY PLACEMENT|big 3/3 full|lone 1/no cap keeper-only|small 1/1 full" {
		t.Fatalf("cell list: %q", got)
	}
	var listed []struct {
		Slug          string
		CapacitySlots int    `json:"capacity_slots"`
		UsedSlots     int    `json:"used_slots"`
		Placement     string `json:"placement"`
		TenantScoping string `json:"tenant_scoping"`
	}
	q.okJSON(t, &listed, "cell", "list")
	if len(listed) != 3 || listed[0].CapacitySlots != 3 || listed[0].UsedSlots != 3 || listed[1].Placement != "keeper-only" ||
		listed[1].TenantScoping != "unknown" {
		t.Fatalf("cell list --json: %+v", listed)
	}

	// Capacity: not below what a cell holds; 0 lifts the cap.
	q.fails(t, 1, "queen cell update: cell \"big\" holds 3 cluster(s): its capacity cannot go below that (0 is no cap); "+
		"move clusters off it first (caddy queen cluster move <cluster> --to <cell>)\n", "cell", "update", "big", "--capacity", "2")
	q.fails(t, 1, "queen cell update: invalid cell capacity -1: use 0 (no cap) or more\n", "cell", "update", "big", "--capacity", "-1")
	if out := q.ok(t, "cell", "update", "small", "--capacity", "0"); out !=
		"updated cell \"small\" (broker http://192.0.2.1:6632, tenancy scoped, 1 cluster(s), no cap); gateways reload its 1 cluster(s)\n" {
		t.Fatalf("cell update --capacity 0: %q", out)
	}
	if out := q.ok(t, "cluster", "create", "p6", "--tenant", "acme", "--plan", "pro"); !strings.Contains(out, `on cell "small"`) {
		t.Fatalf("after lifting small's cap: %q", out)
	}

	// Remove: refused while clusters live on the cell.
	q.fails(t, 1, "queen cell remove: cell \"big\" still holds 3 cluster(s): move each to another cell first "+
		"(caddy queen cluster list --cell big, then caddy queen cluster move <cluster> --to <cell>); "+
		"drain it meanwhile so nothing new is placed there (caddy queen cell drain big)\n", "cell", "remove", "big")
	q.ok(t, "cell", "drain", "big")
	if out := q.ok(t, "cluster", "create", "p7", "--tenant", "acme", "--plan", "pro"); !strings.Contains(out, `on cell "small"`) {
		t.Fatalf("placement while big drains: %q", out)
	}
	for _, c := range []string{"p1", "p4", "p5"} {
		q.ok(t, "cluster", "move", c, "--to", "small")
	}
	var removed struct{ Slug, Class string }
	q.okJSON(t, &removed, "cell", "remove", "big")
	if removed.Slug != "big" || removed.Class != "shared" {
		t.Fatalf("cell remove --json: %+v", removed)
	}
	q.fails(t, 1, "queen cell remove: unknown cell \"big\"\n", "cell", "remove", "big")
	if out := q.ok(t, "cell", "remove", "--help"); !strings.Contains(out, "refused while any cluster is placed on") {
		t.Fatalf("cell remove --help: %q", out)
	}
	if out := q.ok(t, "cell", "drain", "--help"); !strings.Contains(out, "keeps\nserving the clusters it has") || !strings.Contains(out, "placement") {
		t.Fatalf("cell drain --help does not say what draining does: %q", out)
	}
}
