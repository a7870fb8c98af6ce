package migrations

import (
	"testing"
)

// TestDrainWaitsForLiveGateways: a drain is complete once every gateway
// whose heartbeat is recent has acknowledged it; a lapsed gateway is not
// waited for and learns it lapsed when it beats again; a drain belongs to
// the cell it was started on.
func TestDrainWaitsForLiveGateways(t *testing.T) {
	pool := db(t)
	ctx := ctxT(t)
	tenant, _ := newTenant(t, pool)
	cell, other := newCell(t, pool), newCell(t, pool)
	cluster := newCluster(t, pool, tenant, cell)
	waiting := func() string {
		t.Helper()
		return scalar[string](t, pool, `SELECT coalesce(string_agg(gateway_name, ','), '') FROM queen_proxy.cluster_drain_waiting($1)`, cluster)
	}
	drained := func() bool {
		t.Helper()
		return scalar[bool](t, pool, `SELECT queen_proxy.cluster_drained($1)`, cluster)
	}
	const a, b = "7f1c2a9e-0000-4000-8000-00000000000a", "7f1c2a9e-0000-4000-8000-00000000000b"
	t.Cleanup(func() {
		exec(t, pool, `SELECT queen_proxy.gateway_leave($1)`, a)
		exec(t, pool, `SELECT queen_proxy.gateway_leave($1)`, b)
	})

	_, err := pool.Exec(ctx, `SELECT * FROM queen_proxy.cluster_drain_waiting($1)`, cluster)
	wantPgErr(t, err, "55000", "is not being drained", "begin_cluster_drain")
	if drained() {
		t.Fatal("a cluster no drain was started for counts as drained")
	}
	if !scalar[bool](t, pool, `SELECT NOT queen_proxy.gateway_heartbeat($1, 'gw-a')`, a) {
		t.Fatal("a new gateway was told it was alive already")
	}
	if !scalar[bool](t, pool, `SELECT queen_proxy.gateway_heartbeat($1, 'gw-a')`, a) {
		t.Fatal("a gateway beating again was told it had lapsed")
	}
	exec(t, pool, `SELECT queen_proxy.gateway_heartbeat($1, 'gw-b')`, b)
	exec(t, pool, `UPDATE queen_proxy.gateway_instances SET heartbeat_at = now() - queen_proxy.gateway_lapse() - interval '1 second' WHERE id = $1`, b)

	drain := scalar[string](t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'leave')::text`, cluster)
	if again := scalar[string](t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'delete')::text`, cluster); again != drain {
		t.Fatalf("a second begin started another drain: %s, then %s", drain, again)
	}
	if w := waiting(); w != "gw-a" || drained() {
		t.Fatalf("waiting for %q (drained %v), want gw-a only: the lapsed gw-b is not waited for", w, drained())
	}
	if !scalar[bool](t, pool, `SELECT queen_proxy.ack_cluster_drain($1, $2)`, drain, a) {
		t.Fatal("ack refused")
	}
	if w := waiting(); w != "" || !drained() {
		t.Fatalf("after gw-a's ack: waiting for %q, drained %v", w, drained())
	}
	// gw-b comes back: it is told it lapsed, and counts again.
	if scalar[bool](t, pool, `SELECT queen_proxy.gateway_heartbeat($1, 'gw-b')`, b) {
		t.Fatal("a lapsed gateway was told it was alive all along")
	}
	if w := waiting(); w != "gw-b" || drained() {
		t.Fatalf("after gw-b came back: waiting for %q, drained %v", w, drained())
	}

	// Ending the drain serves the cluster again; acks of it are gone.
	if !scalar[bool](t, pool, `SELECT queen_proxy.end_cluster_drain($1)`, cluster) {
		t.Fatal("end_cluster_drain found no drain")
	}
	if scalar[bool](t, pool, `SELECT queen_proxy.ack_cluster_drain($1, $2)`, drain, a) {
		t.Fatal("an ended drain took an ack")
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queen_proxy.operations WHERE cluster_id = $1 AND action IN ('cluster_drain_started', 'cluster_drain_ended')`, cluster); n != 2 {
		t.Fatalf("%d drain audit rows, want 2", n)
	}

	// A drain is of the cell it was started on: the cluster moved off it is
	// not drained where it is now.
	exec(t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'leave')`, cluster)
	exec(t, pool, `UPDATE queen_proxy.clusters SET cell_id = $2 WHERE id = $1`, cluster, other)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queen_proxy.cluster_drains WHERE cluster_id = $1`, cluster); n != 0 {
		t.Fatal("the drain stayed after the cluster moved off the cell")
	}
	// A cluster taken out of deleting is served again.
	exec(t, pool, `SELECT queen_proxy.set_cluster_status($1, 'deleting')`, cluster)
	exec(t, pool, `SELECT queen_proxy.begin_cluster_drain($1, 'delete')`, cluster)
	exec(t, pool, `SELECT queen_proxy.set_cluster_status($1, 'active')`, cluster)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queen_proxy.cluster_drains WHERE cluster_id = $1`, cluster); n != 0 {
		t.Fatal("the delete's drain stayed after the cluster was resumed")
	}
}
