package migrations

import (
	"testing"
	"time"
)

// The monthly quota counts billable pushes only (push and txn), per day the
// larger of the rolled-up and the live total, within the UTC month.
func TestMeterBillableMonthCountsPushesOnly(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	addMinute(t, pool, cluster, at("2030-06-01T10:00:00Z"), "push", 5, 1, 0, 0)
	addMinute(t, pool, cluster, at("2030-06-30T23:59:00Z"), "txn", 3, 1, 0, 0)
	addMinute(t, pool, cluster, at("2030-06-10T08:00:00Z"), "delivery", 100, 1, 0, 0)
	addMinute(t, pool, cluster, at("2030-06-10T08:00:00Z"), "read", 0, 7, 0, 0)
	addMinute(t, pool, cluster, at("2030-07-01T00:00:00Z"), "push", 1000, 1, 0, 0) // next month
	addMinute(t, pool, cluster, at("2030-05-31T23:59:00Z"), "push", 1000, 1, 0, 0) // previous month
	exec(t, pool, `INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs, reqs) VALUES
		($1, '2030-06-01', 'push', 9, 1), ($1, '2030-06-02', 'txn', 2, 1), ($1, '2030-06-02', 'delivery', 50, 1)`, cluster)

	for _, day := range []string{"2030-06-01", "2030-06-15", "2030-06-30"} {
		if n := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_billable_msgs($1, $2::date)", cluster, day); n != 9+3+2 {
			t.Errorf("billable msgs for the month of %s = %d, want 14", day, n)
		}
	}
	// The reference function counts every class, deliveries included.
	if n := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_msgs($1, '2030-06-15')", cluster); n != 9+52+100+3 {
		t.Errorf("cluster_month_msgs = %d, want 164", n)
	}
	if n := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_billable_msgs(public.gen_random_uuid(), '2030-06-15')"); n != 0 {
		t.Errorf("unknown cluster: %d", n)
	}
	err := callErr(t, pool, "SELECT queen_proxy.cluster_month_billable_msgs($1, NULL)", cluster)
	wantPgErr(t, err, "22023", "cluster_month_billable_msgs", "month")
}

// Each monthly quota announcement is made once per cluster, month and kind:
// one outbox event, one audit row, one invalidation.
func TestMeterAnnounceMonthlyQuotaOnce(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)

	announce := func(kind, month string, msgs, quota int64) bool {
		t.Helper()
		return scalar[bool](t, pool, "SELECT queen_proxy.announce_monthly_quota($1, $2, $3, $4, $5)", cluster, kind, month, msgs, quota)
	}
	if !announce("cluster_monthly_quota_warning", "2030-06", 85, 100) {
		t.Fatal("first warning not announced")
	}
	l.expect(t, cluster)
	if announce("cluster_monthly_quota_warning", "2030-06", 90, 100) {
		t.Fatal("second warning of the month announced")
	}
	l.expect(t)
	if !announce("cluster_monthly_quota_blocked", "2030-06", 101, 100) {
		t.Fatal("block not announced")
	}
	if !announce("cluster_monthly_quota_warning", "2030-07", 0, 0) {
		t.Fatal("next month's warning not announced")
	}
	l.expect(t, cluster, cluster)

	// An event queen_proxy already put in the outbox counts as made.
	exec(t, pool, `SELECT queen_proxy.emit_outbox('cluster_monthly_quota_blocked',
		jsonb_build_object('cluster_id', $1::uuid, 'month', '2030-08'))`, cluster)
	if announce("cluster_monthly_quota_blocked", "2030-08", 5, 1) {
		t.Fatal("announced over an existing outbox event")
	}
	l.expect(t)

	counts := map[string]int{}
	rows, err := pool.Query(ctxT(t), `SELECT kind || ' ' || (payload ->> 'month') FROM queen_proxy.outbox
		WHERE payload ->> 'cluster_id' = $1`, cluster)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		counts[k]++
	}
	rows.Close()
	want := map[string]int{
		"cluster_monthly_quota_warning 2030-06": 1, "cluster_monthly_quota_blocked 2030-06": 1,
		"cluster_monthly_quota_warning 2030-07": 1, "cluster_monthly_quota_blocked 2030-08": 1,
	}
	if len(counts) != len(want) {
		t.Fatalf("outbox events = %v", counts)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Fatalf("outbox events = %v, want %v", counts, want)
		}
	}

	var payload map[string]any
	if err := pool.QueryRow(ctxT(t), `SELECT payload FROM queen_proxy.outbox WHERE kind = 'cluster_monthly_quota_warning'
		AND payload ->> 'cluster_id' = $1 AND payload ->> 'month' = '2030-06'`, cluster).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if payload["msgs"] != float64(85) || payload["quota"] != float64(100) || payload["percent"] != float64(85) ||
		payload["tenant_id"] != tenant || payload["cluster_slug"] == nil {
		t.Fatalf("payload = %v", payload)
	}
	var zeroPercent float64
	if err := pool.QueryRow(ctxT(t), `SELECT (payload ->> 'percent')::float8 FROM queen_proxy.outbox
		WHERE payload ->> 'cluster_id' = $1 AND payload ->> 'month' = '2030-07'`, cluster).Scan(&zeroPercent); err != nil || zeroPercent != 100 {
		t.Fatalf("percent for a quota of 0 = %v, %v", zeroPercent, err)
	}

	warns := ops(t, pool, tenant, "monthly_quota_warning")
	if len(warns) != 2 {
		t.Fatalf("%d warning audit rows, want 2 (2030-06, 2030-07)", len(warns))
	}
	for i, month := range []string{"2030-06", "2030-07"} {
		if w := warns[i]; w.Actor != "system" || str(w.ClusterID) != cluster || str(w.Target) != month {
			t.Fatalf("audit row %d = %+v", i, w)
		}
	}
	if n := len(ops(t, pool, tenant, "monthly_quota_blocked")); n != 1 {
		t.Fatalf("%d block audit rows, want 1 (the 2030-08 event was queen_proxy's)", n)
	}

	err = callErr(t, pool, "SELECT queen_proxy.announce_monthly_quota($1, 'cluster_quota', '2030-06', 1, 1)", cluster)
	wantPgErr(t, err, "22023", "announce_monthly_quota", "kind")
	err = callErr(t, pool, "SELECT queen_proxy.announce_monthly_quota($1, 'cluster_monthly_quota_warning', '2030-13', 1, 1)", cluster)
	wantPgErr(t, err, "22023", "announce_monthly_quota", "YYYY-MM")
	err = callErr(t, pool, "SELECT queen_proxy.announce_monthly_quota($1, 'cluster_monthly_quota_warning', '2030-06', -1, 1)", cluster)
	wantPgErr(t, err, "22023", "announce_monthly_quota", "non-negative")
	err = callErr(t, pool, "SELECT queen_proxy.announce_monthly_quota(public.gen_random_uuid(), 'cluster_monthly_quota_warning', '2030-06', 1, 1)")
	wantPgErr(t, err, "P0002", "announce_monthly_quota", "unknown cluster")
	l.expect(t)

	// The announcement keys go with the cluster.
	exec(t, pool, "DELETE FROM queen_proxy.clusters WHERE id = $1", cluster)
	if n := scalar[int](t, pool, "SELECT count(*)::int FROM queen_proxy.quota_announcements WHERE cluster_id = $1", cluster); n != 0 {
		t.Fatalf("%d announcement keys left after the cluster was deleted", n)
	}
}

// Batch ids older than the horizon are pruned.
func TestMeterBatchesPrune(t *testing.T) {
	pool := db(t)
	old, recent := "old-"+randHex(4), "new-"+randHex(4)
	exec(t, pool, `INSERT INTO queen_proxy.meter_batches (batch_id, row_count, applied_at)
		VALUES ($1, 3, now() - interval '91 days'), ($2, 4, now() - interval '89 days')`, old, recent)
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_meter_batches(90)"); n < 1 {
		t.Fatalf("pruned %d ids", n)
	}
	if n := scalar[int](t, pool, "SELECT count(*)::int FROM queen_proxy.meter_batches WHERE batch_id IN ($1, $2)", old, recent); n != 1 {
		t.Fatalf("%d of the two ids left, want the recent one", n)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_meter_batches()"); n != 0 {
		t.Fatalf("default horizon pruned %d", n)
	}
	err := callErr(t, pool, "SELECT queen_proxy.prune_meter_batches(0)")
	wantPgErr(t, err, "22023", "prune_meter_batches", "keep_days")
	err = callErr(t, pool, "INSERT INTO queen_proxy.meter_batches (batch_id) VALUES ('  ')")
	wantPgErr(t, err, "23514")
}
