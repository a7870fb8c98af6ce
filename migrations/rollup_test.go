package migrations

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// rollupMismatchSQL counts the differences between usage_days and a plain
// re-aggregation of every minute row before today: rows missing on either
// side or with a different value. 0 means the roll-up is exact.
const rollupMismatchSQL = `SELECT count(*)::int FROM (
    SELECT cluster_id, (minute AT TIME ZONE 'UTC')::date AS day, op_class,
           sum(msgs) AS msgs, sum(reqs) AS reqs, sum(bytes_in) AS bytes_in, sum(bytes_out) AS bytes_out,
           sum(unanswered_msgs) AS unanswered_msgs
      FROM queen_proxy.usage_minutes
     WHERE minute < ((now() AT TIME ZONE 'UTC')::date)::timestamp AT TIME ZONE 'UTC'
     GROUP BY 1, 2, 3) f
  FULL JOIN queen_proxy.usage_days d USING (cluster_id, day, op_class)
 WHERE (f.msgs, f.reqs, f.bytes_in, f.bytes_out, f.unanswered_msgs)
       IS DISTINCT FROM (d.msgs, d.reqs, d.bytes_in, d.bytes_out, d.unanswered_msgs)`

// dayVersions returns each usage_days row's xmin by "op@day", which
// changes whenever the row is rewritten.
func dayVersions(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT op_class || '@' || to_char(day, 'YYYYMMDD'), xmin::text FROM queen_proxy.usage_days`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func pendingDays(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return scalar[string](t, pool, `SELECT coalesce(string_agg(to_char(day, 'YYYYMMDD'), ',' ORDER BY day), '') FROM queen_proxy.usage_rollup_pending`)
}

// 037: a late write to an old day is rolled up at the next run, the days
// that did not change are not rewritten, and usage_days always equals a
// full re-aggregation.
func TestRollupIncremental(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d10, d5, d2, d1, today := utcDay(-10), utcDay(-5), utcDay(-2), utcDay(-1), utcDay(0)
	addMinute(t, pool, cluster, d10.Add(time.Hour), "push", 3, 1, 30, 0)
	addMinute(t, pool, cluster, d5.Add(time.Hour), "push", 5, 1, 50, 0)
	addMinute(t, pool, cluster, d2.Add(time.Hour), "delivery", 2, 1, 0, 20)
	addMinute(t, pool, cluster, d1.Add(time.Hour), "txn", 1, 1, 10, 10)
	addMinute(t, pool, cluster, today.Add(time.Minute), "push", 9, 9, 9, 9)
	if got, want := pendingDays(t, pool), ymd(d10)+","+ymd(d5)+","+ymd(d2); got != want {
		t.Fatalf("pending days = %q, want %q (yesterday's and today's writes mark nothing)", got, want)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 4 {
		t.Fatalf("first roll-up wrote %d rows, want 4", n)
	}
	if got := pendingDays(t, pool); got != "" {
		t.Fatalf("pending days after the roll-up = %q", got)
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
	before := dayVersions(t, pool)

	// Nothing changed: nothing is written.
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 0 {
		t.Fatalf("a roll-up with nothing new wrote %d rows", n)
	}
	if got := dayVersions(t, pool); !sameMap(got, before) {
		t.Fatalf("unchanged days were rewritten: %v, were %v", got, before)
	}

	// A late write to the 10-day-old day (an upsert onto its row: the
	// UPDATE path) is rolled up next run; only its row is rewritten.
	addMinute(t, pool, cluster, d10.Add(time.Hour), "push", 4, 1, 40, 0)
	if got := pendingDays(t, pool); got != ymd(d10) {
		t.Fatalf("pending days after a late upsert = %q, want %s", got, ymd(d10))
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 1 {
		t.Fatalf("roll-up after a late write wrote %d rows, want 1", n)
	}
	if r, _ := day(t, pool, cluster, d10, "push"); r != (dayRow{7, 2, 70, 0}) {
		t.Fatalf("late day = %+v", r)
	}
	after := dayVersions(t, pool)
	for k, v := range before {
		if changed := after[k] != v; changed != (k == "push@"+ymd(d10)) {
			t.Errorf("row %s rewritten = %v", k, changed)
		}
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
	// An explicit p_through before a pending day leaves it pending.
	addMinute(t, pool, cluster, d5.Add(2*time.Hour), "read", 1, 1, 0, 0)
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days($1::date)", d10); n != 0 {
		t.Fatalf("roll-up through %s wrote %d rows", ymd(d10), n)
	}
	if got := pendingDays(t, pool); got != ymd(d5) {
		t.Fatalf("pending after a roll-up through an earlier day = %q, want %s", got, ymd(d5))
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 1 {
		t.Fatalf("roll-up wrote %d rows, want 1", n)
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The trigger is on the partitioned table, so a day partition made later by
// usage_partitions_ensure and the DEFAULT partition fire it too.
func TestRollupTriggerOnEveryPartition(t *testing.T) {
	pool := ownMigratedDatabase(t)
	cluster := newClusters(t, pool, 1)[0]
	late, lost := utcDay(-20), utcDay(-200)
	if n := scalar[int](t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $1::date)", late); n != 2 {
		t.Fatalf("made %d partitions for %s, want 2", n, ymd(late))
	}
	addMinute(t, pool, cluster, late.Add(time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, lost.Add(time.Hour), "push", 1, 1, 0, 0)
	where := `SELECT tableoid::regclass::text FROM queen_proxy.usage_minutes WHERE cluster_id = $1 AND minute = $2`
	if p := scalar[string](t, pool, where, cluster, late.Add(time.Hour)); p != "queen_proxy.usage_minutes_p"+ymd(late) {
		t.Fatalf("the late row is in %s", p)
	}
	if p := scalar[string](t, pool, where, cluster, lost.Add(time.Hour)); p != "queen_proxy.usage_minutes_default" {
		t.Fatalf("the row without a day partition is in %s", p)
	}
	if got, want := pendingDays(t, pool), ymd(lost)+","+ymd(late); got != want {
		t.Fatalf("pending days = %q, want %q", got, want)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM pg_inherits i
		WHERE i.inhparent = 'queen_proxy.usage_minutes'::regclass
		  AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = i.inhrelid AND g.tgname = 'usage_minutes_rollup_late')`); n != 0 {
		t.Fatalf("%d partitions of usage_minutes lack the trigger", n)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 2 {
		t.Fatalf("roll-up wrote %d rows, want 2", n)
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
}

// On the upgrade, 037 marks every day usage_minutes holds before today as
// pending, once, so the first roll-up corrects any day (here one whose
// usage_days row is stale and one never rolled up).
func TestRollupUpgradeMarksEveryDay(t *testing.T) {
	_, pool := migratedUpTo(t, "037_usage_rollup_incremental")
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	d30, d3, today := utcDay(-30), utcDay(-3), utcDay(0)
	addMinute(t, pool, cluster, d30.Add(time.Hour), "push", 3, 1, 0, 0)
	addMinute(t, pool, cluster, d30.Add(25*time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, d3.Add(time.Hour), "push", 2, 1, 0, 0)
	addMinute(t, pool, cluster, today.Add(time.Minute), "push", 2, 1, 0, 0)
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, $2::date, 'push', 1)", cluster, d30)
	ms, _ := load()
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.name == "037_usage_rollup_incremental" {
			if err := applyOne(ctxT(t), conn, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Release()
	if got, want := pendingDays(t, pool), ymd(d30)+","+ymd(d30.AddDate(0, 0, 1))+","+ymd(d3); got != want {
		t.Fatalf("pending days after the upgrade = %q, want %q", got, want)
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n != 3 {
		t.Fatalf("first roll-up wrote %d rows, want 3", n)
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
}

// What a roll-up costs before (017's, every minute row) and after (037's)
// on a usage_minutes of QG_ROLLUP_ROWS rows (default 200,000) over 30 day
// partitions, printed with -v; docs/metering.md quotes a run with
// 2,000,000. Both runs are the steady state: the days were rolled up
// before, and one late write went to a 10-day-old day.
func TestRollupCost(t *testing.T) {
	rows := rowsFromEnv(t, "QG_ROLLUP_ROWS", 200_000)
	_, pool := migratedUpTo(t, "037_usage_rollup_incremental")
	clusters := newClusters(t, pool, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	exec(t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", utcDay(-30), utcDay(0))
	// Rows spread evenly over the 30 days before today (one row per
	// cluster, class and minute slot).
	if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs)
		SELECT c[1 + i % 50], date_trunc('minute', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '30 days'
		       + ((i / 250)::bigint * 43200 * 60 / ($2::bigint / 250 + 1)) * interval '1 second'),
		       (ARRAY['push', 'delivery', 'txn', 'configure', 'read'])[1 + (i / 50) % 5], 1, 1
		  FROM generate_series(0, $2::int - 1) AS i, (SELECT $1::uuid[] AS c) AS cs
		ON CONFLICT DO NOTHING`, clusters, rows); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, "ANALYZE queen_proxy.usage_minutes")
	late := utcDay(-10).Add(time.Hour)
	timed := func(label string) (time.Duration, int) {
		t.Helper()
		addMinute(t, pool, clusters[0], late, "push", 1, 1, 0, 0)
		var n int
		start := time.Now()
		if err := pool.QueryRow(ctx, "SELECT queen_proxy.rollup_usage_days(NULL)").Scan(&n); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		return time.Since(start), n
	}
	exec(t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)") // 017: the first, full roll-up
	oldTook, oldRows := timed("017")
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("017: %d usage_days rows differ from a full re-aggregation", n)
	}

	ms, _ := load()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.name == "037_usage_rollup_incremental" {
			if err := applyOne(ctx, conn, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Release()
	start := time.Now()
	exec(t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)") // every day pending once
	firstTook := time.Since(start)
	newTook, newRows := timed("037")
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("037: %d usage_days rows differ from a full re-aggregation", n)
	}
	if newRows != 1 {
		t.Fatalf("037 wrote %d rows after one late write, want 1", newRows)
	}
	days := scalar[int](t, pool, "SELECT count(DISTINCT day)::int FROM queen_proxy.usage_days")
	t.Logf("roll-up of a usage_minutes of %d rows over %d days, after one late write to a 10-day-old day: 017 %v (%d rows written), 037 %v (%d rows written), %.0fx faster; 037's first run after the upgrade (every day pending) %v",
		rows, days, oldTook.Round(time.Millisecond), oldRows, newTook.Round(time.Millisecond), newRows,
		float64(oldTook)/float64(max(newTook, time.Microsecond)), firstTook.Round(time.Millisecond))
	if !strings.Contains(scalar[string](t, pool, "SELECT prosrc FROM pg_proc WHERE oid = 'queen_proxy.rollup_usage_days(date)'::regprocedure"), "usage_rollup_pending") {
		t.Fatal("the roll-up timed last is not 037's")
	}
}

// A late write to a day already pending, open while a roll-up runs, is not
// lost: the roll-up waits for it before taking the day (the trigger's lock
// on the pending row), then reads it.
func TestRollupWaitsForOpenLateWrite(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d7 := utcDay(-7)
	addMinute(t, pool, cluster, d7.Add(time.Hour), "push", 1, 1, 0, 0)
	if got := pendingDays(t, pool); got != ymd(d7) {
		t.Fatalf("pending days = %q, want %s", got, ymd(d7))
	}
	writer, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.Background()) }()
	if _, err := writer.Exec(ctxT(t), `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs)
		VALUES ($1, $2, 'push', 10, 1)`, cluster, d7.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		var n int
		err := conn.QueryRow(ctxT(t), "SELECT queen_proxy.rollup_usage_days(NULL)").Scan(&n)
		done <- result{n, err}
	}()
	// The roll-up waits on the writer's lock (not on a clock).
	deadline := time.Now().Add(20 * time.Second)
	for scalar[string](t, pool, "SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1", pid) != "Lock" {
		select {
		case r := <-done:
			t.Fatalf("the roll-up finished (%d, %v) while a late write to its day was open", r.n, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the roll-up never waited for the open late write")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := writer.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("roll-up = %d, %v; want 1 row", r.n, r.err)
	}
	if d, _ := day(t, pool, cluster, d7, "push"); d.msgs != 11 {
		t.Fatalf("rolled-up day = %+v, want the open write's 10 msgs in it", d)
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
}
