package meter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// crash is what the kernel does when the process dies: its files are
// closed, which releases their locks, and none of the meter's code runs.
func crash(m *Meter) {
	m.spool.mu.Lock()
	defer m.spool.mu.Unlock()
	for _, jf := range append([]*journalFile{m.spool.active}, m.spool.retired...) {
		if jf != nil {
			jf.f.Close()
		}
	}
}

// filesIn lists the directory's file names with the given suffix.
func filesIn(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// A crash loses what was recorded after the last checkpoint and nothing
// else; the next meter replays the journal at start, and the batch the old
// one had already written is not added again.
func TestCrashLosesOnlyWhatFollowedTheLastCheckpoint(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0.Add(10 * time.Second))
	a := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	ctx := ctxT(t)

	a.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 3, BytesIn: 30, BytesOut: 3})
	clk.Add(time.Minute)
	a.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 5, BytesIn: 50, BytesOut: 5})
	if err := a.checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The closed minute is written; the open one stays journaled.
	if err := a.FlushClosedMinutes(ctx); err != nil {
		t.Fatal(err)
	}
	if u := totals(t, pool, cluster, OpPush); u != (usage{1, 3, 30, 3}) {
		t.Fatalf("after the flush: %+v", u)
	}
	a.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 7, BytesIn: 70, BytesOut: 7})
	if err := a.checkpoint(); err != nil {
		t.Fatal(err)
	}
	a.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 100}) // after the last checkpoint: lost
	journals := filesIn(t, dir, journalSuffix)
	if len(journals) != 1 {
		t.Fatalf("journal files %v, want one", journals)
	}
	saved, err := os.ReadFile(filepath.Join(dir, journals[0]))
	if err != nil {
		t.Fatal(err)
	}
	crash(a)

	b := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := b.ReplaySpool(ctx); err != nil || n != 2 {
		t.Fatalf("replay after the crash = %d rows, %v; want the 2 journaled rows of the open minute", n, err)
	}
	if u := totals(t, pool, cluster, OpPush); u != (usage{3, 15, 150, 15}) {
		t.Fatalf("after the replay: %+v, want what was recorded up to the last checkpoint", u)
	}
	if left := filesIn(t, dir, ""); len(left) != 0 {
		t.Fatalf("spool directory after the replay: %v", left)
	}
	// The same journal found again (a crash between the replay's commit
	// and the file's removal) adds nothing.
	if err := os.WriteFile(filepath.Join(dir, journals[0]), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := c.ReplaySpool(ctx); err != nil || n != 0 {
		t.Fatalf("second replay of the journal = %d rows, %v; want 0", n, err)
	}
	if u := totals(t, pool, cluster, OpPush); u != (usage{3, 15, 150, 15}) {
		t.Fatalf("after the second replay: %+v", u)
	}
}

// Run journals on its own, every CheckpointEvery, whatever FlushEvery is; a
// batch the replay applied after the crash is a no-op when the old meter
// writes it after all.
func TestRunJournalsEveryCheckpoint(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0)
	a := newMeter(t, Config{Now: clk.Now, SpoolDir: dir, FlushEvery: time.Hour, CheckpointEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		a.Run(ctx)
		close(done)
	}()
	a.Record(Sample{ClusterID: cluster, Op: OpTxn, Reqs: 1, Msgs: 4, BytesIn: 40})
	deadline := time.Now().Add(10 * time.Second)
	for a.heldRows.Load() != 1 || a.pending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sample was not journaled: %+v", a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	crash(a)

	b := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := b.ReplaySpool(ctxT(t)); err != nil || n != 1 {
		t.Fatalf("replay = %d rows, %v; want 1", n, err)
	}
	if u := totals(t, pool, cluster, OpTxn); u != (usage{1, 4, 40, 0}) {
		t.Fatalf("after the replay: %+v", u)
	}
	cancel() // the old meter drains the batch it still holds: already applied
	<-done
	if u := totals(t, pool, cluster, OpTxn); u != (usage{1, 4, 40, 0}) {
		t.Fatalf("after the old meter's drain: %+v, want no double count", u)
	}
}

// A clean stop writes everything and leaves no journal behind, so a later
// start replays nothing.
func TestCleanStopLeavesNoJournal(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0.Add(30 * time.Second))
	m := newMeter(t, Config{Now: clk.Now, SpoolDir: dir, FlushEvery: time.Hour, CheckpointEvery: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	for i := 0; i < 50; i++ {
		m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2})
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if left := filesIn(t, dir, ""); len(left) != 0 {
		t.Fatalf("spool directory after a clean stop: %v", left)
	}
	if u := totals(t, pool, cluster, OpPush); u != (usage{50, 100, 0, 0}) {
		t.Fatalf("after the stop: %+v", u)
	}
	again := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := again.ReplaySpool(ctxT(t)); err != nil || n != 0 {
		t.Fatalf("replay after a clean stop = %d, %v", n, err)
	}
}

// What is journaled but not written yet is still shown as unflushed, merged
// with what was recorded since, and leaves Unflushed when it is written.
func TestUnflushedIncludesTheJournal(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	clk := newClock(t0.Add(5 * time.Second))
	m := newMeter(t, Config{Now: clk.Now})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 3})
	if err := m.checkpoint(); err != nil {
		t.Fatal(err)
	}
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 4})
	u := m.Unflushed(cluster)
	if len(u) != 1 || u[0].Minute != t0 || u[0].Reqs != 2 || u[0].Msgs != 7 {
		t.Fatalf("unflushed = %+v, want one row of 2 requests and 7 messages", u)
	}
	if st := m.Stats(); st.Pending != 2 {
		t.Fatalf("pending = %d, want the journaled row and the recorded one", st.Pending)
	}
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if u := m.Unflushed(cluster); len(u) != 0 {
		t.Fatalf("unflushed after the flush = %+v", u)
	}
	if got := totals(t, pool, cluster, OpPush); got != (usage{2, 7, 0, 0}) {
		t.Fatalf("totals = %+v", got)
	}
}

// A failed write hands the journal to the spool: the file becomes a spool
// file, memory is freed, and the replay adds it once.
func TestFailedWriteHandsTheJournalToTheSpool(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	proxy := newFlakyProxy(t)
	proxy.set(proxyDown)
	dir := t.TempDir()
	clk := newClock(t0)
	m := newMeter(t, Config{Pool: proxy.pool(t), Now: clk.Now, SpoolDir: dir})
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2})
	if err := m.checkpoint(); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 3}) // the open minute
	if err := m.FlushClosedMinutes(ctxT(t)); err == nil {
		t.Fatal("flush succeeded with the database down")
	}
	if j, s := filesIn(t, dir, journalSuffix), filesIn(t, dir, spoolSuffix); len(j) != 0 || len(s) != 1 {
		t.Fatalf("journal files %v, spool files %v; want the journal renamed to one spool file", j, s)
	}
	if st := m.Stats(); st.Pending != 0 || st.SpooledRows != 2 || st.SpoolFiles != 1 {
		t.Fatalf("stats = %+v", st)
	}
	proxy.set(proxyUp)
	if n, err := m.ReplaySpool(ctxT(t)); err != nil || n != 2 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	if u := totals(t, direct, cluster, OpPush); u != (usage{2, 5, 0, 0}) {
		t.Fatalf("totals = %+v", u)
	}
}

// A full journal file whose batches are not all written stays locked: a
// replay by another meter (a reload) cannot take it while its batches are
// still this meter's.
func TestRotatedJournalStaysLockedUntilWritten(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0)
	m := newMeter(t, Config{Now: clk.Now, SpoolDir: dir, SpoolRotateBytes: 1})
	for i := 0; i < 3; i++ { // three checkpoints, three files
		m.Record(Sample{ClusterID: cluster, Op: OpRead, Reqs: 1})
		if err := m.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if j := filesIn(t, dir, journalSuffix); len(j) != 3 {
		t.Fatalf("journal files %v, want 3", j)
	}
	other := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})
	if n, err := other.ReplaySpool(ctxT(t)); err != nil || n != 0 {
		t.Fatalf("another meter replayed %d rows of a live journal, %v", n, err)
	}
	clk.Add(time.Minute)
	if err := m.FlushClosedMinutes(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if left := filesIn(t, dir, ""); len(left) != 0 {
		t.Fatalf("files left once everything was written: %v", left)
	}
	if u := totals(t, pool, cluster, OpRead); u.Reqs != 3 {
		t.Fatalf("totals = %+v", u)
	}
}

// A crashed process's journal whose last append was cut short (power loss
// mid-write) is replayed without that piece and deleted, not quarantined:
// the torn append had not returned, so its usage was never durable.
func TestCrashedJournalWithTornTailIsReplayed(t *testing.T) {
	direct := db(t)
	cluster := newCluster(t, direct, "free")
	dir := t.TempDir()
	line := `{"batch":"j-` + randHex(8) + `","created_ms":1,"rows":[{"cluster_id":"` + cluster +
		`","minute":` + itoa(minuteOf(t0)) + `,"op":"push","reqs":1,"msgs":6,"bytes_in":0,"bytes_out":0}]}` + "\n"
	torn := `{"batch":"j-` + randHex(8) + `","created_ms":1,"rows":[{"cluster_id":"` + cluster + `","min`
	name := "meter-0000000000001-00000001" + journalSuffix
	if err := os.WriteFile(filepath.Join(dir, name), []byte(line+torn), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newMeter(t, Config{SpoolDir: dir})
	if n, err := m.ReplaySpool(ctxT(t)); err != nil || n != 1 {
		t.Fatalf("replay = %d, %v; want the 1 whole batch", n, err)
	}
	if left := filesIn(t, dir, ""); len(left) != 0 {
		t.Fatalf("spool directory after the replay: %v", left)
	}
	if u := totals(t, direct, cluster, OpPush); u.Msgs != 6 {
		t.Fatalf("totals = %+v", u)
	}
}
