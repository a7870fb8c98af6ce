package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
)

// placementDB is a migrated database of its own: placement chooses among
// every cell, so the package database's cells would take part.
func placementDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := placementDBURL(t)
	return pool
}

func placementDBURL(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return pool, url
}

// addCell inserts a cell of class with a cap and a stated tenancy.
func addCell(t *testing.T, pool *pgxpool.Pool, slug, class string, capacity int, tenancy string) string {
	t.Helper()
	return scalar[string](t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, capacity_slots, tenancy_stated)
		VALUES ($1, 'eu1', 'http://127.0.0.1:6710', $2, $3, $4) RETURNING id::text`, slug, class, capacity, tenancy)
}

// place creates a cluster of plan without naming a cell and returns the
// slug of the cell it was placed on.
func place(t *testing.T, pool *pgxpool.Pool, tenant, plan string) (string, error) {
	t.Helper()
	return createPlaced(context.Background(), pool, tenant, uniq("p"), plan)
}

// createPlaced creates a cluster without naming a cell and reads where it
// went (in a second statement: the first's snapshot does not see the row).
func createPlaced(ctx context.Context, pool *pgxpool.Pool, tenant, slug, plan string) (string, error) {
	var id, cell string
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.create_cluster($1::uuid, $2, $3, NULL)::text`, tenant, slug, plan).Scan(&id); err != nil {
		return "", err
	}
	err := pool.QueryRow(ctx, `SELECT ce.slug FROM queen_proxy.cells ce JOIN queen_proxy.clusters c ON c.cell_id = ce.id
		WHERE c.id = $1::uuid`, id).Scan(&cell)
	return cell, err
}

func mustPlace(t *testing.T, pool *pgxpool.Pool, tenant, plan string) string {
	t.Helper()
	cell, err := place(t, pool, tenant, plan)
	if err != nil {
		t.Fatalf("place a %s cluster: %v", plan, err)
	}
	return cell
}

// usedSlots is every cell's used_slots next to its real cluster count.
func usedSlots(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return scalar[string](t, pool, `SELECT coalesce(string_agg(format('%s=%s/%s', ce.slug, ce.used_slots,
			(SELECT count(*) FROM queen_proxy.clusters c WHERE c.cell_id = ce.id)), ' ' ORDER BY ce.slug), '')
		FROM queen_proxy.cells ce`)
}

// TestPlacementCountsSlotsExactly: used_slots follows every insert, move
// and delete (a tenant delete cascading too), a plain write of it is
// replaced by a recount, and an old database is recounted by 019.
func TestPlacementCountsSlotsExactly(t *testing.T) {
	pool := placementDB(t)
	a := addCell(t, pool, "a", "shared", 0, "scoped")
	b := addCell(t, pool, "b", "shared", 0, "scoped")
	tenant, _ := newTenant(t, pool)
	c1, c2 := newCluster(t, pool, tenant, a), newCluster(t, pool, tenant, a)
	newCluster(t, pool, tenant, b)
	if got := usedSlots(t, pool); got != "a=2/2 b=1/1" {
		t.Fatalf("after three creates: %s", got)
	}
	exec(t, pool, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, c1, b)
	exec(t, pool, `UPDATE queen_proxy.clusters SET cell_id = cell_id, status = 'suspended' WHERE id = $1`, c2)
	if got := usedSlots(t, pool); got != "a=1/1 b=2/2" {
		t.Fatalf("after a move and a same-cell update: %s", got)
	}
	exec(t, pool, `DELETE FROM queen_proxy.clusters WHERE id = $1`, c1)
	if got := usedSlots(t, pool); got != "a=1/1 b=1/1" {
		t.Fatalf("after a delete: %s", got)
	}
	exec(t, pool, `UPDATE queen_proxy.cells SET used_slots = 40 WHERE id = $1`, a)
	exec(t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, used_slots) VALUES ('c', 'eu1', 'http://x:1', 'shared', 7)`)
	if got := usedSlots(t, pool); got != "a=1/1 b=1/1 c=0/0" {
		t.Fatalf("plain writes of used_slots stuck: %s", got)
	}
	exec(t, pool, `SELECT queen_proxy.delete_tenant($1, true)`, tenant)
	if got := usedSlots(t, pool); got != "a=0/0 b=0/0 c=0/0" {
		t.Fatalf("after a tenant delete: %s", got)
	}

	// A database where nothing kept the count: 019 recounts it.
	other, _ := newTenant(t, pool)
	newCluster(t, pool, other, a)
	newCluster(t, pool, other, a)
	exec(t, pool, `DROP TRIGGER cells_guard_slots ON queen_proxy.cells`)
	exec(t, pool, `UPDATE queen_proxy.cells SET used_slots = CASE slug WHEN 'a' THEN 0 ELSE 3 END`)
	if got := usedSlots(t, pool); got != "a=0/2 b=3/0 c=3/0" {
		t.Fatalf("setting up a stale count: %s", got)
	}
	ms, err := load()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.name == "019_placement" {
			exec(t, pool, m.sql)
		}
	}
	if got := usedSlots(t, pool); got != "a=2/2 b=0/0 c=0/0" {
		t.Fatalf("019 did not recount: %s", got)
	}
}

// TestPlacementChoosesLeastLoadedOpenCell: the plan's class, active, with
// room, least loaded (used/capacity, then fewer clusters, then slug); a cell
// not known to scope takes a cluster only while empty, a dedicated one too.
func TestPlacementChoosesLeastLoadedOpenCell(t *testing.T) {
	pool := placementDB(t)
	tenant, _ := newTenant(t, pool)
	addCell(t, pool, "big", "shared", 10, "scoped")
	addCell(t, pool, "small", "shared", 2, "scoped")
	addCell(t, pool, "gone", "shared", 10, "scoped")
	exec(t, pool, `UPDATE queen_proxy.cells SET status = 'draining' WHERE slug = 'gone'`)

	// big 0/10 and small 0/2 tie on load and count: slug decides.
	var got []string
	for range 4 {
		got = append(got, mustPlace(t, pool, tenant, "pro"))
	}
	// big 1/10 (0.1) < small 0/2? no: small is 0.0, so small; then
	// small 1/2 (0.5) > big 1/10: big twice (0.2 < 0.5), ...
	if strings.Join(got, ",") != "big,small,big,big" {
		t.Fatalf("placements %v, want big,small,big,big", got)
	}

	// A cell without a cap counts as unloaded; ties on load go to the cell
	// with fewer clusters.
	addCell(t, pool, "nocap", "shared", 0, "scoped")
	if cell := mustPlace(t, pool, tenant, "pro"); cell != "nocap" {
		t.Fatalf("placed on %s, want nocap (no cap, empty)", cell)
	}
	exec(t, pool, `UPDATE queen_proxy.cells SET status = 'dead' WHERE slug = 'nocap'`)

	// A probed cell not yet found scoping takes its first cluster, never a
	// second; neither does one stated unscoped.
	addCell(t, pool, "probe", "shared", 0, "probe")
	addCell(t, pool, "unscoped", "shared", 0, "unscoped")
	exec(t, pool, `UPDATE queen_proxy.cells SET status = 'draining' WHERE slug IN ('big', 'small')`)
	first, second := mustPlace(t, pool, tenant, "pro"), mustPlace(t, pool, tenant, "pro")
	if first != "probe" || second != "unscoped" {
		t.Fatalf("placed on %s then %s, want probe then unscoped (each empty)", first, second)
	}
	_, err := place(t, pool, tenant, "pro")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55000" || pe.Message != "place_cluster: no active shared cell has room for a cluster of plan pro "+
		"(shared cells: 1 dead, 3 draining, 2 keeper-only): add one (caddy queen cell add <slug> --region <region> --url <broker URL> "+
		"--class shared --capacity N); a keeper-only cell takes no second cluster whatever its capacity: its broker does not keep clusters apart (docs/isolation.md)" {
		t.Fatalf("no room: %v", err)
	}

	// Found scoping by the probe, the cell takes more.
	exec(t, pool, `UPDATE queen_proxy.cells SET tenant_scoping = 'scoped' WHERE slug = 'probe'`)
	if cell := mustPlace(t, pool, tenant, "pro"); cell != "probe" {
		t.Fatalf("placed on %s, want probe (found scoped)", cell)
	}

	// A dedicated plan goes to an empty dedicated cell only.
	_, err = place(t, pool, tenant, "dedicated-s")
	if !errors.As(err, &pe) || pe.Code != "55000" || !strings.Contains(pe.Message, "no active dedicated cell has room") ||
		!strings.Contains(pe.Message, "(dedicated cells: none)") {
		t.Fatalf("no dedicated cell: %v", err)
	}
	addCell(t, pool, "own", "dedicated", 0, "scoped")
	if cell := mustPlace(t, pool, tenant, "dedicated-s"); cell != "own" {
		t.Fatalf("placed on %s, want own", cell)
	}
	if _, err := place(t, pool, tenant, "dedicated-s"); err == nil || !strings.Contains(err.Error(), "1 occupied") {
		t.Fatalf("a second cluster on a dedicated cell: %v", err)
	}
	if err := callErr(t, pool, `SELECT queen_proxy.place_cluster('gold')`); err == nil || !strings.Contains(err.Error(), "unknown plan gold") {
		t.Fatalf("unknown plan: %v", err)
	}

	// The audit row says the cell was chosen.
	if o := ops(t, pool, tenant, "cluster_created"); o[0].Meta["placed"] != true {
		t.Fatalf("cluster_created meta %v, want placed true", o[0].Meta)
	}
}

// TestPlacementKeepsTheKeeper: the first cluster placed on a cell not
// known to scope is its keeper, and placement never puts a second one
// there, nor one on a cell whose keeper left queues behind.
func TestPlacementKeepsTheKeeper(t *testing.T) {
	pool := placementDB(t)
	tenant, _ := newTenant(t, pool)
	cell := addCell(t, pool, "lone", "shared", 0, "probe")
	addCell(t, pool, "wide", "shared", 0, "scoped")
	for range 3 {
		mustPlace(t, pool, tenant, "pro")
	}
	keeper := scalar[string](t, pool, `SELECT c.slug FROM queen_proxy.clusters c WHERE c.id = queen_proxy.cell_keeper_cluster($1)`, cell)
	firstOnLone := scalar[string](t, pool, `SELECT slug FROM queen_proxy.clusters WHERE cell_id = $1 ORDER BY placed_at LIMIT 1`, cell)
	if got := usedSlots(t, pool); got != "lone=1/1 wide=2/2" || keeper != firstOnLone {
		t.Fatalf("slots %s, keeper %s (first placed %s)", got, keeper, firstOnLone)
	}
	// The keeper leaves the emptied cell with its queues there: residue.
	exec(t, pool, `DELETE FROM queen_proxy.clusters WHERE cell_id = $1`, cell)
	exec(t, pool, `UPDATE queen_proxy.cells SET status = 'draining' WHERE slug = 'wide'`)
	_, err := place(t, pool, tenant, "pro")
	if err == nil || !strings.Contains(err.Error(), "1 residue") {
		t.Fatalf("placement on a cell with a keeper's residue: %v", err)
	}
}

// TestPlacementConcurrentCreatesNeverOverfill: many sessions create at once;
// each cell ends exactly at its cap, the rest are refused for no room, and
// cells not known to scope get one cluster each.
func TestPlacementConcurrentCreatesNeverOverfill(t *testing.T) {
	setup, url := placementDBURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	// A session per creator, so the creates really overlap.
	pool := pgtest.PoolFor(t, url+sep+"pool_max_conns=40")
	_ = setup
	tenant, _ := newTenant(t, pool)
	caps := map[string]int{"c1": 3, "c2": 5, "c3": 1}
	for slug, n := range caps {
		addCell(t, pool, slug, "shared", n, "scoped")
	}
	addCell(t, pool, "k1", "shared", 0, "probe")
	addCell(t, pool, "k2", "shared", 4, "unscoped")
	const room = 3 + 5 + 1 + 1 + 1
	const creates = 40
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		placed = map[string]int{}
		noRoom int
		other  []error
	)
	start := make(chan struct{})
	for i := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cell, err := createPlaced(context.Background(), pool, tenant, fmt.Sprintf("race-%d", i), "pro")
			mu.Lock()
			defer mu.Unlock()
			var pe *pgconn.PgError
			switch {
			case err == nil:
				placed[cell]++
			case errors.As(err, &pe) && pe.Code == "55000" && strings.Contains(pe.Message, "no active shared cell has room"):
				noRoom++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected errors: %v", other)
	}
	want := map[string]int{"c1": 3, "c2": 5, "c3": 1, "k1": 1, "k2": 1}
	if fmt.Sprint(placed) != fmt.Sprint(want) || noRoom != creates-room {
		t.Fatalf("placed %v and %d refused, want %v and %d", placed, noRoom, want, creates-room)
	}
	if got := usedSlots(t, pool); got != "c1=3/3 c2=5/5 c3=1/1 k1=1/1 k2=1/1" {
		t.Fatalf("slots after the race: %s", got)
	}
}

// TestCellCapacityIsEnforced: a named cell is held to its cap as well, a
// cap cannot go below the clusters a cell holds, and 0 lifts it.
func TestCellCapacityIsEnforced(t *testing.T) {
	pool := placementDB(t)
	tenant, _ := newTenant(t, pool)
	one := addCell(t, pool, "one", "shared", 1, "scoped")
	other := addCell(t, pool, "other", "shared", 0, "scoped")
	newCluster(t, pool, tenant, one)
	err := callErr(t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'free', $3)", tenant, uniq("c"), one)
	wantPgErr(t, err, "55000", `cell "one" is full: it holds 1 of its 1 cluster slot(s); raise its capacity (caddy queen cell update one --capacity N)`)
	moving := newCluster(t, pool, tenant, other)
	err = callErr(t, pool, "UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1", moving, one)
	wantPgErr(t, err, "55000", `cell "one" is full`)

	newCluster(t, pool, tenant, other)
	err = callErr(t, pool, "SELECT queen_proxy.update_cell($1, NULL, NULL, false, NULL, NULL, 1)", other)
	wantPgErr(t, err, "55000", `cell "other" holds 2 cluster(s): its capacity cannot go below that (0 is no cap)`)
	err = callErr(t, pool, "UPDATE queen_proxy.cells SET capacity_slots = 1 WHERE id = $1", other)
	wantPgErr(t, err, "55000", `cell "other" holds 2 cluster(s)`)
	err = callErr(t, pool, "SELECT queen_proxy.update_cell($1, NULL, NULL, false, NULL, NULL, -1)", other)
	wantPgErr(t, err, "22023", "invalid capacity -1")
	exec(t, pool, "SELECT queen_proxy.update_cell($1, NULL, NULL, false, NULL, NULL, 2)", other)
	exec(t, pool, "SELECT queen_proxy.update_cell($1, NULL, NULL, false, NULL, 'eu2')", other) // the 016 form keeps the cap
	exec(t, pool, "SELECT queen_proxy.update_cell($1, NULL, NULL, false, NULL, NULL, 0)", one)
	newCluster(t, pool, tenant, one)
	if got := scalar[string](t, pool, `SELECT string_agg(format('%s=%s/%s@%s', slug, used_slots, capacity_slots, region), ' ' ORDER BY slug)
		FROM queen_proxy.cells`); got != "one=2/0@eu1 other=2/2@eu2" {
		t.Fatalf("cells: %s", got)
	}
}

// TestRemoveCell: refused while clusters live on it or its broker holds a
// keeper's queues; recorded in the outbox when done.
func TestRemoveCell(t *testing.T) {
	pool := placementDB(t)
	tenant, _ := newTenant(t, pool)
	busy := addCell(t, pool, "busy", "shared", 0, "probe")
	c := newCluster(t, pool, tenant, busy)
	err := callErr(t, pool, "SELECT queen_proxy.remove_cell($1)", busy)
	wantPgErr(t, err, "55000", `cell "busy" still holds 1 cluster(s): move each to another cell first (caddy queen cluster list --cell busy`)
	exec(t, pool, "DELETE FROM queen_proxy.clusters WHERE id = $1", c)
	err = callErr(t, pool, "SELECT queen_proxy.remove_cell($1)", busy)
	wantPgErr(t, err, "55000", `cell "busy" is empty, but cluster "`, "--forget-residue")
	out := scalar[map[string]any](t, pool, "SELECT queen_proxy.remove_cell($1, true)", busy)
	if out["slug"] != "busy" || out["residue_forgotten"] == nil {
		t.Fatalf("remove_cell returned %v", out)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.outbox WHERE kind = 'cell_removed' AND payload->>'cell_id' = $1`, busy); n != 1 {
		t.Fatalf("%d cell_removed outbox rows, want 1", n)
	}
	err = callErr(t, pool, "SELECT queen_proxy.remove_cell($1)", busy)
	wantPgErr(t, err, "P0002", "unknown cell")
}
