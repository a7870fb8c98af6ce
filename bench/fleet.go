package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/console"
	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

// The fleet mode fills a throwaway control-plane database with the usage
// of a fleet (every cluster's minutes, request counts per key, for the
// retention the gateway keeps) and times what reads and writes it: the
// gateway's minute flush, the hourly roll-up, prune and quota pass, and
// the usage queries of the CLI and the console. Every figure comes from
// the code path that runs in production (the meter, controlplane.Usage,
// the console's handlers, the SQL functions the pump calls), never a
// copy of its SQL. Each cluster count is a database of its own, so the
// steps compare like with like.

// fleetQueryGoal is the most a console or CLI query for one cluster or
// one tenant may take at 10,000 clusters.
const fleetQueryGoal = 50 * time.Millisecond

// Density of the generated usage. A busy cluster pushes in 60 % of the
// minutes, delivers in 50 %, reads once in 30 minutes and makes 1.2
// request-count rows a minute (ok, and a 429 now and then); an idle one
// has idleMinutes active minutes a day (a push and a delivery each) and a
// request count in each. The patterns are arithmetic, not random, so
// fleetExpected can say exactly how many rows a fill must leave.
const (
	busyPushTenths     = 6  // of 10 minutes
	busyDeliveryTenths = 5  // of 10 minutes
	busyReadEvery      = 30 // minutes
	busyOKTenths       = 8  // of 10 minutes with an ok request-count row
	busy429Every       = 20 // minutes
	idleMinutes        = 4  // a day, every 360 minutes
	keysPerCluster     = 3
	clustersPerTenant  = 4
	fleetMonthlyQuota  = 1_000_000 // billable messages a month, on every plan
	fleetDomain        = "fleet.test"
)

type fleetOptions struct {
	steps     []int
	days      int
	busyShare float64
	runs      int
	extraSQL  string
}

// fleetStep is one cluster count's database and what the fill made.
type fleetStep struct {
	clusters, busy, tenants int
	pool                    *pgxpool.Pool
	from                    time.Time // the first filled minute (midnight UTC)
	to                      time.Time // the end of the fill (exclusive): the start of the current minute
	reqFrom                 time.Time // the first filled minute of request_minutes
	partitioned             bool      // the partitions function exists and was called
}

func parseSteps(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		if err != nil || n < clustersPerTenant {
			return nil, fmt.Errorf("-fleet-clusters: %q is not a cluster count of at least %d", f, clustersPerTenant)
		}
		out = append(out, n)
	}
	return out, nil
}

func fleetBenchmark(ctx context.Context, o options) error {
	steps, err := parseSteps(o.fleetClusters)
	if err != nil {
		return err
	}
	if o.fleetDays < 1 {
		return fmt.Errorf("-fleet-days must be at least 1")
	}
	if o.fleetBusy <= 0 || o.fleetBusy > 1 {
		return fmt.Errorf("-fleet-busy must be in (0, 1]")
	}
	fo := fleetOptions{steps: steps, days: o.fleetDays, busyShare: o.fleetBusy, runs: max(1, o.fleetRuns), extraSQL: o.fleetSQL}

	logf("starting PostgreSQL (pg_stat_statements preloaded) ...")
	pg, err := pgserver.Start(ctx, pgserver.Options{Settings: map[string]string{
		// auto_explain logs the plan (with actual rows) of every statement
		// over the goal, nested ones too, so a miss comes with its plan
		// (-fleet-plans keeps the log).
		"shared_preload_libraries":           "pg_stat_statements,auto_explain",
		"auto_explain.log_min_duration":      "50ms",
		"auto_explain.log_analyze":           "on",
		"auto_explain.log_timing":            "off",
		"auto_explain.log_nested_statements": "on",
		"pg_stat_statements.track":           "top",
		"pg_stat_statements.save":            "off",
		"log_min_duration_statement":         "-1",
		// A control-plane server of a fleet is no 32 MB toy; 256 MB is
		// still small next to the database at 10,000 clusters.
		"shared_buffers":       "256MB",
		"work_mem":             "16MB",
		"maintenance_work_mem": "256MB",
		"max_wal_size":         "4GB",
	}})
	if err != nil {
		return err
	}
	defer pg.Close()
	if o.fleetPlans != "" {
		defer func() {
			if b, err := os.ReadFile(pg.LogPath()); err == nil {
				_ = os.WriteFile(o.fleetPlans, b, 0o644)
				logf("the server log, with the plans of statements over %v, is in %s", fleetQueryGoal, o.fleetPlans)
			}
		}()
	}

	fmt.Printf("## Fleet scale: the control-plane database at %s clusters\n\n", joinInts(steps))
	fmt.Printf("- %d days of usage_minutes and %d of request_minutes (each +1 day beyond its retention, for the prune, and today up to now); %.1f %% of the clusters busy; a tenant has %d clusters, a cluster %d API keys; every plan has a monthly quota\n",
		fo.days, min(fo.days, meter.RequestKeepDays), 100*fo.busyShare, clustersPerTenant, keysPerCluster)
	fmt.Printf("- busy cluster: a push row in %d0 %% of the minutes, a delivery row in %d0 %%, a read row every %d minutes; request_minutes: an ok row in %d0 %% of the minutes, a 429 row every %d\n",
		busyPushTenths, busyDeliveryTenths, busyReadEvery, busyOKTenths, busy429Every)
	fmt.Printf("- idle cluster: %d active minutes a day (a push and a delivery row, one ok request-count row each)\n", idleMinutes)
	fmt.Printf("- times are the median of %d runs; PostgreSQL %s, shared_buffers 256MB, fsync off (pgserver's throwaway settings)\n", fo.runs, pgVersion(ctx, pg))
	fmt.Printf("- machine: %d × %s, load average at the start %s\n\n", runtimeCPUs(), cpuModel(), loadAvg())

	var results []*fleetResult
	for _, n := range steps {
		r, err := fleetRun(ctx, pg, fo, n)
		if err != nil {
			return err
		}
		results = append(results, r)
		r.print()
	}
	printGrowth(results)
	fmt.Printf("\nload average at the end: %s\n", loadAvg())
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = thousands(int64(n))
	}
	return strings.Join(s, " and ")
}

// thousands writes n with comma separators, as the docs print figures.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func pgVersion(ctx context.Context, pg *pgserver.Server) string {
	pool, err := pgxpool.New(ctx, pg.URL("postgres"))
	if err != nil {
		return "?"
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "?"
	}
	return v
}

// fleetResult is what one step measured.
type fleetResult struct {
	step     fleetStep
	fillTook time.Duration
	rows     map[string]int64 // generated rows per table
	timings  []fleetTiming
	sizes    []tableSize
	notes    []string
}

type fleetTiming struct {
	what   string
	detail string
	runs   []time.Duration
	goal   bool // the ≤ 50 ms goal applies
	// rows is what the operation wrote, deleted or returned (the median
	// run's), -1 when it says nothing of it.
	rows int64
	// failed is why the operation failed at this size ("" when it did not).
	failed string
}

func (t fleetTiming) median() time.Duration {
	s := slices.Clone(t.runs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fleetRun(ctx context.Context, pg *pgserver.Server, fo fleetOptions, n int) (*fleetResult, error) {
	name := fmt.Sprintf("queengate_fleet_%d", n)
	_ = pg.DropDatabase(ctx, name)
	if err := pg.CreateDatabase(ctx, name); err != nil {
		return nil, err
	}
	defer func() { _ = pg.DropDatabase(context.WithoutCancel(ctx), name) }()
	cfg, err := pgxpool.ParseConfig(pg.URL(name))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	busy := max(1, int(float64(n)*fo.busyShare+0.5))
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	st := fleetStep{
		clusters: n, busy: busy, tenants: (n + clustersPerTenant - 1) / clustersPerTenant, pool: pool,
		from:    today.AddDate(0, 0, -(fo.days + 1)),
		to:      now.Truncate(time.Minute),
		reqFrom: today.AddDate(0, 0, -(min(fo.days, meter.RequestKeepDays) + 1)),
	}
	res := &fleetResult{step: st, rows: map[string]int64{}}
	logf("%s clusters: provisioning %d tenants, %d clusters (%d busy), %d API keys ...", thousands(int64(n)), st.tenants, n, busy, n*keysPerCluster)
	start := time.Now()
	if err := provisionFleet(ctx, &st); err != nil {
		return nil, err
	}
	if err := fillFleet(ctx, &st, res); err != nil {
		return nil, err
	}
	res.fillTook = time.Since(start)
	res.step = st
	if fo.extraSQL != "" {
		// An index (or setting) to try, made after the fill as an
		// operator would add it to a live database.
		t0 := time.Now()
		// One statement at a time: VACUUM runs outside a transaction.
		for _, stmt := range strings.Split(fo.extraSQL, ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := pool.Exec(ctx, stmt); err != nil {
				return nil, fmt.Errorf("-fleet-sql %q: %w", stmt, err)
			}
		}
		if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
			return nil, err
		}
		res.notes = append(res.notes, fmt.Sprintf("-fleet-sql `%s` ran after the fill in %v", fo.extraSQL, time.Since(t0).Round(time.Millisecond)))
	}
	logf("%s clusters: filled in %v; measuring ...", thousands(int64(n)), res.fillTook.Round(time.Second))

	if err := measureFleet(ctx, pg, name, fo, &st, res); err != nil {
		return nil, err
	}
	sizes, err := tableSizes(ctx, pool)
	if err != nil {
		return nil, err
	}
	res.sizes = sizes
	return res, nil
}

// provisionFleet makes the tenants, clusters and keys through the
// control plane's own functions, and a bench.fleet table (outside
// queen_proxy, so no size below counts it) numbering the clusters for
// the generators: the first busy ones are busy.
func provisionFleet(ctx context.Context, st *fleetStep) error {
	pool := st.pool
	stmts := []struct {
		what string
		sql  string
		args []any
	}{
		{"quota", `UPDATE queen_proxy.plans SET monthly_msgs_quota = $1`, []any{fleetMonthlyQuota}},
		{"cell", `INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ('fleet-cell', 'local', 'http://127.0.0.1:9', 'shared')`, nil},
		{"tenants", `SELECT queen_proxy.create_tenant('ft' || t, 'Fleet tenant ' || t) FROM generate_series(0, $1 - 1) t`, []any{st.tenants}},
		{"bench schema", `CREATE SCHEMA bench`, nil},
		{"fleet table", `CREATE TABLE bench.fleet (idx int PRIMARY KEY, id uuid NOT NULL, busy boolean NOT NULL, keys text[] NOT NULL DEFAULT '{}')`, nil},
		{"clusters", `INSERT INTO bench.fleet (idx, id, busy)
			SELECT i, queen_proxy.create_cluster(t.id, 'fc' || i, CASE WHEN i < $2 THEN 'pro' ELSE 'free' END,
			                                     (SELECT id FROM queen_proxy.cells WHERE slug = 'fleet-cell')), i < $2
			  FROM generate_series(0, $1 - 1) i
			  JOIN queen_proxy.tenants t ON t.slug = 'ft' || (i / $3)`, []any{st.clusters, st.busy, clustersPerTenant}},
		{"keys", `UPDATE bench.fleet f SET keys = k.keys
			  FROM (SELECT f.idx, array_agg(queen_proxy.issue_api_key(f.id, 'key' || j,
			               encode(sha256(convert_to(f.id::text || '/' || j, 'UTF8')), 'hex'), ARRAY['produce', 'consume', 'read'])::text ORDER BY j) AS keys
			          FROM bench.fleet f CROSS JOIN generate_series(0, $1 - 1) j GROUP BY f.idx) k
			 WHERE k.idx = f.idx`, []any{keysPerCluster}},
		{"operator", `SELECT queen_proxy.create_user((SELECT id FROM queen_proxy.tenants WHERE slug = 'ft0'), 'operator@fleet.test', NULL, 'local')`, nil},
		{"operator bit", `SELECT queen_proxy.set_operator('operator@fleet.test', true)`, nil},
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("provision %s: %w", s.what, err)
		}
	}
	return nil
}

// The generators: one INSERT per table and day, so that a day is one
// transaction and a partitioned table's partition for it exists. The rows
// go in primary-key order, so each day's insert walks the key index once
// from end to end instead of jumping between clusters (at 10,000 clusters
// the index outgrows shared_buffers).
const usageFillSQL = `
INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
SELECT f.id, $1::timestamptz + make_interval(mins => g.m), o.op,
       CASE WHEN o.op = 'read' THEN 0 ELSE 10 + (g.m + f.idx) % 50 END,
       1 + (g.m + f.idx) % 7,
       CASE WHEN o.op = 'push' THEN 2048 + 64 * ((g.m + f.idx) % 50) ELSE 300 END,
       CASE WHEN o.op = 'push' THEN 200 ELSE 2048 + 64 * ((g.m + f.idx) % 50) END
  FROM bench.fleet f
  CROSS JOIN generate_series(0, $2 - 1) g(m)
  CROSS JOIN (VALUES ('push'), ('delivery'), ('read')) o(op)
 WHERE CASE WHEN f.busy THEN
            CASE o.op WHEN 'push' THEN (g.m + f.idx) % 10 < ` + "6" + `
                      WHEN 'delivery' THEN (g.m + f.idx) % 10 < ` + "5" + `
                      ELSE (g.m + f.idx) % ` + "30" + ` = 0 END
       ELSE o.op <> 'read' AND g.m % 360 = f.idx % 360 END
 ORDER BY f.id, g.m, o.op`

const requestFillSQL = `
INSERT INTO queen_proxy.request_minutes (cluster_id, minute, key_id, outcome, reqs)
SELECT f.id, $1::timestamptz + make_interval(mins => g.m), f.keys[1 + g.m % 3], o.outcome,
       CASE o.outcome WHEN 'ok' THEN 1 + (g.m + f.idx) % 40 ELSE 1 + (g.m + f.idx) % 3 END
  FROM bench.fleet f
  CROSS JOIN generate_series(0, $2 - 1) g(m)
  CROSS JOIN (VALUES ('ok'), ('429')) o(outcome)
 WHERE CASE WHEN f.busy THEN
            CASE o.outcome WHEN 'ok' THEN (g.m + f.idx) % 10 < ` + "8" + ` ELSE (g.m + f.idx) % ` + "20" + ` = 0 END
       ELSE o.outcome = 'ok' AND g.m % 360 = f.idx % 360 END
 ORDER BY f.id, g.m, o.outcome`

func init() {
	// The generators spell the density constants out; keep them equal.
	if busyPushTenths != 6 || busyDeliveryTenths != 5 || busyReadEvery != 30 || busyOKTenths != 8 || busy429Every != 20 ||
		idleMinutes != 1440/360 || keysPerCluster != 3 {
		panic("bench: the fleet generators' SQL and the density constants disagree")
	}
}

// fleetExpected is how many rows the generators make for the clusters of
// st over the given minutes of a day (the first m minutes), counted here
// minute by minute, independently of the SQL.
func fleetExpected(st *fleetStep, minutes int) (usage, requests int64) {
	for idx := range st.clusters {
		busy := idx < st.busy
		for m := range minutes {
			k := (m + idx) % 10
			if busy {
				if k < busyPushTenths {
					usage++
				}
				if k < busyDeliveryTenths {
					usage++
				}
				if (m+idx)%busyReadEvery == 0 {
					usage++
				}
				if k < busyOKTenths {
					requests++
				}
				if (m+idx)%busy429Every == 0 {
					requests++
				}
			} else if m%360 == idx%360 {
				usage += 2
				requests++
			}
		}
	}
	return usage, requests
}

func fillFleet(ctx context.Context, st *fleetStep, res *fleetResult) error {
	pool := st.pool
	var hasPartitions bool
	if err := pool.QueryRow(ctx, `SELECT to_regprocedure('queen_proxy.usage_partitions_ensure(date,date)') IS NOT NULL`).Scan(&hasPartitions); err != nil {
		return err
	}
	if hasPartitions {
		// Through tomorrow and the day after: the flushes write minutes
		// after now, which may cross midnight.
		if _, err := pool.Exec(ctx, `SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)`,
			st.from, st.to.AddDate(0, 0, 2)); err != nil {
			return fmt.Errorf("usage_partitions_ensure: %w", err)
		}
		st.partitioned = true
	}
	var wantUsage, wantReqs, gotUsage, gotReqs int64
	for day := st.from; day.Before(st.to); day = day.AddDate(0, 0, 1) {
		minutes := 1440
		if end := day.AddDate(0, 0, 1); end.After(st.to) {
			minutes = int(st.to.Sub(day) / time.Minute)
		}
		u, r := fleetExpected(st, minutes)
		wantUsage += u
		tag, err := pool.Exec(ctx, usageFillSQL, day, minutes)
		if err != nil {
			return fmt.Errorf("fill usage_minutes %s: %w", day.Format(time.DateOnly), err)
		}
		gotUsage += tag.RowsAffected()
		if !day.Before(st.reqFrom) {
			wantReqs += r
			tag, err := pool.Exec(ctx, requestFillSQL, day, minutes)
			if err != nil {
				return fmt.Errorf("fill request_minutes %s: %w", day.Format(time.DateOnly), err)
			}
			gotReqs += tag.RowsAffected()
		}
		if day.Day() == 1 || minutes < 1440 {
			logf("  filled through %s: usage_minutes %s rows, request_minutes %s rows (load %s)",
				day.Format(time.DateOnly), thousands(gotUsage), thousands(gotReqs), loadAvg())
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		return err
	}
	var countUsage, countReqs int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen_proxy.usage_minutes), (SELECT count(*) FROM queen_proxy.request_minutes)`).
		Scan(&countUsage, &countReqs); err != nil {
		return err
	}
	if wantUsage != gotUsage || gotUsage != countUsage || wantReqs != gotReqs || gotReqs != countReqs {
		return fmt.Errorf("fill: usage_minutes expected %d, inserted %d, holds %d; request_minutes expected %d, inserted %d, holds %d",
			wantUsage, gotUsage, countUsage, wantReqs, gotReqs, countReqs)
	}
	res.rows["usage_minutes"] = countUsage
	res.rows["request_minutes"] = countReqs
	return nil
}

// measureFleet times every operation of the control plane over the
// filled database.
func measureFleet(ctx context.Context, pg *pgserver.Server, dbname string, fo fleetOptions, st *fleetStep, res *fleetResult) error {
	pool := st.pool
	add := func(t fleetTiming) {
		res.timings = append(res.timings, t)
		logf("  %-52s %9.1f ms", t.what+" "+t.detail, ms64(t.median()))
	}

	// The gateway's minute flush: one gateway holding a minute of the
	// whole fleet's usage (every busy cluster, and the idle ones active
	// in that minute), written by the meter exactly as it runs.
	flush, stmts, err := measureMeterFlush(ctx, st, fo.runs)
	if err != nil {
		return err
	}
	add(flush)
	res.notes = append(res.notes, fmt.Sprintf("usage flush: %s statements per flush (pg_stat_statements, %d flushes)", stmts, fo.runs))
	tally, tallyStmts, err := measureTallyFlush(ctx, st, fo.runs)
	if err != nil {
		return err
	}
	add(tally)
	res.notes = append(res.notes, fmt.Sprintf("request-count flush: %s statements per flush (pg_stat_statements, %d flushes)", tallyStmts, fo.runs))

	// The hourly maintenance of Quota.RunOnce, statement by statement as
	// it sends them: the roll-up (the first run rolls up every day, the
	// next ones are the steady state) and the prunes, each dropping one
	// day more than the last (the fill reaches one day past the
	// retention).
	var rollup fleetTiming
	rollup.what, rollup.detail = "roll-up", "rollup_usage_days(NULL), first run"
	d, rows, err := timedScalar(ctx, pool, `SELECT queen_proxy.rollup_usage_days(NULL)`)
	if err != nil {
		return fmt.Errorf("roll-up: %w", err)
	}
	rollup.runs, rollup.rows = []time.Duration{d}, rows
	add(rollup)
	// The roll-up and the whole hourly run take seconds at scale: three
	// runs of each give a median, one when a run takes minutes.
	heavyRuns := min(fo.runs, 3)
	if d > 20*time.Second {
		heavyRuns = 1
	}
	steady := fleetTiming{what: "roll-up", detail: "rollup_usage_days(NULL), next runs"}
	for range heavyRuns {
		d, rows, err := timedScalar(ctx, pool, `SELECT queen_proxy.rollup_usage_days(NULL)`)
		if err != nil {
			return fmt.Errorf("roll-up: %w", err)
		}
		steady.runs, steady.rows = append(steady.runs, d), rows
	}
	add(steady)
	pruneRuns := min(fo.runs, fo.days)
	prune := fleetTiming{what: "prune", detail: "prune_usage_minutes: one day"}
	var pruned []int64
	for i := range pruneRuns {
		d, rows, err := timedScalar(ctx, pool, `SELECT queen_proxy.prune_usage_minutes($1)`, fo.days-i)
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		prune.runs = append(prune.runs, d)
		pruned = append(pruned, rows)
	}
	prune.rows = medianInt(pruned)
	add(prune)
	reqKeep := min(fo.days, meter.RequestKeepDays)
	rprune := fleetTiming{what: "prune", detail: "prune_request_minutes: one day"}
	pruned = nil
	for i := range min(fo.runs, reqKeep) {
		d, rows, err := timedScalar(ctx, pool, `SELECT queen_proxy.prune_request_minutes($1)`, reqKeep-i)
		if err != nil {
			return fmt.Errorf("prune request counts: %w", err)
		}
		rprune.runs = append(rprune.runs, d)
		pruned = append(pruned, rows)
	}
	rprune.rows = medianInt(pruned)
	add(rprune)
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		return err
	}
	var days int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.usage_days`).Scan(&days); err != nil {
		return err
	}
	res.rows["usage_days"] = days

	// The monthly-quota pass: a whole Quota.RunOnce (roll-up, prunes,
	// the quota of every cluster), as the pump runs it every hour.
	quota := fleetTiming{what: "hourly quota pass", detail: "meter.Quota.RunOnce, every cluster has a quota"}
	q := meter.NewQuota(pool, nil, nil)
	q.KeepDays = fo.days - pruneRuns + 1
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return err
	}
	for range heavyRuns {
		t0 := time.Now()
		if err := q.RunOnce(ctx); err != nil {
			return fmt.Errorf("quota pass: %w", err)
		}
		quota.runs = append(quota.runs, time.Since(t0))
	}
	quota.rows = -1
	add(quota)
	if breakdown, err := statementBreakdown(ctx, pool, heavyRuns); err == nil {
		res.notes = append(res.notes, "hourly quota pass, server time per run by statement: "+breakdown)
	}
	// The baseline the pass replaced, in the same run: the monthly total
	// of every cluster with a quota asked one cluster at a time.
	perCluster := fleetTiming{what: "hourly quota pass", detail: "baseline: cluster_month_billable_msgs per cluster"}
	for range heavyRuns {
		d, _, err := timedScalar(ctx, pool, `SELECT count(queen_proxy.cluster_month_billable_msgs(c.id, date_trunc('month', now() AT TIME ZONE 'UTC')::date))
			FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE p.monthly_msgs_quota IS NOT NULL`)
		if err != nil {
			return fmt.Errorf("quota baseline: %w", err)
		}
		perCluster.runs = append(perCluster.runs, d)
	}
	perCluster.rows = -1
	add(perCluster)

	// The CLI (`caddy queen usage`): controlplane.Usage for one busy
	// cluster and its tenant (whose clusters are all busy), yesterday and
	// a month: the 30 whole days before today, not the last calendar
	// month, which a short fill early in a month leaves empty.
	yesterday := st.to.Truncate(24*time.Hour).AddDate(0, 0, -1)
	monthFrom := yesterday.AddDate(0, 0, -29)
	for _, c := range []struct {
		detail   string
		q        controlplane.UsageQuery
		goal     bool
		wantRows int
	}{
		{"one cluster, a day", controlplane.UsageQuery{From: yesterday, To: yesterday.AddDate(0, 0, 1), Cluster: "fc0"}, true, 1},
		{"one cluster, a month", controlplane.UsageQuery{From: monthFrom, To: yesterday.AddDate(0, 0, 1), Cluster: "fc0"}, true, 1},
		{"one tenant, a day", controlplane.UsageQuery{From: yesterday, To: yesterday.AddDate(0, 0, 1), Tenant: "ft0"}, true, clustersPerTenant},
		{"one tenant, a month", controlplane.UsageQuery{From: monthFrom, To: yesterday.AddDate(0, 0, 1), Tenant: "ft0"}, true, clustersPerTenant},
		{"every cluster, a month", controlplane.UsageQuery{From: monthFrom, To: yesterday.AddDate(0, 0, 1)}, false, st.clusters},
	} {
		t := fleetTiming{what: "CLI usage", detail: c.detail, goal: c.goal}
		n := fo.runs
		if !c.goal {
			n = heavyRuns // the whole fleet's report, for scale
		}
		for range n {
			t0 := time.Now()
			rep, err := controlplane.Usage(ctx, pool, c.q)
			if err != nil {
				return fmt.Errorf("usage %s: %w", c.detail, err)
			}
			t.runs = append(t.runs, time.Since(t0))
			if len(rep.Clusters) != c.wantRows || rep.Clusters[0].Requests == 0 {
				return fmt.Errorf("usage %s: %d clusters (want %d), first %+v", c.detail, len(rep.Clusters), c.wantRows, rep.Clusters)
			}
			t.rows = int64(len(rep.Clusters))
		}
		add(t)
	}

	// The console: its handlers, through its HTTP surface, as an operator
	// (who may open any cluster) with a session token.
	if err := measureConsole(ctx, st, fo.runs, heavyRuns, add); err != nil {
		return err
	}
	return nil
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func medianInt(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// timedScalar runs a SELECT of one integer, as Quota.RunOnce sends its
// maintenance functions, and times it.
func timedScalar(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) (time.Duration, int64, error) {
	var n int64
	t0 := time.Now()
	err := pool.QueryRow(ctx, sql, args...).Scan(&n)
	return time.Since(t0), n, err
}

// statementCount is how many statements the database ran since the last
// reset, per run, leaving out the benchmark's own reads of the counters.
func statementCount(ctx context.Context, pool *pgxpool.Pool, runs int) (string, error) {
	var calls int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT ILIKE '%pg_stat%'`).Scan(&calls)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%.2f", float64(calls)/float64(runs)), nil
}

// statementBreakdown is the server time of each statement since the last
// reset, per run, longest first.
func statementBreakdown(ctx context.Context, pool *pgxpool.Pool, runs int) (string, error) {
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT ILIKE '%pg_stat%'
		ORDER BY total_exec_time DESC`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var calls int64
		var total float64
		var q string
		if err := rows.Scan(&calls, &total, &q); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%.1f ms in %.0f× `%s`", total/float64(runs), float64(calls)/float64(runs),
			truncate(strings.ReplaceAll(strings.TrimSpace(q), "|", "\\|"), 70)))
	}
	return strings.Join(parts, "; "), rows.Err()
}

// measureMeterFlush records a minute of the fleet's usage into a meter
// (its own spool directory, a clock the benchmark moves) and times
// FlushClosedMinutes once that minute has ended, as the gateway's flush
// runs it; each run is a new minute after the fill.
func measureMeterFlush(ctx context.Context, st *fleetStep, runs int) (fleetTiming, string, error) {
	t := fleetTiming{what: "gateway flush", detail: "meter.FlushClosedMinutes, a minute of the fleet"}
	ids, err := fleetIDs(ctx, st)
	if err != nil {
		return t, "", err
	}
	dir, err := os.MkdirTemp("", "queengate-fleet-spool-")
	if err != nil {
		return t, "", err
	}
	defer os.RemoveAll(dir)
	clock := st.to.Add(30 * time.Second)
	m, err := meter.New(meter.Config{Pool: st.pool, SpoolDir: dir, Now: func() time.Time { return clock }})
	if err != nil {
		return t, "", err
	}
	var before int64
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.usage_minutes WHERE minute >= $1`, st.to).Scan(&before); err != nil {
		return t, "", err
	}
	if _, err := st.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return t, "", err
	}
	for run := range runs {
		minute := int(clock.Unix() / 60)
		rows := 0
		for idx, id := range ids {
			if idx < st.busy {
				m.Record(meter.Sample{ClusterID: id, Op: meter.OpPush, Reqs: 3, Msgs: 30, BytesIn: 4096})
				m.Record(meter.Sample{ClusterID: id, Op: meter.OpDelivery, Reqs: 2, Msgs: 30, BytesOut: 4096})
				rows += 2
			} else if minute%360 == idx%360 {
				m.Record(meter.Sample{ClusterID: id, Op: meter.OpPush, Reqs: 1, Msgs: 5, BytesIn: 512})
				rows++
			}
		}
		clock = clock.Add(time.Minute)
		t0 := time.Now()
		if err := m.FlushClosedMinutes(ctx); err != nil {
			return t, "", fmt.Errorf("flush %d: %w", run, err)
		}
		t.runs = append(t.runs, time.Since(t0))
		t.rows = int64(rows)
	}
	stmts, err := statementCount(ctx, st.pool, runs)
	if err != nil {
		return t, "", err
	}
	var after int64
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.usage_minutes WHERE minute >= $1`, st.to).Scan(&after); err != nil {
		return t, "", err
	}
	if s := m.Stats(); after-before < t.rows || s.SpooledRows != 0 {
		return t, "", fmt.Errorf("flush: usage_minutes gained %d rows after the fill, want at least %d (one flush), spooled %d", after-before, t.rows, s.SpooledRows)
	}
	return t, stmts, nil
}

// measureTallyFlush does the same for the request counts per key and
// outcome (meter.RequestTally), a minute of the fleet per flush.
func measureTallyFlush(ctx context.Context, st *fleetStep, runs int) (fleetTiming, string, error) {
	t := fleetTiming{what: "gateway flush", detail: "meter.RequestTally.Flush, a minute of the fleet"}
	rows, err := st.pool.Query(ctx, `SELECT id::text, keys FROM bench.fleet ORDER BY idx`)
	if err != nil {
		return t, "", err
	}
	type c struct {
		id   string
		keys []string
	}
	var cs []c
	for rows.Next() {
		var x c
		if err := rows.Scan(&x.id, &x.keys); err != nil {
			return t, "", err
		}
		cs = append(cs, x)
	}
	if err := rows.Err(); err != nil {
		return t, "", err
	}
	clock := st.to.Add(30 * time.Second)
	tally := meter.NewRequestTally(st.pool, func() time.Time { return clock }, nil)
	if _, err := st.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return t, "", err
	}
	for run := range runs {
		minute := int(clock.Unix() / 60)
		n := 0
		for idx, x := range cs {
			if idx < st.busy {
				for _, k := range x.keys {
					tally.Record(x.id, k, http.StatusOK)
					n++
				}
				tally.Record(x.id, x.keys[0], http.StatusTooManyRequests)
				n++
			} else if minute%360 == idx%360 {
				tally.Record(x.id, x.keys[0], http.StatusOK)
				n++
			}
		}
		t0 := time.Now()
		if err := tally.Flush(ctx); err != nil {
			return t, "", fmt.Errorf("request flush %d: %w", run, err)
		}
		t.runs = append(t.runs, time.Since(t0))
		t.rows = int64(n)
		clock = clock.Add(time.Minute)
	}
	stmts, err := statementCount(ctx, st.pool, runs)
	return t, stmts, err
}

func fleetIDs(ctx context.Context, st *fleetStep) ([]string, error) {
	rows, err := st.pool.Query(ctx, `SELECT id::text FROM bench.fleet ORDER BY idx`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// fleetClusters resolves a cluster from the Host, <slug>.fleet.test, as
// the gateway's resolver does under its base domain.
type fleetClusters struct{ cache *tenancy.ClusterCache }

func (c fleetClusters) ClusterForHost(ctx context.Context, host string) (*tenancy.Cluster, error) {
	slug, ok := tenancy.SlugUnderDomain(host, []string{fleetDomain})
	if !ok {
		return nil, tenancy.ErrNotFound
	}
	return c.cache.ClusterBySlug(ctx, slug)
}

func (c fleetClusters) ClusterByReference(ctx context.Context, ref string) (*tenancy.Cluster, error) {
	if c, err := c.cache.ClusterBySlug(ctx, ref); err == nil {
		return c, nil
	}
	return c.cache.ClusterByID(ctx, ref)
}

func (fleetClusters) SharedHost(string) bool { return false }

func (c fleetClusters) APIKey(ctx context.Context, presented string) (*tenancy.APIKey, error) {
	return c.cache.APIKey(ctx, presented)
}

// measureConsole times the console's usage and request charts of one busy
// cluster and the operator's fleet page, through console.Surface.
func measureConsole(ctx context.Context, st *fleetStep, runs, heavyRuns int, add func(fleetTiming)) error {
	keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte("fleet-benchmark-session-secret-0123456789")})
	if err != nil {
		return err
	}
	store := tenancy.NewStore(st.pool)
	ids := tenancy.NewIdentityCache(store, tenancy.IdentityCacheConfig{}, nil)
	cache := tenancy.NewClusterCache(store, tenancy.CacheConfig{}, nil)
	s, err := console.New(console.Options{Pool: st.pool, Sessions: keys, Identities: ids, Clusters: fleetClusters{cache},
		OperatorAPI: true, OperatorEnabled: true})
	if err != nil {
		return err
	}
	var operator string
	if err := st.pool.QueryRow(ctx, `SELECT id::text FROM queen_proxy.users WHERE email = 'operator@fleet.test'`).Scan(&operator); err != nil {
		return err
	}
	token, _, err := keys.Mint(operator, "", "viewer", "", time.Hour)
	if err != nil {
		return err
	}
	host := "fc0." + fleetDomain
	for _, c := range []struct {
		detail, path string
		goal         bool
	}{
		{"usage chart: 24 h of minutes + 30 days", "/api/console/usage?hours=24&days=30", true},
		{"usage chart: 7 days of minutes + 400 days", "/api/console/usage?hours=168&days=400", true},
		{"requests chart: 24 h", "/api/console/requests?hours=24", true},
		{"requests chart: 7 days", "/api/console/requests?hours=168", true},
		{"operator fleet page: every tenant and cluster", "/api/operator/tenants", false},
	} {
		t := fleetTiming{what: "console", detail: c.detail, goal: c.goal, rows: -1}
		n := runs
		if !c.goal {
			n = heavyRuns
		}
		// One unmeasured call fills the caches of the cluster and the
		// session, as on a gateway that serves the console all day.
		for i := range n + 1 {
			r := httptest.NewRequest(http.MethodGet, "http://"+host+c.path, nil).WithContext(ctx)
			r.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			s.ServeHTTP(rec, r)
			d := time.Since(t0)
			if rec.Code != http.StatusOK {
				// A page that fails at this size is a figure too (the
				// fleet page has a 15 s budget): say so and go on.
				if c.goal {
					return fmt.Errorf("console %s: %d %s", c.path, rec.Code, truncate(rec.Body.String(), 300))
				}
				t.failed = fmt.Sprintf("%d after %.0f ms: %s", rec.Code, ms64(d), truncate(rec.Body.String(), 120))
				break
			}
			if i > 0 {
				t.runs = append(t.runs, d)
				t.rows = int64(rec.Body.Len())
			}
		}
		add(t)
	}
	return nil
}

// tableSize is one table's rows and bytes; a partitioned table's are the
// sums over its partitions.
type tableSize struct {
	table                string
	partitions           int64
	rows                 int64
	heap, indexes, total int64
	perIndex             []indexSize
}

type indexSize struct {
	name  string
	bytes int64
}

// leavesSQL lists the relations that hold the data of $1: its leaf
// partitions when it is partitioned (a table or an index), else itself
// (pg_partition_tree lists nothing for a relation outside a tree).
const leavesSQL = `SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
	UNION SELECT $1::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = $1::regclass) IN ('r', 'i')`

var fleetTables = []string{"usage_minutes", "usage_days", "request_minutes", "meter_batches", "operations"}

func tableSizes(ctx context.Context, pool *pgxpool.Pool) ([]tableSize, error) {
	var out []tableSize
	for _, t := range fleetTables {
		ts := tableSize{table: t}
		rel := "queen_proxy." + t
		err := pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE l.relid <> $1::regclass),
			       coalesce(sum(pg_relation_size(l.relid) + coalesce(pg_relation_size(c.reltoastrelid), 0)), 0)::bigint,
			       coalesce(sum(pg_indexes_size(l.relid)), 0)::bigint,
			       coalesce(sum(pg_total_relation_size(l.relid)), 0)::bigint
			  FROM (`+leavesSQL+`) l JOIN pg_class c ON c.oid = l.relid`, rel).
			Scan(&ts.partitions, &ts.heap, &ts.indexes, &ts.total)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", t, err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+rel).Scan(&ts.rows); err != nil {
			return nil, err
		}
		// Each index of the table, summed over its partitions.
		rows, err := pool.Query(ctx, `
			SELECT i.indexrelid::regclass::text,
			       (SELECT coalesce(sum(pg_relation_size(l.relid)), 0) FROM (`+strings.ReplaceAll(leavesSQL, "$1::regclass", "i.indexrelid")+`) l)::bigint
			  FROM pg_index i WHERE i.indrelid = $1::regclass ORDER BY 1`, rel)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var x indexSize
			if err := rows.Scan(&x.name, &x.bytes); err != nil {
				rows.Close()
				return nil, err
			}
			x.name = strings.TrimPrefix(x.name, "queen_proxy.")
			ts.perIndex = append(ts.perIndex, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out = append(out, ts)
	}
	return out, nil
}

// mib writes a size in MiB, or KiB below one MiB, or GiB above ten.
func mib(b int64) string {
	switch {
	case b < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	case b >= 10<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func (r *fleetResult) print() {
	st := r.step
	fmt.Printf("### %s clusters (%s busy), %s tenants, %s API keys\n\n", thousands(int64(st.clusters)), thousands(int64(st.busy)),
		thousands(int64(st.tenants)), thousands(int64(st.clusters*keysPerCluster)))
	part := "plain tables"
	if st.partitioned {
		part = "day partitions made by queen_proxy.usage_partitions_ensure"
	}
	fmt.Printf("- filled %s to %s (%s) in %s: usage_minutes %s rows, request_minutes %s rows (both as generated, counted after the fill); after the roll-up usage_days holds %s rows\n\n",
		st.from.Format(time.DateOnly), st.to.Format("2006-01-02 15:04"), part, r.fillTook.Round(time.Second),
		thousands(r.rows["usage_minutes"]), thousands(r.rows["request_minutes"]), thousands(r.rows["usage_days"]))
	fmt.Println("| operation | what | median ms | runs (ms) | rows | goal ≤ 50 ms |")
	fmt.Println("|---|---|---:|---|---:|---|")
	for _, t := range r.timings {
		runs := make([]string, len(t.runs))
		for i, d := range t.runs {
			runs[i] = fmt.Sprintf("%.1f", ms64(d))
		}
		goal := "—"
		if t.goal {
			goal = verdict(t.median() <= fleetQueryGoal)
		}
		rows := "—"
		if t.rows >= 0 {
			rows = thousands(t.rows)
			if t.what == "console" {
				rows += " B"
			}
		}
		if t.failed != "" {
			fmt.Printf("| %s | %s | **failed** | %s | — | — |\n", t.what, t.detail, strings.ReplaceAll(t.failed, "|", "\\|"))
			continue
		}
		fmt.Printf("| %s | %s | %.1f | %s | %s | %s |\n", t.what, t.detail, ms64(t.median()), strings.Join(runs, ", "), rows, goal)
	}
	fmt.Println()
	for _, n := range r.notes {
		fmt.Printf("- %s\n", n)
	}
	fmt.Println()
	fmt.Println("| table | partitions | rows | heap | indexes | total | per index |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---|")
	for _, s := range r.sizes {
		var idx []string
		for _, i := range s.perIndex {
			idx = append(idx, fmt.Sprintf("%s %s", i.name, mib(i.bytes)))
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s |\n", s.table, s.partitions, thousands(s.rows), mib(s.heap), mib(s.indexes), mib(s.total), strings.Join(idx, ", "))
	}
	fmt.Println()
}

// printGrowth compares each step's figures with the first's.
func printGrowth(rs []*fleetResult) {
	if len(rs) < 2 {
		return
	}
	a, b := rs[0], rs[len(rs)-1]
	fmt.Printf("### Growth from %s to %s clusters (×%.0f)\n\n", thousands(int64(a.step.clusters)), thousands(int64(b.step.clusters)),
		float64(b.step.clusters)/float64(a.step.clusters))
	fmt.Println("| operation | what | ms | ms | growth |")
	fmt.Println("|---|---|---:|---:|---:|")
	for i, t := range a.timings {
		if i >= len(b.timings) {
			break
		}
		u := b.timings[i]
		fmt.Printf("| %s | %s | %.1f | %.1f | ×%.1f |\n", t.what, t.detail, ms64(t.median()), ms64(u.median()), ms64(u.median())/max(ms64(t.median()), 0.001))
	}
	fmt.Println()
	fmt.Println("| table | total | total | growth |")
	fmt.Println("|---|---:|---:|---:|")
	for i, s := range a.sizes {
		u := b.sizes[i]
		fmt.Printf("| %s | %s | %s | ×%.1f |\n", s.table, mib(s.total), mib(u.total), float64(u.total)/max(float64(s.total), 1))
	}
	// Sizing: bytes a row from the largest step (heap and indexes over
	// rows), times the rows a busy cluster makes a day by the density
	// above (an idle one makes a handful).
	fmt.Println()
	one := &fleetStep{clusters: 1, busy: 1}
	busyUsage, busyReqs := fleetExpected(one, 1440)
	one.busy = 0
	idleUsage, idleReqs := fleetExpected(one, 1440)
	for _, s := range b.sizes {
		var perBusy, perIdle int64
		switch s.table {
		case "usage_minutes":
			perBusy, perIdle = busyUsage, idleUsage
		case "request_minutes":
			perBusy, perIdle = busyReqs, idleReqs
		default:
			continue
		}
		// The rows the table holds when measured: the prunes drop whole
		// day partitions, so no dead row of a pruned day takes space.
		rows := s.rows
		if rows <= 0 {
			continue
		}
		perRow := float64(s.total) / float64(rows)
		fmt.Printf("- sizing, %s: %.0f bytes a row (heap and indexes, over the %s rows it holds); a busy cluster writes %s rows a day, an idle one %d: %.2f GiB per 1,000 busy clusters per 30 days\n",
			s.table, perRow, thousands(rows), thousands(perBusy), perIdle, float64(perBusy)*30*1000*perRow/(1<<30))
	}
}

func runtimeCPUs() int { return runtime.NumCPU() }
