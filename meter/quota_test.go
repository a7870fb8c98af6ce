package meter

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/queengate/queengate/limits"
)

// newQuotaPlan adds a shared plan with a monthly message quota and returns
// its code.
func newQuotaPlan(t *testing.T, pool *pgxpool.Pool, quota int64) string {
	t.Helper()
	code := "quota-" + randHex(4)
	exec(t, pool, `INSERT INTO queen_proxy.plans (code, cell_class, monthly_msgs_quota) VALUES ($1, 'shared', $2)`, code, quota)
	return code
}

func outboxCount(t *testing.T, pool *pgxpool.Pool, cluster, kind string) int {
	t.Helper()
	return scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.outbox
		WHERE kind = $1 AND payload ->> 'cluster_id' = $2`, kind, cluster)
}

func newQuota(t *testing.T, pool *pgxpool.Pool, now func() time.Time) *Quota {
	return NewQuota(pool, now, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
}

// The monthly chain: billable pushes only; one warning at 80 %; a block and
// one blocked event at 100 %, once across restarts and gateways; the block
// lapses with the month and when the quota is raised.
func TestQuotaMonthlyChain(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, newQuotaPlan(t, pool, 100))
	other := newCluster(t, pool, "free") // no quota: never listed
	now := time.Now().UTC()
	clk := newClock(now)
	m := newMeter(t, Config{Now: clk.Now})
	ctx := ctxT(t)
	record := func(op Op, msgs int64) {
		t.Helper()
		m.Record(Sample{ClusterID: cluster, Op: op, Reqs: 1, Msgs: msgs})
		if err := m.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	record(OpPush, 50)
	record(OpTxn, 10)
	record(OpDelivery, 1000) // deliveries are not billed: a message is billed once, when stored
	record(OpRead, 0)
	m.Record(Sample{ClusterID: other, Op: OpPush, Reqs: 1, Msgs: 1_000_000})
	if err := m.Drain(ctx); err != nil {
		t.Fatal(err)
	}

	monthStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if n := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_billable_msgs($1, $2::date)", cluster, monthStart); n != 60 {
		t.Fatalf("billable msgs = %d, want 60", n)
	}
	if n := scalar[int64](t, pool, "SELECT queen_proxy.cluster_month_msgs($1, $2::date)", cluster, monthStart); n != 1060 {
		t.Fatalf("reference month msgs = %d, want 1060 (it counts deliveries)", n)
	}

	q := newQuota(t, pool, clk.Now)
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("60 of 100: PushBlock = %v", b)
	}
	if n := outboxCount(t, pool, cluster, KindQuotaWarning); n != 0 {
		t.Fatalf("warnings at 60%% = %d", n)
	}

	record(OpPush, 20) // 80 %: the warning
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("80 of 100: PushBlock = %v", b)
	}
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := newQuota(t, pool, clk.Now).RunOnce(ctx); err != nil { // a restart
		t.Fatal(err)
	}
	if n := outboxCount(t, pool, cluster, KindQuotaWarning); n != 1 {
		t.Fatalf("warnings = %d, want 1", n)
	}
	var payload map[string]any
	if err := pool.QueryRow(ctx, `SELECT payload FROM queen_proxy.outbox WHERE kind = $1 AND payload ->> 'cluster_id' = $2`,
		KindQuotaWarning, cluster).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if payload["month"] != monthStart.Format("2006-01") || payload["msgs"] != float64(80) || payload["quota"] != float64(100) ||
		payload["percent"] != float64(80) || payload["cluster_slug"] == nil || payload["tenant_id"] == nil {
		t.Fatalf("warning payload = %v", payload)
	}

	record(OpPush, 25) // 105 %: blocked, evaluated by two gateways at once
	gateways := []*Quota{q, newQuota(t, pool, clk.Now), newQuota(t, pool, clk.Now)}
	var wg sync.WaitGroup
	for _, g := range gateways {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.RunOnce(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i, g := range gateways {
		if b := g.PushBlock(cluster); b != limits.PushBlockedMonthly {
			t.Fatalf("gateway %d: PushBlock = %v, want blocked", i, b)
		}
		if b := g.PushBlock(other); b != limits.PushOpen {
			t.Fatalf("gateway %d: a cluster without a quota is blocked", i)
		}
	}
	if n := outboxCount(t, pool, cluster, KindQuotaBlocked); n != 1 {
		t.Fatalf("blocked events = %d, want 1", n)
	}
	if n := outboxCount(t, pool, cluster, KindQuotaWarning); n != 1 {
		t.Fatalf("warnings = %d, want still 1", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE cluster_id = $1
		AND action IN ('monthly_quota_warning', 'monthly_quota_blocked') AND actor = 'system'`, cluster); n != 2 {
		t.Fatalf("audit rows = %d, want 2", n)
	}
	if got := q.Blocked(); !slices.Contains(got, cluster) || slices.Contains(got, other) {
		t.Fatalf("Blocked() = %v", got)
	}

	// The next calendar month: the block lapses at once, before any run.
	nextMonth := monthStart.AddDate(0, 1, 0)
	clk.Set(nextMonth.Add(time.Second))
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("next month before a run: PushBlock = %v", b)
	}
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("next month after a run: PushBlock = %v", b)
	}
	clk.Set(nextMonth.Add(-time.Second))
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("a block computed for next month leaks into this one: %v", b)
	}

	// Back in this month the block returns, without announcing again.
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushBlockedMonthly {
		t.Fatalf("this month again: PushBlock = %v", b)
	}
	if a, b := outboxCount(t, pool, cluster, KindQuotaWarning), outboxCount(t, pool, cluster, KindQuotaBlocked); a != 1 || b != 1 {
		t.Fatalf("events after the month flip-flop: %d warnings, %d blocks", a, b)
	}

	// Raising the quota lifts the block at the next run.
	exec(t, pool, `UPDATE queen_proxy.plans SET monthly_msgs_quota = 1000
		WHERE id = (SELECT plan_id FROM queen_proxy.clusters WHERE id = $1)`, cluster)
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushOpen {
		t.Fatalf("quota raised: PushBlock = %v", b)
	}
}

// Overrides follow the rule of every limit: null is unlimited, a number
// replaces the plan's quota, a quota of 0 blocks at once.
func TestQuotaOverrides(t *testing.T) {
	pool := db(t)
	clk := newClock(time.Now().UTC())
	m := newMeter(t, Config{Now: clk.Now})
	unlimited := newCluster(t, pool, newQuotaPlan(t, pool, 10))
	zero := newCluster(t, pool, "free")
	lowered := newCluster(t, pool, "free")
	for _, c := range []string{unlimited, zero, lowered} {
		m.Record(Sample{ClusterID: c, Op: OpPush, Reqs: 1, Msgs: 50})
	}
	if err := m.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `SELECT queen_proxy.set_limit_override($1, '{"monthly_msgs_quota": null}')`, unlimited)
	exec(t, pool, `SELECT queen_proxy.set_limit_override($1, '{"monthly_msgs_quota": 0}')`, zero)
	exec(t, pool, `SELECT queen_proxy.set_limit_override($1, '{"monthly_msgs_quota": 50}')`, lowered)
	q := newQuota(t, pool, clk.Now)
	if err := q.RunOnce(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	want := map[string]limits.PushBlock{unlimited: limits.PushOpen, zero: limits.PushBlockedMonthly, lowered: limits.PushBlockedMonthly}
	for c, w := range want {
		if got := q.PushBlock(c); got != w {
			t.Errorf("cluster %s: PushBlock = %v, want %v", c, got, w)
		}
	}
	if n := outboxCount(t, pool, zero, KindQuotaBlocked); n != 1 {
		t.Fatalf("quota 0: %d blocked events", n)
	}
	if n := outboxCount(t, pool, zero, KindQuotaWarning); n != 0 {
		t.Fatalf("jumping straight to the block announced a warning too (%d)", n)
	}
}

// A block ends when the quota is raised (or lifted): one
// cluster_monthly_quota_cleared event, however many gateways evaluate.
func TestQuotaBlockEndIsAnnouncedOnce(t *testing.T) {
	pool := db(t)
	clk := newClock(time.Now().UTC())
	m := newMeter(t, Config{Now: clk.Now})
	c := newCluster(t, pool, newQuotaPlan(t, pool, 10))
	m.Record(Sample{ClusterID: c, Op: OpPush, Reqs: 1, Msgs: 20})
	if err := m.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	a, b := newQuota(t, pool, clk.Now), newQuota(t, pool, clk.Now)
	for _, q := range []*Quota{a, b} {
		if err := q.RunOnce(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := outboxCount(t, pool, c, KindQuotaBlocked); n != 1 || a.PushBlock(c) != limits.PushBlockedMonthly {
		t.Fatalf("over quota: %d blocked events, block %v", n, a.PushBlock(c))
	}
	if n := outboxCount(t, pool, c, "cluster_monthly_quota_cleared"); n != 0 {
		t.Fatalf("%d cleared events while blocked", n)
	}
	exec(t, pool, `SELECT queen_proxy.set_limit_override($1, '{"monthly_msgs_quota": 100}')`, c)
	for _, q := range []*Quota{a, b, a} {
		if err := q.RunOnce(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := outboxCount(t, pool, c, "cluster_monthly_quota_cleared"); n != 1 || a.PushBlock(c) != limits.PushOpen {
		t.Fatalf("quota raised: %d cleared events, block %v", n, a.PushBlock(c))
	}
}

// RunOnce rolls closed days up, prunes old minute rows only once rolled up,
// and prunes old batch ids.
func TestQuotaRollupAndPrune(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	old := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -100).Add(time.Hour)
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1).Add(time.Hour)
	clk := newClock(old)
	m := newMeter(t, Config{Now: clk.Now})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 4})
	clk.Set(yesterday)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2})
	if err := m.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO queen_proxy.meter_batches (batch_id, applied_at) VALUES ($1, now() - interval '100 days')`, "old-"+randHex(4))

	if err := newQuota(t, pool, time.Now).RunOnce(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, pool, `SELECT msgs FROM queen_proxy.usage_days WHERE cluster_id = $1 AND day = $2::date AND op_class = 'push'`,
		cluster, old); n != 4 {
		t.Fatalf("rolled-up old day = %d", n)
	}
	if n := scalar[int64](t, pool, `SELECT msgs FROM queen_proxy.usage_days WHERE cluster_id = $1 AND day = $2::date AND op_class = 'push'`,
		cluster, yesterday); n != 2 {
		t.Fatalf("rolled-up yesterday = %d", n)
	}
	if u := totals(t, pool, cluster, OpPush); u.Msgs != 2 {
		t.Fatalf("minute rows left = %+v, want only yesterday's", u)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.meter_batches WHERE applied_at < now() - interval '99 days'`); n != 0 {
		t.Fatalf("%d old batch ids left", n)
	}
}

// A failed quota query keeps the previous decisions.
func TestQuotaQueryFailureKeepsDecisions(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, newQuotaPlan(t, direct, 5))
	clk := newClock(time.Now().UTC())
	m := newMeter(t, Config{Now: clk.Now})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 5})
	if err := m.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	proxy := newFlakyProxy(t)
	q := newQuota(t, proxy.pool(t), clk.Now)
	if err := q.RunOnce(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushBlockedMonthly {
		t.Fatalf("PushBlock = %v", b)
	}
	proxy.set(proxyDown)
	if err := q.RunOnce(ctxT(t)); err == nil {
		t.Fatal("RunOnce succeeded with the database down")
	}
	if b := q.PushBlock(cluster); b != limits.PushBlockedMonthly {
		t.Fatalf("after a failed run: PushBlock = %v", b)
	}
}

func TestEffectiveMonthlyQuota(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	cases := []struct {
		plan      *int64
		overrides string
		quota     int64
		limited   bool
	}{
		{nil, `{}`, 0, false},
		{p(100), `{}`, 100, true},
		{p(100), ``, 100, true},
		{p(100), `{"monthly_msgs_quota": null}`, 0, false},
		{nil, `{"monthly_msgs_quota": 7}`, 7, true},
		{p(100), `{"monthly_msgs_quota": 0}`, 0, true},
		{p(100), `{"monthly_msgs_quota": "7"}`, 100, true},
		{p(100), `{"monthly_msgs_quota": -1}`, 100, true},
		{p(100), `{"monthly_msgs_quota": 1.5}`, 100, true},
		{nil, `{"monthly_msgs_quota": "7"}`, 0, false},
		{p(100), `[1]`, 100, true},
		{p(100), `{"max_queues": 3}`, 100, true},
	}
	for _, c := range cases {
		q, l := effectiveMonthlyQuota(c.plan, []byte(c.overrides))
		if q != c.quota || l != c.limited {
			t.Errorf("plan %v overrides %s: %d %v, want %d %v", c.plan, c.overrides, q, l, c.quota, c.limited)
		}
	}
}

func TestLevelOf(t *testing.T) {
	cases := []struct {
		msgs, quota int64
		warn        int
		want        quotaLevel
	}{
		{0, 100, 80, levelUnder},
		{79, 100, 80, levelUnder},
		{80, 100, 80, levelWarn},
		{99, 100, 80, levelWarn},
		{100, 100, 80, levelOver},
		{0, 0, 80, levelOver},
		{math.MaxInt64 - 1, math.MaxInt64, 80, levelWarn},
		{math.MaxInt64 / 2, math.MaxInt64, 80, levelUnder},
		{math.MaxInt64, math.MaxInt64, 80, levelOver},
		{7, 10, 70, levelWarn},
		{6, 10, 70, levelUnder},
	}
	for _, c := range cases {
		if got := levelOf(c.msgs, c.quota, c.warn); got != c.want {
			t.Errorf("levelOf(%d, %d, %d) = %d, want %d", c.msgs, c.quota, c.warn, got, c.want)
		}
	}
}

// RunOnce makes the usage tables' day partitions PartitionsAhead days
// ahead, so that the gateways' writes of those days never land in the
// DEFAULT partition.
func TestQuotaMakesPartitionsAhead(t *testing.T) {
	pool := db(t)
	q := newQuota(t, pool, time.Now)
	q.PartitionsAhead = 12
	ahead := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 12)
	name := "_p" + ahead.Format("20060102")
	if err := q.RunOnce(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"usage_minutes", "request_minutes"} {
		if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.usage_partitions($1)
			WHERE partition_name = $2 AND from_at = $3::timestamptz AND to_at = $3::timestamptz + interval '1 day'`,
			table, table+name, ahead); n != 1 {
			t.Errorf("no %s partition for %s after a run", table, ahead.Format("2006-01-02"))
		}
	}
	cluster := newCluster(t, pool, "free")
	exec(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs) VALUES ($1, $2, 'push', 1)`, cluster, ahead.Add(time.Hour))
	if p := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM queen_proxy.usage_minutes WHERE cluster_id = $1`, cluster); p != "queen_proxy.usage_minutes"+name {
		t.Fatalf("a row of %s is in %s", ahead.Format("2006-01-02"), p)
	}
}
