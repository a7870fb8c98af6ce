package migrations

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCellURLOrSecretChangeResetsVerdict: a verdict describes the broker it
// was taken on, so a new URL or credential resets it in the same statement
// (even one that also sets a verdict), while other changes keep it.
func TestCellURLOrSecretChangeResetsVerdict(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	verdict := func() string {
		t.Helper()
		return scalar[string](t, pool, `SELECT tenant_scoping || '|' || coalesce(tenant_scoping_checked_at::text, 'never') || '|' || coalesce(tenant_scoping_detail, '')
			FROM queen_proxy.cells WHERE id = $1`, cell)
	}
	scope := func() {
		t.Helper()
		exec(t, pool, `SELECT queen_proxy.record_cell_tenant_scoping($1, 'scoped', 'probe agreed')`, cell)
		if v := verdict(); !strings.HasPrefix(v, "scoped|") {
			t.Fatalf("after recording: %s", v)
		}
	}
	wantReset := func(why string) {
		t.Helper()
		v := verdict()
		if !strings.HasPrefix(v, "unknown|never|") || !strings.Contains(v, why) || !strings.Contains(v, "was scoped") {
			t.Fatalf("verdict %q, want unknown, never checked, saying %q", v, why)
		}
	}

	scope()
	exec(t, pool, `UPDATE queen_proxy.cells SET region = 'elsewhere', status = 'draining', tenancy_stated = 'scoped' WHERE id = $1`, cell)
	if v := verdict(); !strings.HasPrefix(v, "scoped|") {
		t.Fatalf("a change of region, status and tenancy reset the verdict: %s", v)
	}
	exec(t, pool, `UPDATE queen_proxy.cells SET base_url = base_url WHERE id = $1`, cell)
	if v := verdict(); !strings.HasPrefix(v, "scoped|") {
		t.Fatalf("writing the same URL reset the verdict: %s", v)
	}

	exec(t, pool, `UPDATE queen_proxy.cells SET base_url = 'http://127.0.0.1:6711', tenant_scoping = 'scoped' WHERE id = $1`, cell)
	wantReset("the broker URL changed")

	scope()
	exec(t, pool, `UPDATE queen_proxy.cells SET cell_secret = 's3cret-value' WHERE id = $1`, cell)
	wantReset("the broker credential changed")
	if strings.Contains(verdict(), "s3cret") {
		t.Fatal("the reset detail names the secret")
	}

	scope()
	exec(t, pool, `SELECT queen_proxy.update_cell($1, NULL, NULL, true, NULL, NULL)`, cell)
	wantReset("the broker credential changed")

	scope()
	exec(t, pool, `SELECT queen_proxy.update_cell($1, 'http://127.0.0.1:6712', 'other', false, NULL, NULL)`, cell)
	wantReset("the broker URL and its credential changed")
}

// TestStaleProbeCannotOverwriteReset: a probe that reached the old broker
// records nothing once the URL or secret changed under it.
func TestStaleProbeCannotOverwriteReset(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	exec(t, pool, `UPDATE queen_proxy.cells SET cell_secret = 'a' WHERE id = $1`, cell)
	record := func(url, secret string) bool {
		t.Helper()
		return scalar[bool](t, pool, `SELECT queen_proxy.record_cell_tenant_scoping($1, 'scoped', 'probe', $2, $3)`, cell, url, secret)
	}
	if !record("http://127.0.0.1:6710", "a") {
		t.Fatal("a probe of the current broker was not recorded")
	}
	exec(t, pool, `UPDATE queen_proxy.cells SET base_url = 'http://127.0.0.1:6799' WHERE id = $1`, cell)
	if record("http://127.0.0.1:6710", "a") || record("http://127.0.0.1:6799", "") {
		t.Fatal("a probe of another URL or credential was recorded")
	}
	if v := scalar[string](t, pool, `SELECT tenant_scoping FROM queen_proxy.cells WHERE id = $1`, cell); v != "unknown" {
		t.Fatalf("verdict %s after stale probes, want unknown", v)
	}
	if _, err := pool.Exec(ctxT(t), `SELECT queen_proxy.record_cell_tenant_scoping($1, 'perhaps', NULL, 'http://127.0.0.1:6799', 'a')`, cell); err == nil {
		t.Fatal("an invalid verdict was recorded")
	}
}

// TestCellChangeNotifiesItsClusters: URL, secret, stated tenancy and status
// changes invalidate every cluster on the cell, and only those.
func TestCellChangeNotifiesItsClusters(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cell, other := newCell(t, pool), newCell(t, pool)
	a, b := newCluster(t, pool, tenant, cell), newCluster(t, pool, tenant, cell)
	newCluster(t, pool, tenant, other)
	l := listen(t, pool)
	for _, set := range []string{
		`base_url = 'http://127.0.0.1:7001'`,
		`cell_secret = 'x'`,
		`tenancy_stated = 'unscoped'`,
		`status = 'draining'`,
	} {
		exec(t, pool, `UPDATE queen_proxy.cells SET `+set+` WHERE id = $1`, cell)
		l.expect(t, a, b)
	}
	exec(t, pool, `UPDATE queen_proxy.cells SET region = 'moved', capacity_slots = 9 WHERE id = $1`, cell)
	l.expect(t)
	exec(t, pool, `SELECT queen_proxy.update_cell($1, NULL, NULL, NULL, 'scoped', NULL)`, cell)
	l.expect(t, a, b)
}

// TestUpdateCellValidates: update_cell refuses what it cannot store.
func TestUpdateCellValidates(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	for _, c := range []struct {
		args []any
		code string
		part string
	}{
		{[]any{cell, "ftp://x", nil, false, nil, nil}, "22023", "invalid broker URL"},
		{[]any{cell, nil, "s", true, nil, nil}, "22023", "not both"},
		{[]any{cell, nil, "", false, nil, nil}, "22023", "empty"},
		{[]any{cell, nil, nil, false, "maybe", nil}, "22023", "invalid tenancy"},
		{[]any{cell, nil, nil, false, nil, " "}, "22023", "region"},
		{[]any{"00000000-0000-0000-0000-000000000001", nil, nil, false, "scoped", nil}, "P0002", "unknown cell"},
	} {
		err := callErr(t, pool, `SELECT queen_proxy.update_cell($1, $2, $3, $4, $5, $6)`, c.args...)
		wantPgErr(t, err, c.code, c.part)
	}
	exec(t, pool, `SELECT queen_proxy.update_cell($1, 'https://127.0.0.1:7443', 'sec', false, 'unscoped', 'r2')`, cell)
	got := scalar[string](t, pool, `SELECT base_url || '|' || cell_secret || '|' || tenancy_stated || '|' || region FROM queen_proxy.cells WHERE id = $1`, cell)
	if got != "https://127.0.0.1:7443|sec|unscoped|r2" {
		t.Fatalf("cell after update: %s", got)
	}
}

// TestKeeperIsFirstPlaced: the keeper is the first cluster placed on the
// cell; an older cluster moved in later does not take it, placed_at cannot
// be written, and a move re-stamps it.
func TestKeeperIsFirstPlaced(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	home, away := newCell(t, pool), newCell(t, pool)
	old := newCluster(t, pool, tenant, away)
	keeper := newCluster(t, pool, tenant, home)
	keeperOf := func(cell string) string {
		t.Helper()
		return scalar[string](t, pool, `SELECT coalesce(queen_proxy.cell_keeper_cluster($1)::text, '')`, cell)
	}
	if keeperOf(home) != keeper || keeperOf(away) != old {
		t.Fatal("each cell's only cluster is not its keeper")
	}

	// Moving the older cluster onto home (its keeper is released on away:
	// away is emptied) leaves home's keeper where it is.
	exec(t, pool, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, old, home)
	if got := keeperOf(home); got != keeper {
		t.Fatalf("moving an older cluster in made %s the keeper, want %s", got, keeper)
	}
	if !scalar[bool](t, pool, `SELECT (SELECT placed_at FROM queen_proxy.clusters WHERE id = $1) > (SELECT placed_at FROM queen_proxy.clusters WHERE id = $2)`, old, keeper) {
		t.Fatal("the moved cluster was not placed anew")
	}

	// placed_at is the trigger's: a direct write is ignored.
	exec(t, pool, `UPDATE queen_proxy.clusters SET placed_at = '2000-01-01' WHERE id = $1`, old)
	exec(t, pool, `INSERT INTO queen_proxy.clusters (tenant_id, cell_id, plan_id, slug, placed_at, created_at)
		SELECT $1, $2, id, $3, '1999-01-01', '1999-01-01' FROM queen_proxy.plans WHERE code = 'free'`, tenant, home, uniq("c"))
	if got := keeperOf(home); got != keeper {
		t.Fatalf("writing placed_at made %s the keeper, want %s", got, keeper)
	}

	// Two clusters placed in one transaction keep their order.
	cell := newCell(t, pool)
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctxT(t))
	var first, second string
	for _, id := range []*string{&first, &second} {
		if err := tx.QueryRow(ctxT(t), "SELECT queen_proxy.create_cluster($1, $2, 'free', $3)::text", tenant, uniq("c"), cell).Scan(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := keeperOf(cell); got != first {
		t.Fatalf("keeper %s, want the first created in the transaction %s", got, first)
	}
}

// TestStatedUnscopedCellTakesOneCluster: a cell stated unscoped refuses a
// second cluster whatever the probe recorded.
func TestStatedUnscopedCellTakesOneCluster(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cell := newCell(t, pool)
	exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = 'unscoped', tenant_scoping = 'scoped' WHERE id = $1`, cell)
	newCluster(t, pool, tenant, cell)
	err := callErr(t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'free', $3)", tenant, uniq("c"), cell)
	wantPgErr(t, err, "55000", "does not scope by x-queen-tenant", "stated by the operator", "dedicated cell")
}

// TestKeeperOnly holds the one definition of a cell not known to scope.
func TestKeeperOnly(t *testing.T) {
	pool := db(t)
	for _, c := range []struct {
		stated, scoping string
		want            bool
	}{
		{"unscoped", "scoped", true}, {"unscoped", "unknown", true}, {"unscoped", "unscoped", true},
		{"scoped", "scoped", false}, {"scoped", "unknown", false}, {"scoped", "unscoped", true},
		{"probe", "scoped", false}, {"probe", "unknown", true}, {"probe", "unscoped", true},
	} {
		if got := scalar[bool](t, pool, `SELECT queen_proxy.tenancy_keeper_only($1, $2)`, c.stated, c.scoping); got != c.want {
			t.Errorf("keeper only (stated %s, probe %s) = %v, want %v", c.stated, c.scoping, got, c.want)
		}
	}
}

// TestKeeperCannotLeaveUnreleased: on a cell not known to scope, the keeper
// may not move away or be deleted (directly or with its tenant) while other
// clusters stay, unless the transaction released it; a non-keeper may go,
// the last cluster may go, and a cell known to scope does not guard.
func TestKeeperCannotLeaveUnreleased(t *testing.T) {
	pool := db(t)
	ctx := ctxT(t)
	keeperTenant, _ := newTenant(t, pool)
	otherTenant, _ := newTenant(t, pool)
	cell, elsewhere := newCell(t, pool), newCell(t, pool)
	keeper := newCluster(t, pool, keeperTenant, cell)
	next := newCluster(t, pool, otherTenant, cell)
	refused := func(err error) {
		t.Helper()
		if err == nil {
			t.Fatal("the keeper left the cell")
		}
		wantPgErr(t, err, "55000", "is the keeper of cell", "not known to keep tenants apart", "release_keeper('"+keeper+"')", "empty the cell")
	}
	keeperOf := func() string {
		t.Helper()
		return scalar[string](t, pool, `SELECT queen_proxy.cell_keeper_cluster($1)::text`, cell)
	}

	for _, stated := range []string{"probe", "unscoped"} {
		exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = $2 WHERE id = $1`, cell, stated)
		_, err := pool.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, keeper, elsewhere)
		refused(err)
		_, err = pool.Exec(ctx, `DELETE FROM queen_proxy.clusters WHERE id = $1`, keeper)
		refused(err)
		_, err = pool.Exec(ctx, `SELECT queen_proxy.delete_tenant($1, true)`, keeperTenant)
		refused(err)
	}
	// Stated scoped, but a probe contradicted it: still keeper only.
	exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = 'scoped', tenant_scoping = 'unscoped' WHERE id = $1`, cell)
	_, err := pool.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, keeper, elsewhere)
	refused(err)
	if keeperOf() != keeper {
		t.Fatal("a refused leave changed the keeper")
	}

	// No release before the keeper's traffic has stopped everywhere: a
	// live gateway that has not acknowledged the drain holds it.
	_, err = pool.Exec(ctx, `SELECT queen_proxy.release_keeper($1, '{}')`, keeper)
	wantPgErr(t, err, "55000", "may still be sending traffic", "no drain started", "begin_cluster_drain")
	exec(t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'leave')`, keeper)
	exec(t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'leave')`, next)
	gateway := "7f1c2a9e-0000-4000-8000-000000000001"
	exec(t, pool, `SELECT queen_proxy.gateway_heartbeat($1, 'gw-a')`, gateway)
	t.Cleanup(func() { exec(t, pool, `SELECT queen_proxy.gateway_leave($1)`, gateway) })
	_, err = pool.Exec(ctx, `SELECT queen_proxy.release_keeper($1, '{}')`, keeper)
	wantPgErr(t, err, "55000", "may still be sending traffic", "gateways not done: gw-a")
	exec(t, pool, `SELECT queen_proxy.ack_cluster_drain(drain_id, $2) FROM queen_proxy.cluster_drains WHERE cluster_id = $1`, keeper, gateway)
	exec(t, pool, `SELECT queen_proxy.ack_cluster_drain(drain_id, $2) FROM queen_proxy.cluster_drains WHERE cluster_id = $1`, next, gateway)

	// A release for another cluster does not count; one for the keeper
	// does, for its own transaction only, and is audited.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.release_keeper($1, '{}')`, next); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, keeper, elsewhere)
	refused(err)
	_ = tx.Rollback(ctx)

	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT queen_proxy.release_keeper($1, '{"queues_deleted": 2}')`, keeper).Scan(&ok); err != nil || !ok {
		t.Fatalf("release_keeper = %v, %v", ok, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, keeper, elsewhere); err != nil {
		t.Fatalf("a released keeper could not move: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if keeperOf() != next {
		t.Fatalf("keeper %s after the move, want %s", keeperOf(), next)
	}
	if o := oneOp(t, pool, keeperTenant, "keeper_released"); str(o.ClusterID) != keeper || o.Meta["cell_id"] != cell || o.Meta["queues_deleted"] != float64(2) {
		t.Fatalf("audit row %+v", o)
	}
	// The release does not outlive its transaction.
	exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = 'probe', tenant_scoping = 'unknown' WHERE id = $1`, cell)
	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, keeper, cell); err != nil {
		t.Fatalf("moving back (placed last, not the keeper): %v", err)
	}
	if keeperOf() != next {
		t.Fatal("moving the old keeper back made it the keeper again")
	}
	_, err = pool.Exec(ctx, `DELETE FROM queen_proxy.clusters WHERE id = $1`, next)
	if err == nil {
		t.Fatal("the new keeper was deleted unreleased")
	}
	if unknown := scalar[bool](t, pool, `SELECT queen_proxy.release_keeper(gen_random_uuid(), NULL)`); unknown {
		t.Fatal("release_keeper of an unknown cluster returned true")
	}

	// A non-keeper may leave.
	exec(t, pool, `DELETE FROM queen_proxy.clusters WHERE id = $1`, keeper)

	// elsewhere was emptied when the old keeper moved back unreleased: it
	// holds that keeper's residue, and the next cluster placed there (which
	// would be its keeper) is refused until the residue is released.
	residue := scalar[string](t, pool, `SELECT keeper_residue -> 0 ->> 'cluster_id' FROM queen_proxy.cells WHERE id = $1`, elsewhere)
	if residue != keeper {
		t.Fatalf("residue of the emptied cell names %q, want %s", residue, keeper)
	}
	_, err = pool.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, next, elsewhere)
	wantPgErr(t, err, "55000", "is empty, but cluster", "left it as the keeper", "release_cell_residue('"+elsewhere+"')")

	// The last cluster may leave (the cell is emptied, and records the
	// residue); with the residue released it may be placed.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.release_cell_residue($1, '{"queues_found": 0}')`, elsewhere); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, next, elsewhere); err != nil {
		t.Fatalf("placing with the residue released: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.clusters WHERE cell_id = $1`, cell); n != 0 {
		t.Fatalf("%d clusters left on the emptied cell", n)
	}
	if got := scalar[string](t, pool, `SELECT coalesce(keeper_residue::text, 'none') FROM queen_proxy.cells WHERE id = $1`, elsewhere); got != "none" {
		t.Fatalf("residue after a released placement: %s", got)
	}
	if got := scalar[string](t, pool, `SELECT keeper_residue -> 0 ->> 'cluster_id' FROM queen_proxy.cells WHERE id = $1`, cell); got != next {
		t.Fatalf("residue of the newly emptied cell names %q, want %s", got, next)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.outbox WHERE kind = 'cell_residue_released' AND payload->>'cell_id' = $1`, elsewhere); n != 1 {
		t.Fatalf("%d cell_residue_released events", n)
	}
	// A cell known to scope takes a cluster despite a residue.
	exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = 'scoped' WHERE id = $1`, cell)
	newCluster(t, pool, otherTenant, cell)
	if unknown := scalar[bool](t, pool, `SELECT queen_proxy.release_cell_residue(gen_random_uuid(), NULL)`); unknown {
		t.Fatal("release_cell_residue of an unknown cell returned true")
	}
}

// TestTenantDeleteEmptyingCellNeedsNoRelease: a tenant delete that removes
// every cluster of a cell, keeper included, is allowed; a cell known to
// scope lets its keeper go.
func TestTenantDeleteEmptyingCellNeedsNoRelease(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cell := newCell(t, pool)
	newCluster(t, pool, tenant, cell)
	newCluster(t, pool, tenant, cell)
	exec(t, pool, `SELECT queen_proxy.delete_tenant($1, true)`, tenant)
	if n := scalar[int](t, pool, `SELECT jsonb_array_length(keeper_residue) FROM queen_proxy.cells WHERE id = $1`, cell); n != 2 {
		t.Fatalf("the emptied cell records %d residues, want both clusters", n)
	}

	other, _ := newTenant(t, pool)
	scoped := newCell(t, pool)
	for _, c := range []struct{ stated, scoping string }{{"scoped", "unknown"}, {"probe", "scoped"}} {
		exec(t, pool, `UPDATE queen_proxy.cells SET tenancy_stated = $2, tenant_scoping = $3 WHERE id = $1`, scoped, c.stated, c.scoping)
		keeper := newCluster(t, pool, tenant2(t, pool), scoped)
		newCluster(t, pool, other, scoped)
		exec(t, pool, `DELETE FROM queen_proxy.clusters WHERE id = $1`, keeper)
	}
}

func tenant2(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	id, _ := newTenant(t, pool)
	return id
}
