package meter

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// t0 is a fixed minute start for the tests' clocks.
var t0 = time.Date(2031, 3, 14, 9, 26, 0, 0, time.UTC)

func TestRecordAggregatesPerClusterOpMinute(t *testing.T) {
	clk := newClock(t0.Add(5 * time.Second))
	m := newMeter(t, Config{Now: clk.Now})
	a, b := "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	m.Record(Sample{ClusterID: a, Op: OpPush, Reqs: 1, Msgs: 3, BytesIn: 10, BytesOut: 5})
	m.Record(Sample{ClusterID: a, Op: OpPush, Reqs: 1, Msgs: 2, BytesIn: 7, BytesOut: 1})
	m.Record(Sample{ClusterID: a, Op: OpDelivery, Reqs: 1, Msgs: 4})
	m.Record(Sample{ClusterID: b, Op: OpPush, Reqs: 1, Msgs: -9, BytesIn: -1}) // negative counts are 0
	m.Record(Sample{ClusterID: "", Op: OpPush, Reqs: 1})                       // no cluster: ignored
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: a, Op: OpPush, Reqs: 1, Msgs: 1})
	if got := m.Stats().Pending; got != 4 {
		t.Fatalf("Pending = %d, want 4", got)
	}
	rows := m.take(minuteOf(clk.Now()), false)
	got := map[string]row{}
	for _, r := range rows {
		got[r.ClusterID[:1]+string(r.Op)] = r
	}
	min := minuteOf(t0)
	want := map[string]row{
		"1push":     {ClusterID: a, Minute: min, Op: OpPush, Reqs: 2, Msgs: 5, BytesIn: 17, BytesOut: 6},
		"1delivery": {ClusterID: a, Minute: min, Op: OpDelivery, Reqs: 1, Msgs: 4},
		"2push":     {ClusterID: b, Minute: min, Op: OpPush, Reqs: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("closed rows = %+v", rows)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
	if got := m.Stats().Pending; got != 1 {
		t.Fatalf("Pending after taking closed minutes = %d, want 1 (the open minute)", got)
	}
}

func TestRecordDoesNotAllocateOnAnExistingKey(t *testing.T) {
	m := newMeter(t, Config{})
	s := Sample{ClusterID: "11111111-1111-1111-1111-111111111111", Op: OpPush, Reqs: 1, Msgs: 1, BytesIn: 100, BytesOut: 50}
	m.Record(s)
	if n := testing.AllocsPerRun(1000, func() { m.Record(s) }); n != 0 {
		t.Fatalf("Record allocates %.1f times per call on an existing key", n)
	}
}

func TestRecordConcurrent(t *testing.T) {
	clk := newClock(t0)
	m := newMeter(t, Config{Now: clk.Now})
	ids := []string{"11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222", "33333333-3333-3333-3333-333333333333"}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				m.Record(Sample{ClusterID: ids[i%3], Op: OpPush, Reqs: 1, Msgs: 2})
			}
		}()
	}
	wg.Wait()
	var reqs, msgs int64
	for _, r := range m.take(0, true) {
		reqs += r.Reqs
		msgs += r.Msgs
	}
	if reqs != 8000 || msgs != 16000 {
		t.Fatalf("reqs %d msgs %d, want 8000 16000", reqs, msgs)
	}
}

// Two flushes of the same minute add up in usage_minutes; the open minute
// stays in memory.
func TestFlushAdditiveUpsertAcrossTwoFlushes(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	clk := newClock(t0.Add(10 * time.Second))
	m := newMeter(t, Config{Now: clk.Now})
	ctx := ctxT(t)

	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 3, BytesIn: 100, BytesOut: 40})
	if err := m.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := minuteRow(t, pool, cluster, t0, OpPush); ok {
		t.Fatal("the open minute was flushed")
	}
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1}) // next minute, still open
	if err := m.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err)
	}
	if u, ok := minuteRow(t, pool, cluster, t0, OpPush); !ok || u != (usage{1, 3, 100, 40}) {
		t.Fatalf("after the first flush: %+v %v", u, ok)
	}
	// A sample of the closed minute that arrives late (its minute was read
	// before the boundary) is added by the next flush, not lost or doubled.
	clk.Set(t0.Add(59 * time.Second))
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 2, Msgs: 5, BytesIn: 20, BytesOut: 2})
	clk.Set(t0.Add(61 * time.Second))
	if err := m.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err)
	}
	if u, ok := minuteRow(t, pool, cluster, t0, OpPush); !ok || u != (usage{3, 8, 120, 42}) {
		t.Fatalf("after the second flush of the minute: %+v %v", u, ok)
	}
	if _, ok := minuteRow(t, pool, cluster, t0.Add(time.Minute), OpPush); ok {
		t.Fatal("the open minute was flushed")
	}
	if err := m.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if u, ok := minuteRow(t, pool, cluster, t0.Add(time.Minute), OpPush); !ok || u != (usage{1, 1, 0, 0}) {
		t.Fatalf("drained open minute: %+v %v", u, ok)
	}
	st := m.Stats()
	if st.FlushOK != 3 || st.FlushFailed != 0 || st.Pending != 0 || st.SpoolFiles != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// Rows of a cluster deleted meanwhile, and rows that can never be stored,
// do not block the others.
func TestFlushSkipsDeletedClustersAndBadRows(t *testing.T) {
	pool := db(t)
	keep := newCluster(t, pool, "free")
	gone := newCluster(t, pool, "free")
	clk := newClock(t0)
	m := newMeter(t, Config{Now: clk.Now})
	m.Record(Sample{ClusterID: keep, Op: OpRead, Reqs: 1})
	m.Record(Sample{ClusterID: gone, Op: OpRead, Reqs: 1})
	m.Record(Sample{ClusterID: "not-a-uuid", Op: OpRead, Reqs: 1})
	m.Record(Sample{ClusterID: keep, Op: Op("bogus"), Reqs: 1})
	exec(t, pool, "DELETE FROM queen_proxy.clusters WHERE id = $1", gone)
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if u := totals(t, pool, keep, OpRead); u.Reqs != 1 {
		t.Fatalf("kept cluster: %+v", u)
	}
	if st := m.Stats(); st.SpoolFiles != 0 || st.Pending != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// The database goes away: the rows go to the spool, never lost; when it
// answers again the spool is replayed exactly once.
func TestDatabaseDownSpoolsThenReplaysOnce(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	clk := newClock(t0)
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now})
	ctx := ctxT(t)

	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 7, BytesIn: 70, BytesOut: 7})
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err) // the database is up: establishes a pooled connection
	}
	proxy.set(proxyDown)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 2, Msgs: 5, BytesIn: 50, BytesOut: 5})
	m.Record(Sample{ClusterID: cluster, Op: OpDelivery, Reqs: 1, Msgs: 4, BytesOut: 400})
	clk.Add(time.Minute)
	err := m.FlushClosedMinutes(ctx)
	if err == nil || !strings.Contains(err.Error(), "spooled") {
		t.Fatalf("flush with the database down: %v", err)
	}
	st := m.Stats()
	if st.FlushFailed != 1 || st.SpooledRows != 2 || st.SpoolFiles != 1 || st.Pending != 0 || st.CircuitOpen {
		t.Fatalf("stats after the failed flush = %+v", st)
	}
	if u := totals(t, direct, cluster, OpPush); u != (usage{1, 7, 70, 7}) {
		t.Fatalf("push totals while down = %+v", u)
	}
	// Replay while still down fails and keeps the file.
	if _, err := m.ReplaySpool(ctx); err == nil {
		t.Fatal("replay succeeded with the database down")
	}
	if st := m.Stats(); st.SpoolFiles != 1 {
		t.Fatalf("spool files after a failed replay = %d", st.SpoolFiles)
	}

	proxy.set(proxyUp)
	n, err := m.ReplaySpool(ctx)
	if err != nil || n != 2 {
		t.Fatalf("replay = %d, %v; want 2 rows", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u != (usage{3, 12, 120, 12}) {
		t.Fatalf("push totals after replay = %+v", u)
	}
	if u := totals(t, direct, cluster, OpDelivery); u != (usage{1, 4, 0, 400}) {
		t.Fatalf("delivery totals after replay = %+v", u)
	}
	if n, err := m.ReplaySpool(ctx); err != nil || n != 0 {
		t.Fatalf("second replay = %d, %v", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u != (usage{3, 12, 120, 12}) {
		t.Fatalf("push totals after a second replay = %+v", u)
	}
	if st := m.Stats(); st.SpoolFiles != 0 || st.ReplayedRows != 2 {
		t.Fatalf("stats after replay = %+v", st)
	}
}

// Three consecutive failures open the circuit: the database is not tried
// during the cool-down (rows go straight to the spool), then a probe that
// succeeds closes it and the spool drains.
func TestCircuitBreakerSpoolsWithoutTrying(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	clk := newClock(t0)
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now})
	ctx := ctxT(t)

	for i := 0; i < 3; i++ {
		m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1})
		clk.Add(time.Minute)
		if err := m.FlushClosedMinutes(ctx); err == nil {
			t.Fatal("flush succeeded with the database down")
		}
	}
	st := m.Stats()
	if !st.CircuitOpen || st.FlushFailed != 3 {
		t.Fatalf("after 3 failures: %+v", st)
	}
	proxy.set(proxyUp) // the database is back, but the circuit is cooling down
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1})
	clk.Add(breakerBaseCooldown - time.Second)
	err := m.Drain(ctx)
	if !errIs(err, ErrCircuitOpen) {
		t.Fatalf("flush during the cool-down: %v", err)
	}
	if st := m.Stats(); st.FlushFailed != 3 || st.SpooledRows != 4 {
		t.Fatalf("the database was tried during the cool-down: %+v", st)
	}
	if _, err := m.ReplaySpool(ctx); !errIs(err, ErrCircuitOpen) {
		t.Fatalf("replay during the cool-down: %v", err)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 0 {
		t.Fatalf("rows reached the database during the cool-down: %+v", u)
	}
	clk.Add(time.Second)
	n, err := m.ReplaySpool(ctx)
	if err != nil || n != 4 {
		t.Fatalf("replay after the cool-down = %d, %v", n, err)
	}
	if st := m.Stats(); st.CircuitOpen || st.SpoolFiles != 0 {
		t.Fatalf("after a successful probe: %+v", st)
	}
	if u := totals(t, direct, cluster, OpPush); u != (usage{4, 4, 0, 0}) {
		t.Fatalf("totals = %+v, want 4 requests and messages", u)
	}
}

func TestBreakerCooldownDoubles(t *testing.T) {
	b := newBreaker()
	now := t0
	for i := 0; i < breakerTrip-1; i++ {
		if opened, _ := b.failure(now); opened {
			t.Fatalf("opened after %d failures", i+1)
		}
	}
	if opened, d := b.failure(now); !opened || d != 30*time.Second {
		t.Fatalf("third failure: opened %v for %v", opened, d)
	}
	want := []time.Duration{60 * time.Second, 120 * time.Second, 240 * time.Second, 5 * time.Minute, 5 * time.Minute}
	cool := 30 * time.Second
	for _, w := range want {
		if b.allow(now.Add(cool - time.Second)) {
			t.Fatalf("allowed before the %v cool-down ended", cool)
		}
		now = now.Add(cool)
		if !b.allow(now) {
			t.Fatalf("probe not allowed after %v", cool)
		}
		if opened, d := b.failure(now); !opened || d != w {
			t.Fatalf("failed probe: opened %v for %v, want %v", opened, d, w)
		}
		// A second failure of the same probe round does not double again.
		if opened, _ := b.failure(now); opened {
			t.Fatal("a second failure in the same cool-down re-opened the breaker")
		}
		cool = w
	}
	if !b.success() || b.isOpen() || b.cooldown != breakerBaseCooldown {
		t.Fatal("success did not close and reset the breaker")
	}
}

// A crash after a file's batches were committed but before the file was
// deleted: the next replay finds the batch ids recorded and adds nothing.
func TestReplayAfterCrashMidReplayDoesNotDoubleCount(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	clk := newClock(t0)
	dir := t.TempDir()
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir, SpoolRotateBytes: 1})
	ctx := ctxT(t)
	for i := 1; i <= 3; i++ { // three files (rotation at 1 byte)
		m.Record(Sample{ClusterID: cluster, Op: OpTxn, Reqs: 1, Msgs: int64(i)})
		clk.Add(time.Minute)
		_ = m.FlushClosedMinutes(ctx)
	}
	if err := m.spool.seal(); err != nil {
		t.Fatal(err)
	}
	names, _ := m.spool.list()
	if len(names) != 3 {
		t.Fatalf("spool files = %v, want 3", names)
	}
	saved := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		saved[n] = b
	}
	proxy.set(proxyUp)
	// A new process replays everything...
	m2 := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	if n, err := m2.ReplaySpool(ctx); err != nil || n != 3 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	// ...and "crashes" before deleting two of the files.
	for _, n := range names[1:] {
		if err := os.WriteFile(filepath.Join(dir, n), saved[n], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m3 := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	if n, err := m3.ReplaySpool(ctx); err != nil || n != 0 {
		t.Fatalf("replay of already applied files = %d, %v; want 0 rows", n, err)
	}
	if u := totals(t, direct, cluster, OpTxn); u != (usage{3, 6, 0, 0}) {
		t.Fatalf("totals = %+v, want 3 requests and 6 messages once", u)
	}
	if st := m3.Stats(); st.SpoolFiles != 0 {
		t.Fatalf("applied files were not deleted: %+v", st)
	}
}

// A corrupt line quarantines its file (renamed *.bad, its readable batches
// applied) and does not stop the other files.
func TestCorruptSpoolLineQuarantined(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	dir := t.TempDir()
	line := func(id string, msgs int) string {
		return `{"batch":"` + id + `","created_ms":1,"rows":[{"cluster_id":"` + cluster +
			`","minute":` + itoa(minuteOf(t0)) + `,"op":"push","reqs":1,"msgs":` + itoa(int64(msgs)) + `,"bytes_in":0,"bytes_out":0}]}` + "\n"
	}
	files := map[string]string{
		"meter-0000000000001-00000001.jsonl": line("b1-"+randHex(4), 1) + "this is not json\n" + line("b2-"+randHex(4), 2),
		"meter-0000000000002-00000001.jsonl": line("b3-"+randHex(4), 4),
		"meter-0000000000003-00000001.jsonl": line("b4-"+randHex(4), 8) + `{"batch":"b5","created_ms":1,"rows":[{"cluster_id":"` + cluster + `","minute":1,"op":"push","reqs":1`, // torn
		"meter-0000000000004-00000001.jsonl": `{"batch":"b6-` + randHex(4) + `","created_ms":1,"rows":[{"cluster_id":"nope","minute":5,"op":"push","reqs":1,"msgs":1,"bytes_in":0,"bytes_out":0}]}` + "\n",
		"meter-0000000000005-00000001.jsonl": "\n\n" + line("b7-"+randHex(4), 16) + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := newMeter(t, Config{SpoolDir: dir})
	n, err := m.ReplaySpool(ctxT(t))
	if err != nil || n != 5 {
		t.Fatalf("replay = %d, %v; want the 5 readable rows", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 1+2+4+8+16 {
		t.Fatalf("push msgs = %d, want 31", u.Msgs)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := "meter-0000000000001-00000001.jsonl.bad,meter-0000000000003-00000001.jsonl.bad,meter-0000000000004-00000001.jsonl.bad"
	if strings.Join(left, ",") != want {
		t.Fatalf("spool directory = %v, want %s", left, want)
	}
	if st := m.Stats(); st.QuarantinedFiles != 3 || st.SpoolFiles != 0 {
		t.Fatalf("stats = %+v", st)
	}
	// Feeding a quarantined file back adds nothing twice.
	bad := filepath.Join(dir, "meter-0000000000001-00000001.jsonl")
	if err := os.Rename(bad+".bad", bad); err != nil {
		t.Fatal(err)
	}
	if n, err := m.ReplaySpool(ctxT(t)); err != nil || n != 0 {
		t.Fatalf("re-fed file replay = %d, %v", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 31 {
		t.Fatalf("push msgs after re-feeding = %d, want 31", u.Msgs)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The spool rotates at SpoolRotateBytes; every file is replayed.
func TestSpoolRotation(t *testing.T) {
	direct := db(t)
	clusters := []string{newCluster(t, direct, "free"), newCluster(t, direct, "free"), newCluster(t, direct, "free")}
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	clk := newClock(t0)
	dir := t.TempDir()
	const rotate = 1024
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir, SpoolRotateBytes: rotate})
	ctx := ctxT(t)
	for i := 0; i < 20; i++ {
		for _, c := range clusters {
			m.Record(Sample{ClusterID: c, Op: OpPush, Reqs: 1, Msgs: 2, BytesIn: 3, BytesOut: 4})
		}
		clk.Add(time.Minute)
		_ = m.FlushClosedMinutes(ctx)
	}
	if err := m.spool.seal(); err != nil {
		t.Fatal(err)
	}
	names, _ := m.spool.list()
	if len(names) < 3 {
		t.Fatalf("%d spool files, want the spool rotated", len(names))
	}
	for _, n := range names {
		info, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		// A file is closed once it reached the limit: at most one line over it.
		if info.Size() > rotate+400 {
			t.Errorf("%s holds %d bytes, rotation at %d", n, info.Size(), rotate)
		}
	}
	if st := m.Stats(); st.SpoolFiles != len(names) || st.SpooledRows != 60 {
		t.Fatalf("stats = %+v", st)
	}
	proxy.set(proxyUp)
	clk.Add(time.Hour) // past any cool-down
	if n, err := m.ReplaySpool(ctx); err != nil || n != 60 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	for _, c := range clusters {
		if u := totals(t, direct, c, OpPush); u != (usage{20, 40, 60, 80}) {
			t.Errorf("cluster %s totals = %+v", c, u)
		}
	}
}

// Shutdown with a database that does not answer: Run returns within the
// drain budget and the rows, the open minute included, are on disk; a new
// meter over the same directory replays them at start.
func TestShutdownDrainBoundedAndSpoolSurvivesRestart(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	dir := t.TempDir()
	clk := newClock(t0.Add(30 * time.Second))
	const budget = time.Second
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir, FlushEvery: time.Hour, ShutdownDrain: budget})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	proxy.set(proxyHang)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 9, BytesIn: 90, BytesOut: 9}) // the open minute
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * budget):
		t.Fatal("Run did not return")
	}
	if took := time.Since(start); took > budget+500*time.Millisecond {
		t.Fatalf("shutdown drain took %v, budget %v", took, budget)
	}
	if st := m.Stats(); st.SpooledRows != 1 || st.SpoolFiles != 1 || st.Pending != 0 {
		t.Fatalf("stats after shutdown = %+v", st)
	}

	proxy.set(proxyUp)
	m2 := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir, FlushEvery: time.Hour})
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() {
		m2.Run(ctx2)
		close(done2)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for m2.Stats().SpoolFiles != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel2()
	<-done2
	if u := totals(t, direct, cluster, OpPush); u != (usage{1, 9, 90, 9}) {
		t.Fatalf("totals after the restart = %+v", u)
	}
	if st := m2.Stats(); st.SpoolFiles != 0 || st.ReplayedRows != 1 {
		t.Fatalf("stats of the new meter = %+v", st)
	}
}

// Run flushes closed minutes on its ticker and drains on shutdown.
func TestRunFlushesAndDrains(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	clk := newClock(t0)
	m := newMeter(t, Config{Now: clk.Now, FlushEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	m.Record(Sample{ClusterID: cluster, Op: OpConfigure, Reqs: 1})
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: cluster, Op: OpConfigure, Reqs: 1})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := minuteRow(t, pool, cluster, t0, OpConfigure); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ticker did not flush the closed minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := minuteRow(t, pool, cluster, t0.Add(time.Minute), OpConfigure); ok {
		t.Fatal("the open minute was flushed before shutdown")
	}
	cancel()
	<-done
	if u := totals(t, pool, cluster, OpConfigure); u.Reqs != 2 {
		t.Fatalf("after shutdown: %+v", u)
	}
}

// Two meters on one spool directory (a Caddy reload): replay never takes
// the file the other is still appending to.
func TestReplaySkipsAnotherWritersActiveFile(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	dir := t.TempDir()
	clk := newClock(t0)
	old := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	old.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1})
	clk.Add(time.Minute)
	_ = old.FlushClosedMinutes(ctxT(t)) // spooled; the old meter's file stays open

	fresh := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := fresh.ReplaySpool(ctxT(t)); err != nil || n != 0 {
		t.Fatalf("replay took the other meter's active file: %d, %v", n, err)
	}
	old.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 1})
	clk.Add(time.Minute)
	_ = old.FlushClosedMinutes(ctxT(t)) // appended to the same, still present file
	if err := old.spool.seal(); err != nil {
		t.Fatal(err)
	}
	if n, err := fresh.ReplaySpool(ctxT(t)); err != nil || n != 2 {
		t.Fatalf("replay after the other meter closed its file = %d, %v", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 2 {
		t.Fatalf("totals = %+v", u)
	}
}

// A spool write that fails keeps the batches in memory, and they reach the
// database later exactly once.
func TestSpoolFailureKeepsRowsInMemory(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	clk := newClock(t0)
	dir := filepath.Join(t.TempDir(), "spool")
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	if err := os.RemoveAll(dir); err != nil { // the spool directory vanishes
		t.Fatal(err)
	}
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 3})
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctxT(t)); err == nil || !strings.Contains(err.Error(), "kept in memory") {
		t.Fatalf("flush = %v", err)
	}
	if st := m.Stats(); st.Pending != 1 || st.SpooledRows != 0 {
		t.Fatalf("stats = %+v", st)
	}
	proxy.set(proxyUp)
	if err := m.FlushClosedMinutes(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 3 {
		t.Fatalf("totals = %+v", u)
	}
	if st := m.Stats(); st.Pending != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// With the real clock, Run keeps the current minute for Record and stops
// doing so when it returns.
func TestMinuteClock(t *testing.T) {
	m := newMeter(t, Config{FlushEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !m.coarseOn.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the minute clock did not start")
		}
		time.Sleep(time.Millisecond)
	}
	before := minuteOf(time.Now())
	got := m.minuteNow()
	after := minuteOf(time.Now())
	if got < before-1 || got > after {
		t.Fatalf("minute clock says %d, real minute %d..%d", got, before, after)
	}
	cancel()
	<-done
	if m.coarseOn.Load() {
		t.Fatal("the minute clock still runs after Run returned")
	}
}

// skewClock is the real clock plus an offset the test can move forward.
type skewClock struct{ offset atomic.Int64 }

func (c *skewClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// The fault scenario at package level: steady load, the database
// goes away, the gateway restarts during the outage, the database returns;
// once the spool has drained, usage_minutes holds exactly what was recorded.
func TestOutageWithRestartLosesAndDoublesNothing(t *testing.T) {
	direct := db(t)
	clusters := []string{newCluster(t, direct, "free"), newCluster(t, direct, "free"), newCluster(t, direct, "free")}
	proxy := newFlakyProxy(t)
	dir := t.TempDir()
	clk := &skewClock{}
	start := func() (*Meter, func()) {
		m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir,
			FlushEvery: 30 * time.Millisecond, ShutdownDrain: time.Second, FlushTimeout: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			m.Run(ctx)
			close(done)
		}()
		return m, func() { cancel(); <-done }
	}

	a, stopA := start()
	var current atomic.Pointer[Meter]
	current.Store(a)
	var sent [3]atomic.Int64
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				c := (g + i) % 3
				current.Load().Record(Sample{ClusterID: clusters[c], Op: OpPush, Reqs: 1, Msgs: 2})
				sent[c].Add(1)
				if i%50 == 0 {
					clk.offset.Add(int64(time.Second)) // minutes close quickly
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}

	time.Sleep(300 * time.Millisecond)
	proxy.set(proxyDown)
	time.Sleep(300 * time.Millisecond)
	b, stopB := start() // the restarted gateway takes the traffic
	current.Store(b)
	stopA() // the old one drains into the spool
	time.Sleep(300 * time.Millisecond)
	proxy.set(proxyUp)
	clk.offset.Add(int64(breakerMaxCooldown)) // past any cool-down
	time.Sleep(300 * time.Millisecond)
	close(stopLoad)
	wg.Wait()
	// Samples that reached the old meter after its shutdown drain are
	// drained late by it; then the new one replays whatever was spooled.
	deadline := time.Now().Add(30 * time.Second)
	time.Sleep(lateDrainDelay + 200*time.Millisecond)
	for (a.Stats().Pending > 0 || b.Stats().SpoolFiles > 0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopB()
	if st := b.Stats(); st.Pending != 0 || a.Stats().Pending != 0 {
		t.Fatalf("after the drain: %+v (old meter %+v)", st, a.Stats())
	}
	// On a loaded machine B's own shutdown drain can miss its budget and
	// spool; that is not a loss as long as the next start replays it, so
	// the next start is part of the scenario.
	if b.Stats().SpoolFiles != 0 {
		t.Logf("B's shutdown spooled (%+v); a third start replays it", b.Stats())
		c, stopC := start()
		for c.Stats().SpoolFiles > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		stopC()
		if st := c.Stats(); st.SpoolFiles != 0 || st.Pending != 0 {
			t.Fatalf("after the third start's replay: %+v", st)
		}
	}
	if a.Stats().SpooledRows == 0 && b.Stats().SpooledRows == 0 {
		t.Fatal("nothing was spooled: the outage was not exercised")
	}
	for i, c := range clusters {
		n := sent[i].Load()
		if u := totals(t, direct, c, OpPush); u.Reqs != n || u.Msgs != 2*n {
			t.Errorf("cluster %d: usage_minutes %+v, recorded %d requests", i, u, n)
		}
	}
	t.Logf("recorded %d/%d/%d requests; meter A spooled %d rows, B spooled %d and replayed %d",
		sent[0].Load(), sent[1].Load(), sent[2].Load(), a.Stats().SpooledRows, b.Stats().SpooledRows, b.Stats().ReplayedRows)
}

// A request still in flight when Run finished (a reload) records into the
// old meter: the sample is drained about a second later, not lost.
func TestLateRecordAfterRunIsDrained(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	m := newMeter(t, Config{FlushEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	cancel()
	<-done
	m.Record(Sample{ClusterID: cluster, Op: OpRead, Reqs: 1, BytesOut: 10})
	m.Record(Sample{ClusterID: cluster, Op: OpRead, Reqs: 1, BytesOut: 10})
	deadline := time.Now().Add(20 * time.Second)
	for totals(t, pool, cluster, OpRead).Reqs != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("late samples not drained: %+v", m.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := m.Stats(); st.Pending != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// The load figure: 1,000 requests/s across 100 clusters costs one
// database statement per minute (the closed minute's upsert); the other
// 15-second ticks write nothing.
func TestStatementsPerMinuteAtLoad(t *testing.T) {
	pool := db(t)
	clusters := make([]string, 100)
	for i := range clusters {
		clusters[i] = newCluster(t, pool, "free")
	}
	clk := newClock(t0)
	m := newMeter(t, Config{Now: clk.Now})
	ctx := ctxT(t)
	ops := []Op{OpPush, OpDelivery, OpRead}
	const minutes = 3
	var flushTime time.Duration
	for sec := 0; sec < minutes*60; sec++ {
		for r := 0; r < 1000; r++ {
			m.Record(Sample{ClusterID: clusters[r%100], Op: ops[r%3], Reqs: 1, Msgs: 1, BytesIn: 100, BytesOut: 100})
		}
		clk.Add(time.Second)
		if sec%15 == 14 {
			start := time.Now()
			if err := m.FlushClosedMinutes(ctx); err != nil {
				t.Fatal(err)
			}
			flushTime += time.Since(start)
		}
	}
	st := m.Stats()
	// Of the four ticks of a minute, only the first after the minute closed
	// writes.
	if st.FlushOK != minutes {
		t.Fatalf("%d statements for %d minutes", st.FlushOK, minutes)
	}
	// Every cluster saw all three classes in every minute: 100 x 3 rows a
	// minute, each request counted once.
	var rows, reqs, msgs, in, out int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(reqs), 0)::bigint, coalesce(sum(msgs), 0)::bigint,
		coalesce(sum(bytes_in), 0)::bigint, coalesce(sum(bytes_out), 0)::bigint
		FROM queen_proxy.usage_minutes WHERE cluster_id = ANY($1::uuid[]) AND minute >= $2 AND minute < $3`,
		clusters, t0, t0.Add(minutes*time.Minute)).Scan(&rows, &reqs, &msgs, &in, &out); err != nil {
		t.Fatal(err)
	}
	const requests = minutes * 60 * 1000
	if rows != minutes*100*3 || reqs != requests || msgs != requests || in != requests*100 || out != requests*100 {
		t.Fatalf("usage_minutes: %d rows, %d requests, %d messages, %d/%d bytes; want %d rows, %d requests and messages, %d bytes each way",
			rows, reqs, msgs, in, out, minutes*100*3, requests, requests*100)
	}
	if st.Pending != 0 {
		t.Fatalf("%d aggregates pending after the last minute was written", st.Pending)
	}
	t.Logf("%d requests over %d minutes for 100 clusters: %d flush statements (%d usage rows), %v total flush time",
		requests, minutes, st.FlushOK, rows, flushTime)
}

func TestDatabaseAnswersReplaysAtOnce(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	clk := newClock(t0)
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now})
	ctx := ctxT(t)
	for i := 0; i < 3; i++ {
		m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2})
		clk.Add(time.Minute)
		_ = m.FlushClosedMinutes(ctx)
	}
	if st := m.Stats(); !st.CircuitOpen || st.SpooledRows != 3 {
		t.Fatalf("after 3 failures: %+v", st)
	}
	proxy.set(proxyUp)
	m.DatabaseAnswers(ctx) // within the cool-down: told, not waiting for it
	if st := m.Stats(); st.CircuitOpen || st.SpoolFiles != 0 || st.ReplayedRows != 3 {
		t.Fatalf("after DatabaseAnswers: %+v", st)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 6 || u.Reqs != 3 {
		t.Fatalf("totals %+v, want 3 requests and 6 messages", u)
	}
}
