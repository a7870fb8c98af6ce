package migrations

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
)

// migratedUpTo returns a fresh database with the migrations before name
// applied, as a database left by an older release would be.
func migratedUpTo(t *testing.T, name string) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	ms, err := load()
	if err != nil {
		t.Fatal(err)
	}
	exec(t, pool, bootstrapSQL)
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, m := range ms {
		if m.name >= name {
			break
		}
		if err := applyOne(ctxT(t), conn, m); err != nil {
			t.Fatal(err)
		}
	}
	return url, pool
}

// partitions returns the partitions of table as name -> "from..to" in UTC
// dates ("-inf"/"inf" for open ends, "default" for the DEFAULT partition).
func partitions(t *testing.T, pool *pgxpool.Pool, table string) map[string]string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT partition_name, is_default,
		CASE WHEN from_at = '-infinity' THEN '-inf' ELSE to_char(from_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') END,
		CASE WHEN to_at = 'infinity' THEN 'inf' ELSE to_char(to_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') END
		FROM queen_proxy.usage_partitions($1)`, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var name, from, to string
		var def bool
		if err := rows.Scan(&name, &def, &from, &to); err != nil {
			t.Fatal(err)
		}
		if def {
			out[name] = "default"
		} else {
			out[name] = from + ".." + to
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func ymd(d time.Time) string { return d.Format("20060102") }

// totalsSQL sums everything the two usage tables hold, in one line.
const totalsSQL = `SELECT (SELECT count(*) || ' rows ' || coalesce(sum(msgs), 0) || ' msgs ' || coalesce(sum(reqs), 0) || ' reqs ' ||
		coalesce(sum(bytes_in), 0) || ' in ' || coalesce(sum(bytes_out), 0) || ' out' FROM queen_proxy.usage_minutes) || '; ' ||
	(SELECT count(*) || ' rows ' || coalesce(sum(reqs), 0) || ' reqs' FROM queen_proxy.request_minutes)`

// usageTotalsSQL is totalsSQL's first part, for a schema without
// request_minutes (the reference's).
const usageTotalsSQL = `SELECT count(*) || ' rows ' || coalesce(sum(msgs), 0) || ' msgs ' || coalesce(sum(reqs), 0) || ' reqs ' ||
		coalesce(sum(bytes_in), 0) || ' in ' || coalesce(sum(bytes_out), 0) || ' out; 0 rows 0 reqs' FROM queen_proxy.usage_minutes`

// flushSQL has the shape of the meter's write: the batch id and the rows'
// upsert-add in one statement.
const flushSQL = `WITH b AS (
    INSERT INTO queen_proxy.meter_batches (batch_id, row_count) VALUES ($1, 1)
    ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id
)
INSERT INTO queen_proxy.usage_minutes AS m (cluster_id, minute, op_class, reqs, msgs, bytes_in, bytes_out)
SELECT $2::uuid, $3::timestamptz, 'push', 1, $4, 10, 0 FROM b
ON CONFLICT (cluster_id, minute, op_class) DO UPDATE
   SET reqs = m.reqs + EXCLUDED.reqs, msgs = m.msgs + EXCLUDED.msgs,
       bytes_in = m.bytes_in + EXCLUDED.bytes_in, bytes_out = m.bytes_out + EXCLUDED.bytes_out`

// upsertSQL is flushSQL without the batch id, as queen_proxy writes (the
// reference schema has no meter_batches).
const upsertSQL = `INSERT INTO queen_proxy.usage_minutes AS m (cluster_id, minute, op_class, reqs, msgs, bytes_in, bytes_out)
SELECT $2::uuid, $3::timestamptz, 'push', 1, $4, 10, 0 WHERE $1::text IS NOT NULL
ON CONFLICT (cluster_id, minute, op_class) DO UPDATE
   SET reqs = m.reqs + EXCLUDED.reqs, msgs = m.msgs + EXCLUDED.msgs,
       bytes_in = m.bytes_in + EXCLUDED.bytes_in, bytes_out = m.bytes_out + EXCLUDED.bytes_out`

// The conversion keeps every row exactly once, from the reference's own
// schema (queen_proxy's eleven migrations: the drop-in case) and from the
// previous release's, while gateways write: one holds its transaction open
// when the migration starts (the migration waits for it), others write
// all along. Applied again, it changes nothing.
func TestUsagePartitionsConvertInPlaceUnderWrites(t *testing.T) {
	for _, from := range []string{"012_queengate_auth", "036_usage_partitions"} {
		t.Run("from before "+from, func(t *testing.T) {
			url, pool := migratedUpTo(t, from)
			tenant, _ := newTenant(t, pool)
			cluster := newCluster(t, pool, tenant, newCell(t, pool))
			today := utcDay(0)
			// Rows over 100 days, some in the future (a skewed clock).
			for i, d := range []int{-100, -40, -3, -1, 0, 0, 2} {
				at := today.AddDate(0, 0, d).Add(time.Duration(i*37) * time.Minute)
				addMinute(t, pool, cluster, at, "push", 10+i, 1, 100*i, i)
				addMinute(t, pool, cluster, at, "delivery", 1, 1, 0, 7)
			}
			hasRequests := from > "021"
			write := upsertSQL
			if from > "013" {
				write = flushSQL
			}
			if hasRequests {
				exec(t, pool, `INSERT INTO queen_proxy.request_minutes (cluster_id, minute, key_id, outcome, reqs) VALUES
					($1::uuid, date_trunc('minute', now() - interval '50 days'), 'k', 'ok', 5),
					($1::uuid, date_trunc('minute', now()), '', '429', 3)`, cluster)
			}
			before := scalar[string](t, pool, usageTotalsSQL)
			if hasRequests {
				before = scalar[string](t, pool, totalsSQL)
			}

			// A gateway's flush in flight: its transaction holds the table.
			held, err := pool.Begin(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Rollback(context.Background()) }()
			if _, err := held.Exec(ctxT(t), write, "held-"+randHex(4), cluster, today.Add(10*time.Minute), 1000); err != nil {
				t.Fatal(err)
			}
			var heldPID int
			if err := held.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&heldPID); err != nil {
				t.Fatal(err)
			}

			// Writers all along, each on its own connection, as gateways.
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			var written, failed atomic.Int64
			var firstErr atomic.Value
			for w := range 3 {
				wp := pgtest.PoolFor(t, url)
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						_, err := wp.Exec(wctx, write, fmt.Sprintf("w%d-%d-%s", w, i, randHex(4)), cluster,
							today.Add(time.Duration(w)*time.Minute), 1)
						cancel()
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err)
							continue
						}
						written.Add(1)
					}
				})
			}

			applied := make(chan error, 1)
			go func() {
				_, err := Apply(context.Background(), pgtest.PoolFor(t, url))
				applied <- err
			}()
			// The migration waits for the held transaction.
			deadline := time.Now().Add(20 * time.Second)
			for scalar[int](t, pool, `SELECT count(*)::int FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, heldPID) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the migration never waited for the transaction in flight")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // writers queue behind the migration meanwhile
			if err := held.Commit(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if err := <-applied; err != nil {
				t.Fatalf("Apply: %v", err)
			}
			// Writers go on against the partitioned table.
			mark := written.Load()
			for written.Load() < mark+20 && time.Now().Before(deadline.Add(20*time.Second)) {
				time.Sleep(10 * time.Millisecond)
			}
			stop()
			wg.Wait()
			if n := failed.Load(); n != 0 {
				t.Errorf("%d writes failed across the migration, first: %v", n, firstErr.Load())
			}
			if written.Load() < mark+20 {
				t.Fatalf("writers stalled after the migration: %d writes", written.Load())
			}

			if kind := scalar[string](t, pool, "SELECT relkind::text FROM pg_class WHERE oid = 'queen_proxy.usage_minutes'::regclass"); kind != "p" {
				t.Fatalf("usage_minutes relkind = %q, want p (partitioned)", kind)
			}
			// Every row once: what was there, the held flush, and each write.
			w := written.Load()
			want := before
			var r, m, q, in, out int64
			if _, err := fmt.Sscanf(strings.SplitN(before, ";", 2)[0], "%d rows %d msgs %d reqs %d in %d out", &r, &m, &q, &in, &out); err != nil {
				t.Fatal(err)
			}
			newRows := int64(1 + 3) // the held flush's minute, one minute per writer
			want = fmt.Sprintf("%d rows %d msgs %d reqs %d in %d out;%s", r+newRows, m+1000+w, q+1+w, in+10+10*w, out,
				strings.SplitN(before, ";", 2)[1])
			if got := scalar[string](t, pool, totalsSQL); got != want {
				t.Fatalf("after the migration: %s\nwant:                %s", got, want)
			}
			if n := scalar[int64](t, pool, "SELECT count(*) FROM queen_proxy.meter_batches"); write == flushSQL && n != w+1 {
				t.Fatalf("%d batch ids recorded, want %d", n, w+1)
			}

			// The old table is a partition, up to tomorrow (the latest row
			// is the day after); new days have partitions of their own.
			upper := today.AddDate(0, 0, 3)
			got := partitions(t, pool, "usage_minutes")
			if got["usage_minutes_before_"+ymd(upper)] != "-inf.."+upper.Format("2006-01-02") || got["usage_minutes_default"] != "default" {
				t.Fatalf("usage_minutes partitions = %v", got)
			}
			for d := 3; d <= 7; d++ {
				day := today.AddDate(0, 0, d)
				if got["usage_minutes_p"+ymd(day)] != day.Format("2006-01-02")+".."+day.AddDate(0, 0, 1).Format("2006-01-02") {
					t.Errorf("no partition for %s: %v", day.Format("2006-01-02"), got)
				}
			}
			reqParts := partitions(t, pool, "request_minutes")
			if hasRequests {
				if _, ok := reqParts["request_minutes_before_"+ymd(today.AddDate(0, 0, 1))]; !ok {
					t.Errorf("request_minutes partitions = %v, want the old table attached", reqParts)
				}
			} else if _, ok := reqParts["request_minutes_p"+ymd(today.AddDate(0, 0, -1))]; !ok || len(reqParts) != 10 {
				t.Errorf("request_minutes (new and empty) partitions = %v, want yesterday to a week ahead and the default", reqParts)
			}
			// The checks, keys and functions hold on the new tables.
			wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class) VALUES ($1, now(), 'pop')`, cluster), "23514")
			wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class) VALUES (gen_random_uuid(), now(), 'push')`), "23503")
			if n := scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)"); n == 0 {
				t.Fatal("roll-up found nothing on the partitioned table")
			}

			// Again: nothing to do, nothing changed.
			afterAll := scalar[string](t, pool, totalsSQL)
			if again, err := Apply(ctxT(t), pool); err != nil || len(again) != 0 {
				t.Fatalf("second Apply = %v, %v", again, err)
			}
			ms, _ := load()
			for _, m := range ms {
				if m.name == "036_usage_partitions" {
					exec(t, pool, m.sql)
				}
			}
			if got := scalar[string](t, pool, totalsSQL); got != afterAll {
				t.Fatalf("re-running 036 changed the rows: %s, was %s", got, afterAll)
			}
			if again := partitions(t, pool, "usage_minutes"); fmt.Sprint(again) != fmt.Sprint(got) {
				t.Fatalf("re-running 036 changed the partitions: %v, was %v", again, got)
			}
		})
	}
}

// usage_partitions_ensure creates each missing day once, moves the day's
// rows that had landed in the DEFAULT partition into it, and refuses a bad
// range.
func TestUsagePartitionsEnsure(t *testing.T) {
	pool := ownMigratedDatabase(t)
	cluster := newClusters(t, pool, 1)[0]
	far := utcDay(30)
	// A day without a partition: the write lands in the DEFAULT partition.
	addMinute(t, pool, cluster, far.Add(5*time.Minute), "push", 7, 1, 0, 0)
	addMinute(t, pool, cluster, far.AddDate(0, 0, 1).Add(5*time.Minute), "push", 3, 1, 0, 0)
	exec(t, pool, `INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome, reqs) VALUES ($1, $2, 'ok', 4)`, cluster, far.Add(time.Hour))
	where := `SELECT tableoid::regclass::text FROM queen_proxy.usage_minutes WHERE cluster_id = $1 AND minute = $2`
	if p := scalar[string](t, pool, where, cluster, far.Add(5*time.Minute)); p != "queen_proxy.usage_minutes_default" {
		t.Fatalf("a row for a day without a partition is in %s", p)
	}
	before := scalar[string](t, pool, totalsSQL)

	if n := scalar[int](t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", far, far.AddDate(0, 0, 1)); n != 4 {
		t.Fatalf("created %d partitions, want 2 days x 2 tables", n)
	}
	if p := scalar[string](t, pool, where, cluster, far.Add(5*time.Minute)); p != "queen_proxy.usage_minutes_p"+ymd(far) {
		t.Fatalf("the day's row stayed in %s", p)
	}
	if p := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM queen_proxy.request_minutes WHERE cluster_id = $1`, cluster); p != "queen_proxy.request_minutes_p"+ymd(far) {
		t.Fatalf("the day's request count stayed in %s", p)
	}
	if n := scalar[int](t, pool, "SELECT count(*)::int FROM queen_proxy.usage_minutes_default"); n != 0 {
		t.Fatalf("%d rows left in the DEFAULT partition", n)
	}
	if after := scalar[string](t, pool, totalsSQL); after != before {
		t.Fatalf("moving rows changed the totals: %s, was %s", after, before)
	}
	// The days the migration made, and these, exist: nothing to do.
	if n := scalar[int](t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", utcDay(0), far.AddDate(0, 0, 1)); n != 2*22 {
		t.Fatalf("created %d partitions for today to %s, want the 22 days between a week ahead and the ones made, for each table", n, far.Format("2006-01-02"))
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", utcDay(-1), far.AddDate(0, 0, 1)); n != 0 {
		t.Fatalf("a second call created %d partitions", n)
	}
	// The new partitions carry the parent's checks and foreign key.
	wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs) VALUES ($1, $2, 'push', -1)`, cluster, far), "23514")
	wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome) VALUES (gen_random_uuid(), $1, 'ok')`, far), "23503")

	for _, bad := range []string{
		"SELECT queen_proxy.usage_partitions_ensure(NULL, '2026-01-01')",
		"SELECT queen_proxy.usage_partitions_ensure('2026-01-02', '2026-01-01')",
		"SELECT queen_proxy.usage_partitions_ensure('2026-01-01', '2027-02-06')",
	} {
		wantPgErr(t, callErr(t, pool, bad), "22023", "usage_partitions_ensure")
	}
	wantPgErr(t, callErr(t, pool, "SELECT * FROM queen_proxy.usage_partitions('operations')"), "22023", "usage_partitions")
	// What an empty day costs, for docs/metering.md.
	t.Logf("an empty day partition of usage_minutes: %s on disk (table and indexes), %d catalog objects",
		scalar[string](t, pool, "SELECT pg_size_pretty(pg_total_relation_size($1::regclass))", "queen_proxy.usage_minutes_p"+ymd(far.AddDate(0, 0, -5))),
		scalar[int](t, pool, `SELECT 1 + (SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass) + (SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass)`,
			"queen_proxy.usage_minutes_p"+ymd(far.AddDate(0, 0, -5))))
}

// The prunes drop whole day partitions older than the retention (a usage
// day only once it is final: rolled up, nothing written to it since), and
// keep the newer ones. A row written to a day after its partition was
// dropped is added to the day's rolled-up row, not taken for the whole day.
func TestUsagePartitionsPruneDropsDays(t *testing.T) {
	pool := ownMigratedDatabase(t)
	cluster := newClusters(t, pool, 1)[0]
	a, b, c := utcDay(-20), utcDay(-19), utcDay(-9)
	exec(t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", a, c)
	addMinute(t, pool, cluster, a.Add(time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, a.Add(2*time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, b.Add(time.Hour), "push", 1, 1, 0, 0)
	addMinute(t, pool, cluster, c.Add(time.Hour), "push", 5, 1, 0, 0)
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes(10)"); n != 0 {
		t.Fatalf("pruned %d rows before any roll-up, want 0: no day is final yet", n)
	}
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	addMinute(t, pool, cluster, b.Add(time.Hour), "delivery", 1, 1, 0, 0) // late: day b is pending

	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes(10)"); n != 2 {
		t.Fatalf("pruned %d rows, want 2 (day a dropped; day b, written since its roll-up, kept)", n)
	}
	got := partitions(t, pool, "usage_minutes")
	if _, ok := got["usage_minutes_p"+ymd(a)]; ok {
		t.Errorf("day %s, older than the retention and final, was not dropped", ymd(a))
	}
	if _, ok := got["usage_minutes_p"+ymd(a.AddDate(0, 0, 2))]; ok {
		t.Errorf("an empty day older than the retention was not dropped")
	}
	for _, keep := range []time.Time{b, c} {
		if _, ok := got["usage_minutes_p"+ymd(keep)]; !ok {
			t.Errorf("day %s was dropped: %v", ymd(keep), got)
		}
	}
	if s := scalar[string](t, pool, `SELECT string_agg(op_class || '@' || to_char(minute AT TIME ZONE 'UTC', 'YYYYMMDD'), ',' ORDER BY minute, op_class)
		FROM queen_proxy.usage_minutes WHERE cluster_id = $1`, cluster); s != "delivery@"+ymd(b)+",push@"+ymd(b)+",push@"+ymd(c) {
		t.Fatalf("rows left: %s, want day %s whole and the row within the retention", s, ymd(b))
	}
	// Once rolled up, day b goes whole.
	scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_usage_minutes(10)"); n != 2 {
		t.Fatalf("second prune removed %d rows, want 2", n)
	}
	if _, ok := partitions(t, pool, "usage_minutes")["usage_minutes_p"+ymd(b)]; ok {
		t.Error("rolled-up day b was not dropped")
	}
	// A row for day a, written after its partition was dropped (a spool
	// replayed very late), lands in the DEFAULT partition and is added to
	// the day's row by the next roll-up, once.
	addMinute(t, pool, cluster, a.Add(3*time.Hour), "push", 4, 1, 0, 0)
	for range 2 {
		scalar[int](t, pool, "SELECT queen_proxy.rollup_usage_days(NULL)")
		if r, ok := day(t, pool, cluster, a, "push"); !ok || r.msgs != 6 || r.reqs != 3 {
			t.Fatalf("day %s after a row written past its prune: %+v, %v; want 6 messages, 3 requests", ymd(a), r, ok)
		}
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.usage_minutes WHERE cluster_id = $1 AND minute < $2", cluster, b); n != 0 {
		t.Fatalf("%d minute rows of the pruned day left after they were added", n)
	}

	// Request counts: the day partitions wholly older than 35 days go.
	old, edge, kept := utcDay(-40), utcDay(-36), utcDay(-35)
	exec(t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $2::date)", old, kept)
	exec(t, pool, `INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome, reqs) VALUES
		($1, $2, 'ok', 1), ($1, $3, 'ok', 2), ($1, $4, '429', 4), ($1, $5, 'ok', 8)`,
		cluster, old.Add(time.Hour), old.Add(2*time.Hour), edge.Add(23*time.Hour+59*time.Minute), kept.Add(time.Duration(time.Now().UTC().Hour()+1)*time.Hour))
	if n := scalar[int](t, pool, "SELECT queen_proxy.prune_request_minutes(35)"); n != 3 {
		t.Fatalf("pruned %d request rows, want 3", n)
	}
	rp := partitions(t, pool, "request_minutes")
	for _, gone := range []time.Time{old, edge} {
		if _, ok := rp["request_minutes_p"+ymd(gone)]; ok {
			t.Errorf("request day %s was not dropped", ymd(gone))
		}
	}
	if _, ok := rp["request_minutes_p"+ymd(kept)]; !ok {
		t.Errorf("request day %s, not wholly older than 35 days, was dropped", ymd(kept))
	}
	if n := scalar[int](t, pool, "SELECT coalesce(sum(reqs), 0)::int FROM queen_proxy.request_minutes WHERE cluster_id = $1", cluster); n != 8 {
		t.Fatalf("%d requests left, want 8", n)
	}
}

// A drop waits at most lock_timeout for a reader that holds the table, and
// is left for the next run rather than failing the prune or queueing the
// gateways' writes behind it for longer.
func TestUsagePartitionsPruneSkipsBusyDay(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	old := utcDay(-50)
	exec(t, pool, "SELECT queen_proxy.usage_partitions_ensure($1::date, $1::date)", old)
	reader, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(context.Background()) }()
	if _, err := reader.Exec(ctxT(t), "SELECT count(*) FROM queen_proxy.request_minutes"); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var n int
	err = conn.QueryRow(ctxT(t), "SELECT queen_proxy.prune_request_minutes(35)").Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("prune beside a reader = %d, %v; want 0 rows and no error", n, err)
	}
	if _, ok := partitions(t, pool, "request_minutes")["request_minutes_p"+ymd(old)]; !ok {
		t.Fatal("the busy day went anyway")
	}
	_ = reader.Rollback(ctxT(t))
	if err := conn.QueryRow(ctxT(t), "SELECT queen_proxy.prune_request_minutes(35)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, ok := partitions(t, pool, "request_minutes")["request_minutes_p"+ymd(old)]; ok {
		t.Fatal("the day was not dropped once free")
	}
}

// What the conversion costs: the time 036 holds the tables for a
// usage_minutes of QG_CONVERT_ROWS rows (default 200,000) over 90 days,
// printed with -v; the rows are all there after. docs/upgrading.md quotes
// a run with 5,000,000.
func TestUsagePartitionsConvertCost(t *testing.T) {
	rows := rowsFromEnv(t, "QG_CONVERT_ROWS", 200_000)
	_, pool := migratedUpTo(t, "036_usage_partitions")
	clusters := newClusters(t, pool, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// One row per cluster, minute and class, from 90 days ago on.
	if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs)
		SELECT c[1 + i % 50], date_trunc('minute', now() - interval '90 days') + (i / 250) * interval '1 minute',
		       (ARRAY['push', 'delivery', 'txn', 'configure', 'read'])[1 + (i / 50) % 5], 1, 1
		  FROM generate_series(0, $2::int - 1) AS i, (SELECT $1::uuid[] AS c) AS cs`, clusters, rows); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, "ANALYZE queen_proxy.usage_minutes")
	before := scalar[string](t, pool, totalsSQL)
	ms, _ := load()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	start := time.Now()
	for _, m := range ms {
		if m.name == "036_usage_partitions" {
			if err := applyOne(ctx, conn, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	took := time.Since(start)
	if after := scalar[string](t, pool, totalsSQL); after != before {
		t.Fatalf("after: %s, before: %s", after, before)
	}
	t.Logf("036 converted a usage_minutes of %d rows in %v (%.0f rows/s)", rows, took.Round(time.Millisecond), float64(rows)/took.Seconds())
}

// Making a partition lets the gateways' writes go on: it succeeds while a
// flush's transaction is open on the table (a lock that excludes writers
// on the parent would wait for it and time out). A reader of the DEFAULT
// partition does hold it up: docs/metering.md says so.
func TestUsagePartitionsEnsureBesideOpenWrite(t *testing.T) {
	pool := ownMigratedDatabase(t)
	cluster := newClusters(t, pool, 1)[0]
	writer, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.Background()) }()
	if _, err := writer.Exec(ctxT(t), flushSQL, "open-"+randHex(4), cluster, utcDay(0).Add(time.Minute), 5); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var n int
	if err := pool.QueryRow(ctxT(t), "SELECT queen_proxy.usage_partitions_ensure($1::date, $1::date)", utcDay(20)).Scan(&n); err != nil || n != 2 {
		t.Fatalf("ensure beside an open write = %d, %v; want 2 partitions", n, err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("ensure waited %v for the open write", took)
	}
	if err := writer.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := scalar[int](t, pool, "SELECT msgs::int FROM queen_proxy.usage_minutes WHERE cluster_id = $1", cluster); got != 5 {
		t.Fatalf("the write committed %d msgs, want 5", got)
	}
}
