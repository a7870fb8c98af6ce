package migrations

import (
	"strings"
	"testing"
	"time"
)

// minuteRanges lists the days usage_minute_ranges names for [from, to),
// each as YYYYMMDD, and "+cut" when the stretch is not the whole day.
func minuteRanges(t *testing.T, from, to time.Time) string {
	t.Helper()
	return scalar[string](t, db(t), `SELECT coalesce(string_agg(to_char(day, 'YYYYMMDD')
		|| CASE WHEN to_at - from_at < interval '1 day' THEN '+cut' ELSE '' END, ',' ORDER BY day), '')
		FROM queen_proxy.usage_minute_ranges($1, $2)`, from, to)
}

func dayFinal(t *testing.T, d time.Time) bool {
	t.Helper()
	return scalar[bool](t, db(t), `SELECT queen_proxy.usage_day_final($1::date)`, d.Format(time.DateOnly))
}

// 040: no day is final before a roll-up of this version ran; after it,
// the days up to the day before the day before yesterday are, until a
// late write marks one pending; the ranges a reader reads minutes from are
// exactly the days cut by a bound and the days that are not final.
func TestUsageDaysFinal(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d10, d5, d3, d2, d1, today := utcDay(-10), utcDay(-5), utcDay(-3), utcDay(-2), utcDay(-1), utcDay(0)
	for _, d := range []time.Time{d10, d5, d2, d1, today} {
		addMinute(t, pool, cluster, d.Add(time.Hour), "push", 1, 1, 1, 1)
	}
	if dayFinal(t, d10) || dayFinal(t, d5) {
		t.Fatal("a day is final before any roll-up ran")
	}
	all := []string{}
	for d := d10; !d.After(today); d = d.AddDate(0, 0, 1) {
		all = append(all, ymd(d))
	}
	if got := minuteRanges(t, d10, today.AddDate(0, 0, 1)); got != strings.Join(all, ",") {
		t.Fatalf("ranges before a roll-up = %s, want every day", got)
	}

	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	if got := scalar[string](t, pool, "SELECT rolled_through::text FROM queen_proxy.usage_rollup_state"); got != d1.Format(time.DateOnly) {
		t.Fatalf("rolled_through = %s, want yesterday %s", got, d1.Format(time.DateOnly))
	}
	for _, c := range []struct {
		day   time.Time
		final bool
	}{{d10, true}, {d5, true}, {d3, true}, {d2, false}, {d1, false}, {today, false}} {
		if got := dayFinal(t, c.day); got != c.final {
			t.Errorf("usage_day_final(%s) = %v, want %v", ymd(c.day), got, c.final)
		}
	}
	if got, want := minuteRanges(t, d10, today.AddDate(0, 0, 1)), ymd(d2)+","+ymd(d1)+","+ymd(today); got != want {
		t.Errorf("ranges of 11 days = %s, want %s", got, want)
	}
	// A bound inside a final day makes that day a (cut) range.
	if got, want := minuteRanges(t, d10.Add(6*time.Hour), d5.Add(time.Hour)), ymd(d10)+"+cut,"+ymd(d5)+"+cut"; got != want {
		t.Errorf("ranges of a period cut at both ends = %s, want %s", got, want)
	}
	if got := minuteRanges(t, d5, d5); got != "" {
		t.Errorf("ranges of an empty period = %q", got)
	}

	// A late write reopens its day until the next roll-up.
	addMinute(t, pool, cluster, d5.Add(2*time.Hour), "push", 7, 1, 1, 1)
	if dayFinal(t, d5) {
		t.Fatal("a day with a late write is still final")
	}
	if got, want := minuteRanges(t, d10, d1), ymd(d5)+","+ymd(d2); got != want {
		t.Errorf("ranges with a late day = %s, want %s", got, want)
	}
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	if !dayFinal(t, d5) {
		t.Fatal("the late day is not final after the roll-up")
	}
	if n := scalar[int](t, pool, rollupMismatchSQL); n != 0 {
		t.Fatalf("%d usage_days rows differ from a full re-aggregation", n)
	}
}

// 040: a day written while it was current (the trigger lets such writes
// pass) and not rolled up because the pump was down is rolled up by the
// first run after the gap, and is not final before it.
func TestRollupCatchesUpAfterAGap(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	d10, d5 := utcDay(-10), utcDay(-5)
	exec(t, pool, "UPDATE queen_proxy.usage_rollup_state SET rolled_through = $1::date", d10.Format(time.DateOnly))
	// Written as the gateways wrote it on its own day: no pending mark.
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctxT(t))
	if _, err := tx.Exec(ctxT(t), "SET LOCAL session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxT(t), `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
		VALUES ($1, $2, 'push', 11, 1, 1, 1)`, cluster, d5.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := pendingDays(t, pool); got != "" {
		t.Fatalf("pending = %q: the write should have bypassed the trigger", got)
	}
	if dayFinal(t, d5) {
		t.Fatal("a day after the last roll-up's day is final")
	}
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	if r, ok := day(t, pool, cluster, d5, "push"); !ok || r.msgs != 11 {
		t.Fatalf("day row after the gap = %+v, %v; want 11 messages", r, ok)
	}
	if !dayFinal(t, d5) {
		t.Fatal("the caught-up day is not final")
	}
}

// 040: the billable month and the prune agree with the minutes whichever
// days are final: a month's total is the same before and after roll-ups
// and late writes, and equals the sum of its minutes.
func TestMonthTotalAcrossFinality(t *testing.T) {
	pool := db(t)
	cluster := freshUsage(t, pool)
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	total := func() int {
		return scalar[int](t, pool, `SELECT queen_proxy.cluster_month_billable_msgs($1, $2::date)`, cluster, month.Format(time.DateOnly))
	}
	minutesSum := func() int {
		return scalar[int](t, pool, `SELECT coalesce(sum(msgs), 0)::int FROM queen_proxy.usage_minutes
			WHERE cluster_id = $1 AND op_class IN ('push', 'txn') AND minute >= $2 AND minute < $3`, cluster, month, month.AddDate(0, 1, 0))
	}
	for d := month; !d.After(now); d = d.AddDate(0, 0, 1) {
		addMinute(t, pool, cluster, d.Add(time.Minute), "push", 3, 1, 1, 1)
		addMinute(t, pool, cluster, d.Add(2*time.Minute), "delivery", 100, 1, 1, 1)
	}
	steps := []func(){
		func() {},
		func() { scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)") },
		func() { addMinute(t, pool, cluster, month.Add(3*time.Minute), "txn", 5, 1, 1, 1) },
		func() { addMinute(t, pool, cluster, now.Truncate(time.Minute), "push", 2, 1, 1, 1) },
		func() { scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)") },
	}
	for i, step := range steps {
		step()
		if got, want := total(), minutesSum(); got != want {
			t.Fatalf("step %d: month total %d, minutes say %d", i, got, want)
		}
	}
}
