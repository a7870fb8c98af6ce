package limits

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memStore is an in-memory AdmissionStore that counts its statements.
type memStore struct {
	mu          sync.Mutex
	rows        map[admKey]int
	loads       int
	persists    int
	sweeps      int
	persisted   []QueueRow // the last batch
	failLoad    error
	failPersist error
	loadGate    chan struct{} // when set, LoadQueues waits for it
}

func newMemStore() *memStore { return &memStore{rows: map[admKey]int{}} }

func (s *memStore) LoadQueues(ctx context.Context, clusterID string) ([]QueueRow, error) {
	s.mu.Lock()
	s.loads++
	gate, fail := s.loadGate, s.failLoad
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []QueueRow
	for k, n := range s.rows {
		if k.cluster == clusterID {
			out = append(out, QueueRow{ClusterID: k.cluster, Name: k.queue, Partitions: n})
		}
	}
	return out, nil
}

func (s *memStore) PersistQueues(_ context.Context, rows []QueueRow) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.persists++
	if s.failPersist != nil {
		return s.failPersist
	}
	s.persisted = append([]QueueRow(nil), rows...)
	for _, r := range rows {
		k := admKey{r.ClusterID, r.Name}
		s.rows[k] = max(s.rows[k], r.Partitions)
	}
	return nil
}

func (s *memStore) SweepQueues(_ context.Context, clusterID string, live []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweeps++
	keep := map[string]bool{}
	for _, n := range live {
		keep[n] = true
	}
	for k := range s.rows {
		if k.cluster == clusterID && !keep[k.queue] {
			delete(s.rows, k)
		}
	}
	return nil
}

func (s *memStore) row(cluster, queue string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.rows[admKey{cluster, queue}]
	return n, ok
}

func (s *memStore) counts() (loads, persists, sweeps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads, s.persists, s.sweeps
}

const (
	clA = "11111111-1111-4111-8111-111111111111"
	clB = "22222222-2222-4222-8222-222222222222"
)

func capsQP(queues, partitions Cap) Effective {
	lim := AllUnlimited()
	lim.MaxQueues, lim.MaxPartitionsPerQueue = queues, partitions
	return lim
}

func admitT(t *testing.T, a *Admission, cluster string, lim Effective, qp ...string) (AdmitResult, Cap) {
	t.Helper()
	res, capHit, err := a.Admit(context.Background(), cluster, pairs(qp...), lim)
	if err != nil {
		t.Fatalf("Admit %v: %v", qp, err)
	}
	return res, capHit
}

func wantAdmit(t *testing.T, a *Admission, cluster string, lim Effective, want AdmitResult, qp ...string) {
	t.Helper()
	got, capHit := admitT(t, a, cluster, lim, qp...)
	if got != want {
		t.Fatalf("Admit %v = %v (cap %d), want %v", qp, got, capHit, want)
	}
	switch want {
	case OverQueues:
		if capHit != lim.MaxQueues {
			t.Fatalf("Admit %v: cap %d, want %d", qp, capHit, lim.MaxQueues)
		}
	case OverPartitions:
		if capHit != lim.MaxPartitionsPerQueue {
			t.Fatalf("Admit %v: cap %d, want %d", qp, capHit, lim.MaxPartitionsPerQueue)
		}
	}
}

func TestAdmitQueueCap(t *testing.T) {
	a := NewAdmission(newMemStore())
	lim := capsQP(2, Unlimited)
	wantAdmit(t, a, clA, lim, Admitted, "q1", "Default")
	wantAdmit(t, a, clA, lim, Admitted, "q2", "p")
	wantAdmit(t, a, clA, lim, OverQueues, "q3", "Default")
	// Existing queues still take new partitions and known pairs.
	wantAdmit(t, a, clA, lim, Admitted, "q1", "p9", "q2", "p")
	// Another cluster has its own count.
	wantAdmit(t, a, clB, lim, Admitted, "q3", "Default")
	// Two new queues in one request when only one fits: neither is
	// recorded.
	b := NewAdmission(newMemStore())
	wantAdmit(t, b, clA, lim, Admitted, "q1", "x")
	wantAdmit(t, b, clA, lim, OverQueues, "q2", "x", "q3", "x")
	wantAdmit(t, b, clA, lim, Admitted, "q3", "x")
}

func TestAdmitPartitionsExactlyAtCap(t *testing.T) {
	// A plan of 3 partitions per queue allows 3 named partitions; the Default partition (which /configure creates) does not
	// use one of them.
	a := NewAdmission(newMemStore())
	lim := capsQP(Unlimited, 3)
	wantAdmit(t, a, clA, lim, Admitted, "q", "Default") // /configure
	wantAdmit(t, a, clA, lim, Admitted, "q", "p1")
	wantAdmit(t, a, clA, lim, Admitted, "q", "p2", "q", "p3")
	wantAdmit(t, a, clA, lim, OverPartitions, "q", "p4")
	// Known pairs always pass; Default too.
	wantAdmit(t, a, clA, lim, Admitted, "q", "p1", "q", "p2", "q", "p3", "q", "Default")

	// All or nothing: a request whose second new partition is over the cap
	// records neither.
	b := NewAdmission(newMemStore())
	wantAdmit(t, b, clA, lim, Admitted, "q", "p1", "q", "p2")
	wantAdmit(t, b, clA, lim, OverPartitions, "q", "p3", "q", "p4", "other", "Default")
	wantAdmit(t, b, clA, lim, Admitted, "q", "p4")
	wantAdmit(t, b, clA, lim, OverPartitions, "q", "p3")
	if _, capHit := admitT(t, b, clA, capsQP(1, Unlimited), "other", "Default"); capHit != 1 {
		t.Fatalf("queue refusal cap %d", capHit)
	}

	// Default alone on a new queue is free, then N named ones fit.
	c := NewAdmission(newMemStore())
	lim1 := capsQP(Unlimited, 1)
	wantAdmit(t, c, clA, lim1, Admitted, "q", "Default", "q", "only")
	wantAdmit(t, c, clA, lim1, OverPartitions, "q", "second")
}

func TestAdmitCapLoweredKeepsAdmittedPairs(t *testing.T) {
	a := NewAdmission(newMemStore())
	wantAdmit(t, a, clA, capsQP(5, 5), Admitted, "q", "p1", "q", "p2", "q", "p3", "r", "x")
	low := capsQP(1, 1)
	wantAdmit(t, a, clA, low, Admitted, "q", "p1", "q", "p2", "r", "x")
	wantAdmit(t, a, clA, low, OverPartitions, "q", "p4")
	wantAdmit(t, a, clA, low, OverQueues, "s", "Default")
}

func TestAdmitEmptyAndUnlimited(t *testing.T) {
	st := newMemStore()
	a := NewAdmission(st)
	wantAdmit(t, a, clA, AllUnlimited(), Admitted)
	if loads, _, _ := st.counts(); loads != 0 {
		t.Fatalf("an empty request loaded the cluster")
	}
	for i := 0; i < 100; i++ {
		wantAdmit(t, a, clA, AllUnlimited(), Admitted, fmt.Sprintf("q%d", i), fmt.Sprintf("p%d", i))
	}
}

func TestAdmissionCoalescesRows(t *testing.T) {
	// limits-meter §7.3: 50 partitions of one queue make one pending row
	// with count 50, written by one statement.
	st := newMemStore()
	a := NewAdmission(st)
	for i := 0; i < 50; i++ {
		wantAdmit(t, a, clA, AllUnlimited(), Admitted, "q", fmt.Sprintf("p%d", i))
	}
	if n := a.Pending(); n != 1 {
		t.Fatalf("pending rows = %d, want 1", n)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, persists, _ := st.counts(); persists != 1 {
		t.Fatalf("persist statements = %d, want 1", persists)
	}
	if n, _ := st.row(clA, "q"); n != 50 {
		t.Fatalf("persisted count = %d, want 50", n)
	}
	// Nothing new: a flush writes nothing.
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, persists, _ := st.counts(); persists != 1 {
		t.Fatalf("an empty flush wrote")
	}
}

func TestAdmissionFailedFlushKeepsRows(t *testing.T) {
	st := newMemStore()
	a := NewAdmission(st)
	wantAdmit(t, a, clA, AllUnlimited(), Admitted, "q", "p1", "r", "Default")
	st.failPersist = errors.New("database down")
	if err := a.Flush(context.Background()); err == nil {
		t.Fatal("flush did not report the failure")
	}
	if n := a.Pending(); n != 2 {
		t.Fatalf("pending after a failed flush = %d, want 2", n)
	}
	// More admissions merge with the kept rows (highest count wins).
	wantAdmit(t, a, clA, AllUnlimited(), Admitted, "q", "p2")
	st.failPersist = nil
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.row(clA, "q"); n != 2 {
		t.Fatalf("q count = %d, want 2", n)
	}
	if n, ok := st.row(clA, "r"); !ok || n != 0 {
		t.Fatalf("r = %d %v, want a row with 0", n, ok)
	}
	if a.Pending() != 0 {
		t.Fatal("rows left after a good flush")
	}
}

func TestAdmissionUnpersistableRowsStayInMemory(t *testing.T) {
	st := newMemStore()
	a := NewAdmission(st)
	lim := capsQP(3, Unlimited)
	wantAdmit(t, a, "not-a-uuid", lim, Admitted, "q", "p")
	wantAdmit(t, a, clA, lim, Admitted, "", "Default", "   ", "x", "nul\x00", "x")
	wantAdmit(t, a, clA, lim, OverQueues, "fourth", "x") // still counted
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, persists, _ := st.counts(); persists != 0 {
		t.Fatalf("unstorable rows reached the store: %v", st.persisted)
	}
	if a.Pending() != 0 {
		t.Fatal("unstorable rows kept pending")
	}
}

func TestAdmissionRestartFromStore(t *testing.T) {
	// The memory-store version of the restart case (the database version is
	// in admissionstore_test.go): a queue at its cap keeps working on its
	// existing partitions after a restart, and a new one is refused.
	st := newMemStore()
	lim := capsQP(2, 3)
	a := NewAdmission(st)
	wantAdmit(t, a, clA, lim, Admitted, "q", "Default")
	wantAdmit(t, a, clA, lim, Admitted, "q", "p1", "q", "p2", "q", "p3")
	wantAdmit(t, a, clA, lim, Admitted, "r", "Default")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := NewAdmission(st)
	wantAdmit(t, b, clA, lim, OverQueues, "s", "Default")
	wantAdmit(t, b, clA, lim, Admitted, "q", "p2")
	wantAdmit(t, b, clA, lim, Admitted, "q", "Default", "q", "p1")
	wantAdmit(t, b, clA, lim, Admitted, "q", "p3")
	wantAdmit(t, b, clA, lim, OverPartitions, "q", "p4")
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.row(clA, "q"); n != 3 {
		t.Fatalf("count after restart = %d, want 3 (never inflated)", n)
	}
}

func TestAdmissionLoadsOnceConcurrently(t *testing.T) {
	st := newMemStore()
	st.rows[admKey{clA, "q"}] = 1
	st.loadGate = make(chan struct{})
	a := NewAdmission(st)
	lim := capsQP(10, 2)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, _, err := a.Admit(context.Background(), clA, pairs("q", fmt.Sprintf("p%d", i)), lim)
			if err != nil {
				t.Error(err)
			}
			if res == Admitted {
				admitted.Add(1)
			}
		}(i)
	}
	time.Sleep(50 * time.Millisecond)
	close(st.loadGate)
	wg.Wait()
	if loads, _, _ := st.counts(); loads != 1 {
		t.Fatalf("loads = %d, want 1", loads)
	}
	// The stored count 1 is one unnamed partition: the first name seen is
	// taken to be it, and one more fits under the cap of 2.
	if admitted.Load() != 2 {
		t.Fatalf("admitted = %d, want 2", admitted.Load())
	}
}

func TestAdmissionLoadFailureIsUnavailable(t *testing.T) {
	st := newMemStore()
	st.failLoad = errors.New("database down")
	a := NewAdmission(st)
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	res, _, err := a.Admit(context.Background(), clA, pairs("q", "p"), AllUnlimited())
	if res != Unavailable || err == nil {
		t.Fatalf("got %v, %v; want Unavailable with the error", res, err)
	}
	// Within the retry interval the failure is answered from memory.
	res, _, _ = a.Admit(context.Background(), clA, pairs("q", "p"), AllUnlimited())
	if loads, _, _ := st.counts(); res != Unavailable || loads != 1 {
		t.Fatalf("res %v loads %d; want Unavailable without a second query", res, loads)
	}
	st.failLoad = nil
	now = now.Add(admissionRetryAfter)
	if res, _ := admitT(t, a, clA, AllUnlimited(), "q", "p"); res != Admitted {
		t.Fatalf("after recovery: %v", res)
	}
	if a.Pending() != 1 {
		t.Fatal("nothing recorded after recovery")
	}
}

func TestAdmissionWaitHonoursContext(t *testing.T) {
	st := newMemStore()
	st.loadGate = make(chan struct{})
	defer close(st.loadGate)
	a := NewAdmission(st)
	go func() { _, _, _ = a.Admit(context.Background(), clA, pairs("q", "p"), AllUnlimited()) }()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res, _, err := a.Admit(ctx, clA, pairs("q", "p"), AllUnlimited())
	if res != Unavailable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, %v", res, err)
	}
}

func TestAdmissionInvalidateReloads(t *testing.T) {
	st := newMemStore()
	a := NewAdmission(st)
	lim := capsQP(2, Unlimited)
	wantAdmit(t, a, clA, lim, Admitted, "q1", "Default", "q2", "Default")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantAdmit(t, a, clA, lim, OverQueues, "q3", "Default")
	// The console deletes q1 (its row is gone) and notifies.
	st.mu.Lock()
	delete(st.rows, admKey{clA, "q1"})
	st.mu.Unlock()
	a.Invalidate(clA)
	wantAdmit(t, a, clA, lim, Admitted, "q3", "Default")
	if loads, _, _ := st.counts(); loads != 2 {
		t.Fatalf("loads = %d, want 2", loads)
	}
	// Unflushed rows survive an invalidation.
	wantAdmit(t, a, clA, capsQP(3, Unlimited), Admitted, "q4", "Default")
	a.Invalidate(clA)
	wantAdmit(t, a, clA, capsQP(3, Unlimited), OverQueues, "q5", "Default")
	a.Invalidate("unknown cluster") // harmless
}

func TestReconcileForgetsAndRaises(t *testing.T) {
	st := newMemStore()
	st.rows[admKey{clA, "old"}] = 2
	st.rows[admKey{clA, "gone"}] = 1
	a := NewAdmission(st)
	lim := capsQP(3, 4)
	wantAdmit(t, a, clA, lim, Admitted, "fresh", "Default")
	// The broker lists "old" with 4 partitions (Default may be one: the
	// floor is 3) and no "gone". "fresh" was admitted after the previous
	// reconcile (there was none), so it is kept though the listing lacks it.
	if n := a.Reconcile(clA, []QueueRow{{ClusterID: clA, Name: "old", Partitions: 4}}); n != 1 {
		t.Fatalf("forgotten = %d, want 1", n)
	}
	wantAdmit(t, a, clA, lim, Admitted, "another", "Default") // gone's slot is free
	wantAdmit(t, a, clA, lim, OverQueues, "more", "Default")
	// old: the 2 stored partitions are matched by the first two names; the
	// broker's count (3 certain) leaves no room under a cap of 3.
	lim3 := capsQP(3, 3)
	wantAdmit(t, a, clA, lim3, Admitted, "old", "a", "old", "b")
	wantAdmit(t, a, clA, lim3, OverPartitions, "old", "c")
	wantAdmit(t, a, clA, lim, Admitted, "old", "c")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.row(clA, "gone"); ok {
		t.Fatal("gone was not swept")
	}
	// Three names known, and the broker's certain count is 3: the stored
	// count is what is certain (a lower bound, never inflated).
	if n, _ := st.row(clA, "old"); n != 3 {
		t.Fatalf("old count = %d, want 3", n)
	}
	// A second pass without "fresh" forgets it now; "another" was admitted
	// after the first pass, so this pass's listing may predate its first
	// push: it is kept one more pass.
	if n := a.Reconcile(clA, []QueueRow{{ClusterID: clA, Name: "old", Partitions: 5}}); n != 1 {
		t.Fatalf("forgotten = %d, want 1", n)
	}
	// A confirmed empty inventory frees everything (limits-meter §7.3).
	if n := a.Reconcile(clA, nil); n != 2 {
		t.Fatalf("forgotten = %d, want 2", n)
	}
	wantAdmit(t, a, clA, lim, Admitted, "x", "Default", "y", "Default", "z", "Default")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	var names []string
	for k := range st.rows {
		names = append(names, k.queue)
	}
	st.mu.Unlock()
	sort.Strings(names)
	if fmt.Sprint(names) != "[x y z]" {
		t.Fatalf("stored queues %v, want [x y z]", names)
	}
}

func TestReconcileBeforeLoad(t *testing.T) {
	st := newMemStore()
	st.rows[admKey{clA, "deleted-at-broker"}] = 1
	st.rows[admKey{clA, "kept"}] = 1
	a := NewAdmission(st)
	// The reconciler runs at start, before any request loaded the cluster.
	if n := a.Reconcile(clA, []QueueRow{{ClusterID: clA, Name: "kept", Partitions: 2}, {ClusterID: clA, Name: "new-at-broker", Partitions: 1}}); n != 0 {
		t.Fatalf("forgotten before load = %d", n)
	}
	lim := capsQP(3, Unlimited)
	wantAdmit(t, a, clA, lim, Admitted, "third", "Default")
	wantAdmit(t, a, clA, lim, OverQueues, "fourth", "Default")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.row(clA, "deleted-at-broker"); ok {
		t.Fatal("the early inventory did not sweep")
	}
	if _, ok := st.row(clA, "new-at-broker"); !ok {
		t.Fatal("a queue only the broker knew was not stored")
	}
}

func TestAdmissionConcurrentExactCaps(t *testing.T) {
	// Many requests race for partitions and queues: exactly the caps are
	// admitted, never more.
	a := NewAdmission(newMemStore())
	lim := capsQP(5, 7)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[QueuePartition]bool{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				qp := QueuePartition{fmt.Sprintf("q%d", (i+w)%9), fmt.Sprintf("p%d", (i*7+w)%13)}
				res, _, err := a.Admit(context.Background(), clA, []QueuePartition{qp, {qp.Queue, "Default"}}, lim)
				if err != nil {
					t.Error(err)
					return
				}
				if res == Admitted {
					mu.Lock()
					got[qp] = true
					mu.Unlock()
				}
				if i%50 == 0 {
					_ = a.Flush(context.Background())
				}
			}
		}(w)
	}
	wg.Wait()
	perQueue := map[string]int{}
	for qp := range got {
		perQueue[qp.Queue]++
	}
	if len(perQueue) != 5 {
		t.Fatalf("queues admitted = %d, want 5", len(perQueue))
	}
	for q, n := range perQueue {
		if n != 7 {
			t.Fatalf("queue %s: %d partitions, want 7", q, n)
		}
	}
}

func TestAdmissionRunFlushesAndDrains(t *testing.T) {
	st := newMemStore()
	a := NewAdmission(st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx, 10*time.Millisecond); close(done) }()
	wantAdmit(t, a, clA, AllUnlimited(), Admitted, "q", "p")
	deadline := time.Now().Add(5 * time.Second)
	for a.Pending() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := st.row(clA, "q"); !ok {
		t.Fatal("Run did not flush")
	}
	// A row admitted just before stop is flushed by the final flush.
	st.mu.Lock()
	st.failPersist = nil
	st.mu.Unlock()
	wantAdmit(t, a, clA, AllUnlimited(), Admitted, "last", "p")
	cancel()
	<-done
	if _, ok := st.row(clA, "last"); !ok {
		t.Fatal("the final flush did not write")
	}
}

func TestAdmitResultString(t *testing.T) {
	for r, s := range map[AdmitResult]string{Admitted: "admitted", OverQueues: "queues", OverPartitions: "partitions", Unavailable: "unavailable", 9: "unknown"} {
		if r.String() != s {
			t.Errorf("%d: %q", r, r.String())
		}
	}
}
