package migrations

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// freshUsage empties the usage tables (the usage tests count rows exactly)
// and returns a new cluster.
func freshUsage(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	exec(t, pool, "DELETE FROM queen_proxy.usage_minutes; DELETE FROM queen_proxy.usage_days; DELETE FROM queen_proxy.usage_rollup_pending; UPDATE queen_proxy.usage_rollup_state SET rolled_through = NULL, rolled_at = NULL, pruned_before = NULL")
	tenant, _ := newTenant(t, pool)
	return newCluster(t, pool, tenant, newCell(t, pool))
}

// utcDay returns midnight UTC, days from today.
func utcDay(days int) time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, days)
}

func addMinute(t *testing.T, pool *pgxpool.Pool, cluster string, at time.Time, op string, msgs, reqs, in, out int) {
	t.Helper()
	exec(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (cluster_id, minute, op_class) DO UPDATE SET msgs = usage_minutes.msgs + EXCLUDED.msgs,
		  reqs = usage_minutes.reqs + EXCLUDED.reqs, bytes_in = usage_minutes.bytes_in + EXCLUDED.bytes_in,
		  bytes_out = usage_minutes.bytes_out + EXCLUDED.bytes_out`, cluster, at, op, msgs, reqs, in, out)
}

type dayRow struct{ msgs, reqs, in, out int }

func day(t *testing.T, pool *pgxpool.Pool, cluster string, d time.Time, op string) (dayRow, bool) {
	t.Helper()
	var r dayRow
	err := pool.QueryRow(ctxT(t), `SELECT msgs, reqs, bytes_in, bytes_out FROM queen_proxy.usage_days
		WHERE cluster_id = $1 AND day = $2::date AND op_class = $3`, cluster, d.Format("2006-01-02"), op).Scan(&r.msgs, &r.reqs, &r.in, &r.out)
	if err != nil {
		return dayRow{}, false
	}
	return r, true
}

func TestRollupUsageDays(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d3, d1, today := utcDay(-3), utcDay(-1), utcDay(0)
	addMinute(t, pool, cluster, d3.Add(10*time.Minute), "push", 5, 1, 100, 0)
	addMinute(t, pool, cluster, d3.Add(23*time.Hour+59*time.Minute), "push", 7, 2, 50, 0) // last minute of the UTC day
	addMinute(t, pool, cluster, d3.Add(time.Hour), "delivery", 4, 1, 0, 40)
	addMinute(t, pool, cluster, d1.Add(time.Hour), "txn", 1, 1, 10, 10)
	addMinute(t, pool, cluster, today, "push", 9, 9, 9, 9) // today is not closed
	l := listen(t, pool)

	// A session in a far-off time zone still rolls up by UTC day.
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctxT(t), "SET TimeZone = 'Pacific/Kiritimati'"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctxT(t), "SELECT queen_proxy.rollup_usage_days()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Exec(ctxT(t), "RESET TimeZone")
	conn.Release()
	if n != 3 {
		t.Fatalf("rollup wrote %d rows, want 3", n)
	}
	l.expect(t)
	if r, ok := day(t, pool, cluster, d3, "push"); !ok || r != (dayRow{12, 3, 150, 0}) {
		t.Fatalf("push day = %+v %v", r, ok)
	}
	if r, ok := day(t, pool, cluster, d3, "delivery"); !ok || r != (dayRow{4, 1, 0, 40}) {
		t.Fatalf("delivery day = %+v %v", r, ok)
	}
	if _, ok := day(t, pool, cluster, today, "push"); ok {
		t.Fatal("today was rolled up")
	}

	// Minutes arriving late correct the day: the day is replaced, not added
	// to, and (037) only the changed row is written.
	addMinute(t, pool, cluster, d3.Add(2*time.Hour), "push", 1, 1, 1, 1)
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 1 {
		t.Fatalf("second rollup wrote %d rows, want 1", n)
	}
	if r, _ := day(t, pool, cluster, d3, "push"); r != (dayRow{13, 4, 151, 1}) {
		t.Fatalf("push day after late minute = %+v", r)
	}
	// p_through limits the days; a future p_through is clamped to yesterday.
	addMinute(t, pool, cluster, d3.Add(3*time.Hour), "delivery", 1, 1, 0, 1)
	addMinute(t, pool, cluster, d1.Add(3*time.Hour), "txn", 1, 1, 0, 0)
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days($1::date)", d3.Format("2006-01-02")); n != 1 {
		t.Fatalf("rollup through %s wrote %d rows, want 1", d3.Format("2006-01-02"), n)
	}
	if r, _ := day(t, pool, cluster, d1, "txn"); r != (dayRow{1, 1, 10, 10}) {
		t.Fatalf("rollup through %s changed %s: %+v", d3.Format("2006-01-02"), d1.Format("2006-01-02"), r)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(current_date + 30)"); n != 1 {
		t.Fatalf("rollup through the future wrote %d rows, want 1", n)
	}
	if r, _ := day(t, pool, cluster, d1, "txn"); r != (dayRow{2, 2, 10, 10}) {
		t.Fatalf("txn day after the late minute = %+v", r)
	}
	if _, ok := day(t, pool, cluster, today, "push"); ok {
		t.Fatal("a future p_through rolled up today")
	}
}

func TestClusterMonthMsgs(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	jan := func(d, h, m int) time.Time { return time.Date(2026, 1, d, h, m, 0, 0, time.UTC) }
	// Jan 5: rolled up 10+5, live minutes 12 -> 15 (the larger).
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, '2026-01-05', 'push', 10), ($1, '2026-01-05', 'delivery', 5)", cluster)
	addMinute(t, pool, cluster, jan(5, 1, 0), "push", 12, 1, 0, 0)
	// Jan 6: only live minutes 7 (in two op classes).
	addMinute(t, pool, cluster, jan(6, 1, 0), "push", 4, 1, 0, 0)
	addMinute(t, pool, cluster, jan(6, 2, 0), "txn", 3, 1, 0, 0)
	// Jan 7: rolled up 3, minutes 20 -> 20.
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, '2026-01-07', 'push', 3)", cluster)
	addMinute(t, pool, cluster, jan(7, 3, 0), "push", 20, 1, 0, 0)
	// Jan 8: only rolled up 2.
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, '2026-01-08', 'read', 2)", cluster)
	// The month's edges, in UTC.
	addMinute(t, pool, cluster, jan(31, 23, 59), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), "push", 100, 1, 0, 0)
	addMinute(t, pool, cluster, time.Date(2025, 12, 31, 23, 59, 0, 0, time.UTC), "push", 100, 1, 0, 0)
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, '2026-02-01', 'push', 1000)", cluster)
	l := listen(t, pool)

	const want = 15 + 7 + 20 + 2 + 1
	for _, month := range []string{"2026-01-01", "2026-01-17", "2026-01-31"} {
		if got := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_msgs($1, $2::date)", cluster, month); got != want {
			t.Errorf("cluster_month_msgs(%s) = %d, want %d", month, got, want)
		}
	}
	if got := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_msgs($1, '2026-02-10')", cluster); got != 1000 {
		t.Errorf("February = %d, want 1000 (the larger of 1000 rolled up and 100 live)", got)
	}
	if got := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_msgs(gen_random_uuid(), '2026-01-01')"); got != 0 {
		t.Errorf("unknown cluster = %d, want 0", got)
	}
	l.expect(t)
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.cluster_month_msgs($1, NULL)", cluster), "22023", "cluster_month_msgs: month")
	if v := scalar[string](t, pool, "SELECT provolatile::text FROM pg_proc WHERE oid = 'queen_proxy.cluster_month_msgs(uuid, date)'::regprocedure"); v != "s" {
		t.Errorf("cluster_month_msgs volatility = %q, want STABLE", v)
	}
}

// prune_usage_minutes removes the minutes of final days older than the
// retention, never a row that usage_days does not hold.
func TestPruneUsageMinutes(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	old := utcDay(-10)
	addMinute(t, pool, cluster, old.Add(time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, old.Add(2*time.Hour), "push", 1, 1, 0, 0)
	edge := utcDay(-5)
	addMinute(t, pool, cluster, edge.Add(-time.Minute), "read", 1, 1, 0, 0) // last minute before the cutoff: pruned
	addMinute(t, pool, cluster, edge, "read", 1, 1, 0, 0)                   // the cutoff itself: kept
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	addMinute(t, pool, cluster, old.Add(time.Hour), "delivery", 1, 1, 0, 0) // written after the roll-up: its day is kept
	l := listen(t, pool)

	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes()"); n != 0 {
		t.Fatalf("default keep (90 days) pruned %d rows", n)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes(5)"); n != 1 {
		t.Fatalf("pruned %d rows, want 1", n)
	}
	l.expect(t)
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.usage_minutes WHERE cluster_id = $1", cluster); n != 4 {
		t.Fatalf("%d minute rows left, want 4", n)
	}
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes(5)"); n != 3 {
		t.Fatalf("after the roll-up, pruned %d rows, want the late day's 3", n)
	}
	if r, ok := day(t, pool, cluster, old, "delivery"); !ok || r.msgs != 1 {
		t.Fatalf("the late row was pruned without being rolled up: %+v, %v", r, ok)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.prune_usage_minutes(0)"), "22023", "prune_usage_minutes: keep_days")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.prune_usage_minutes(NULL)"), "22023", "prune_usage_minutes: keep_days")
}

// 017: the roll-up carries unanswered_msgs into usage_days, and a minute
// row can never claim more unanswered messages than it bills.
func TestUnansweredMsgsRolledUpAndBoundedByMsgs(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d1 := utcDay(-1)
	exec(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, unanswered_msgs)
		VALUES ($1, $2, 'push', 10, 2, 4), ($1, $3, 'push', 5, 1, 5)`, cluster, d1.Add(time.Hour), d1.Add(2*time.Hour))
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 1 {
		t.Fatalf("rolled up %d day rows, want 1", n)
	}
	if got := scalar[int64](t, pool, `SELECT unanswered_msgs FROM queen_proxy.usage_days
		WHERE cluster_id = $1 AND day = $2::date AND op_class = 'push'`, cluster, d1.Format("2006-01-02")); got != 9 {
		t.Fatalf("usage_days.unanswered_msgs = %d, want 9", got)
	}
	_, err := pool.Exec(ctxT(t), `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, unanswered_msgs)
		VALUES ($1, $2, 'txn', 1, 2)`, cluster, d1.Add(3*time.Hour))
	if err == nil || !strings.Contains(err.Error(), "usage_minutes_unanswered_within_msgs") {
		t.Fatalf("unanswered beyond msgs: %v, want the check constraint's refusal", err)
	}
}
