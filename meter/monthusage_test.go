package meter

import (
	"context"
	"testing"
	"time"
)

// A reader of the whole fleet reads minutes only in the spans the roll-up
// has not closed, adjacent days joined, and in one span from the first to
// the last when there are many.
func TestMinuteSpans(t *testing.T) {
	pool := db(t)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.AddDate(0, 0, -20), today.AddDate(0, 0, 1)
	day := func(d int) string { return today.AddDate(0, 0, d).Format(time.DateOnly) }
	exec(t, pool, `DELETE FROM queen_proxy.usage_rollup_pending`)
	exec(t, pool, `UPDATE queen_proxy.usage_rollup_state SET rolled_through = $1::date`, day(-1))
	exec(t, pool, `INSERT INTO queen_proxy.usage_rollup_pending (day) VALUES ($1::date)`, day(-10))
	spans, err := MinuteSpans(context.Background(), pool, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]time.Time{{today.AddDate(0, 0, -10), today.AddDate(0, 0, -9)}, {today.AddDate(0, 0, -2), to}}
	if len(spans) != len(want) || !spans[0][0].Equal(want[0][0]) || !spans[0][1].Equal(want[0][1]) || !spans[1][0].Equal(want[1][0]) || !spans[1][1].Equal(want[1][1]) {
		t.Fatalf("spans %v, want %v", spans, want)
	}
	if cond, args := SpansCondition(spans, []any{"a"}); cond != "(minute >= $2 AND minute < $3) OR (minute >= $4 AND minute < $5)" || len(args) != 5 {
		t.Fatalf("condition %q with %d args", cond, len(args))
	}
	for d := 4; d < 20; d += 2 {
		exec(t, pool, `INSERT INTO queen_proxy.usage_rollup_pending (day) VALUES ($1::date) ON CONFLICT DO NOTHING`, day(-d))
	}
	spans, err = MinuteSpans(context.Background(), pool, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || !spans[0][0].Equal(today.AddDate(0, 0, -18)) || !spans[0][1].Equal(to) {
		t.Fatalf("many late days: spans %v, want one from the first to the end", spans)
	}
	exec(t, pool, `DELETE FROM queen_proxy.usage_rollup_pending`)
	if cond, _ := SpansCondition(nil, nil); cond != "false" {
		t.Fatalf("no spans: %q", cond)
	}
}

// The quota pass reads every cluster's month at once by the rule of
// cluster_month_billable_msgs, and agrees with it cluster by cluster
// whatever the roll-up has reached.
func TestQuotaMonthMatchesTheFunction(t *testing.T) {
	pool := db(t)
	plan := newQuotaPlan(t, pool, 1_000_000)
	now := time.Now().UTC()
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	clusters := []string{newCluster(t, pool, plan), newCluster(t, pool, plan), newCluster(t, pool, plan)}
	write := func(c string, at time.Time, op string, msgs int) {
		exec(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs) VALUES ($1::uuid, $2, $3, $4, 1)
			ON CONFLICT (cluster_id, minute, op_class) DO UPDATE SET msgs = usage_minutes.msgs + EXCLUDED.msgs`, c, at, op, msgs)
	}
	for i, c := range clusters[:2] {
		for d := first; !d.After(now); d = d.AddDate(0, 0, 1) {
			write(c, d.Add(time.Duration(i+1)*time.Minute), "push", 3+i)
			write(c, d.Add(2*time.Hour), "txn", 1)
			write(c, d.Add(3*time.Hour), "delivery", 50)
		}
	}
	write(clusters[0], first.Add(-time.Minute), "push", 1000) // the month before
	q := newQuota(t, pool, time.Now)
	check := func(step string) {
		t.Helper()
		rows, err := q.query(context.Background(), first)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range rows {
			got[r.id] = r.msgs
		}
		for _, c := range clusters {
			want := scalar[int64](t, pool, `SELECT queen_proxy.cluster_month_billable_msgs($1::uuid, $2::date)`, c, first.Format(time.DateOnly))
			if g, ok := got[c]; !ok || g != want {
				t.Fatalf("%s: cluster %s: the pass read %d (listed %v), the function %d", step, c, g, ok, want)
			}
		}
	}
	check("before a roll-up")
	exec(t, pool, `SELECT queen_proxy.rollup_usage_days(NULL)`)
	check("after the roll-up")
	write(clusters[1], first.Add(5*time.Hour), "push", 7) // late, to the month's first day
	write(clusters[2], now.Truncate(time.Minute), "txn", 2)
	check("after late writes")
	exec(t, pool, `SELECT queen_proxy.rollup_usage_days(NULL)`)
	check("after the next roll-up")
}
