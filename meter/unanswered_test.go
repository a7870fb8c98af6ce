package meter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/limits"
)

// unansweredOf sums a cluster's usage_minutes.unanswered_msgs for op.
func unansweredOf(t *testing.T, pool *pgxpool.Pool, cluster string, op Op) int64 {
	t.Helper()
	return scalar[int64](t, pool, `SELECT coalesce(sum(unanswered_msgs), 0)::bigint FROM queen_proxy.usage_minutes
		WHERE cluster_id = $1 AND op_class = $2`, cluster, string(op))
}

// Unanswered messages are aggregated per minute within Msgs, never beyond
// them, and reach usage_minutes with the flush.
func TestUnansweredAggregatedWithinMsgsAndFlushed(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	clk := newClock(t0.Add(5 * time.Second))
	m := newMeter(t, Config{Now: clk.Now})
	ctx := ctxT(t)

	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 10, Unanswered: 10})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 4})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2, Unanswered: 9}) // cut to its 2 msgs
	m.Record(Sample{ClusterID: cluster, Op: OpTxn, Reqs: 1, Msgs: 3, Unanswered: -1})
	live := m.Unflushed(cluster)
	var liveUnanswered int64
	for _, u := range live {
		liveUnanswered += u.Unanswered
	}
	if liveUnanswered != 12 {
		t.Fatalf("Unflushed reports %d unanswered, want 12: %+v", liveUnanswered, live)
	}
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err)
	}
	if u := totals(t, pool, cluster, OpPush); u.Reqs != 3 || u.Msgs != 16 {
		t.Fatalf("push usage %+v, want 3 requests, 16 messages", u)
	}
	if n := unansweredOf(t, pool, cluster, OpPush); n != 12 {
		t.Fatalf("push unanswered_msgs = %d, want 12", n)
	}
	if n := unansweredOf(t, pool, cluster, OpTxn); n != 0 {
		t.Fatalf("txn unanswered_msgs = %d, want 0", n)
	}
	// A second flush of the same minute adds to the row.
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 5, Unanswered: 5})
	clk.Add(time.Minute)
	if err := m.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := unansweredOf(t, pool, cluster, OpPush); n != 17 {
		t.Fatalf("push unanswered_msgs after a second flush = %d, want 17", n)
	}
}

// A failed write spools the unanswered count with the row; the replay
// writes it once.
func TestUnansweredSurvivesTheSpool(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	clk := newClock(t0)
	dir := t.TempDir()
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	ctx := ctxT(t)

	proxy.set(proxyDown)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 2, Msgs: 7, Unanswered: 6})
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctx); err == nil || !strings.Contains(err.Error(), "spooled") {
		t.Fatalf("flush with the database down: %v", err)
	}
	spooled := filesIn(t, dir, spoolSuffix)
	if len(spooled) != 1 {
		t.Fatalf("spool files %v, want one", spooled)
	}
	line, err := os.ReadFile(filepath.Join(dir, spooled[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), `"unanswered_msgs":6`) {
		t.Fatalf("spool line lacks the unanswered count: %s", line)
	}
	proxy.set(proxyUp)
	for range 2 {
		if _, err := m.ReplaySpool(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u := totals(t, direct, cluster, OpPush); u.Reqs != 2 || u.Msgs != 7 {
		t.Fatalf("push usage after the replay %+v", u)
	}
	if n := unansweredOf(t, direct, cluster, OpPush); n != 6 {
		t.Fatalf("unanswered_msgs after the replay = %d, want 6", n)
	}
}

// The journal of a crashed process carries the unanswered count.
func TestUnansweredSurvivesACrash(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0.Add(time.Second))
	a := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	a.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1000, Unanswered: 1000})
	if err := a.checkpoint(); err != nil {
		t.Fatal(err)
	}
	crash(a)
	b := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := b.ReplaySpool(ctxT(t)); err != nil || n != 1 {
		t.Fatalf("replay of the journal = %d rows, %v", n, err)
	}
	if n := unansweredOf(t, pool, cluster, OpPush); n != 1000 {
		t.Fatalf("unanswered_msgs after the crash = %d, want 1000", n)
	}
}

// Spool lines written before the column existed (and by queen_proxy) read
// as 0 unanswered; a line claiming more unanswered than messages is not
// a spool batch.
func TestSpoolLinesWithAndWithoutUnanswered(t *testing.T) {
	cluster := "5f0e7d7c-3b53-4a43-8d0d-1c1f4c9d2b10"
	old := `{"batch":"b1","created_ms":1,"rows":[{"cluster_id":"` + cluster + `","minute":30000000,"op":"push","reqs":1,"msgs":2,"bytes_in":3,"bytes_out":4}]}`
	b, reason := parseBatch([]byte(old), true)
	if reason != "" || b.Rows[0].Unanswered != 0 || b.Rows[0].Msgs != 2 {
		t.Fatalf("old line: %+v, %q", b, reason)
	}
	withCount := strings.Replace(old, `"bytes_out":4`, `"bytes_out":4,"unanswered_msgs":2`, 1)
	if b, reason := parseBatch([]byte(withCount), true); reason != "" || b.Rows[0].Unanswered != 2 {
		t.Fatalf("line with the count: %+v, %q", b, reason)
	}
	over := strings.Replace(old, `"bytes_out":4`, `"bytes_out":4,"unanswered_msgs":3`, 1)
	if _, reason := parseBatch([]byte(over), true); !strings.Contains(reason, "unanswered_msgs") {
		t.Fatalf("unanswered beyond msgs: reason %q", reason)
	}
	negative := strings.Replace(old, `"bytes_out":4`, `"bytes_out":4,"unanswered_msgs":-1`, 1)
	if _, reason := parseBatch([]byte(negative), true); reason == "" {
		t.Fatal("a negative unanswered count was accepted")
	}
}

// Unanswered messages count against the monthly quota: they are within
// msgs, which is what the quota reads.
func TestUnansweredCountsAgainstTheMonthlyQuota(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, newQuotaPlan(t, pool, 100))
	clk := newClock(time.Now().UTC())
	m := newMeter(t, Config{Now: clk.Now})
	ctx := ctxT(t)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 40})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 60, Unanswered: 60})
	if err := m.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, pool, clk.Now)
	if err := q.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if b := q.PushBlock(cluster); b != limits.PushBlockedMonthly {
		t.Fatalf("40 answered and 60 unanswered of a 100 quota: PushBlock = %v, want blocked", b)
	}
}
