package limits

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/queengate/queengate/internal/fakebroker"
)

// measured is an inventory from a broker that reports bytes.
func measured(bytes int64) Inventory {
	return Inventory{Queues: []QueueRow{{Name: "q", Partitions: 1}}, RetainedBytes: bytes, Supported: true}
}

// unreported is an inventory from a broker older than 0.16.
func unreported() Inventory {
	return Inventory{Queues: []QueueRow{{Name: "q", Partitions: 1}}}
}

func newTestStorage() (*Storage, *ManualClock) {
	clock := NewManualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return NewStorage(clock.Now), clock
}

func TestStorageHysteresisTable(t *testing.T) {
	// limits-meter §2.5 test facts.
	cases := []struct {
		name          string
		blockedBefore bool
		bytes         int64
		cap           Cap
		want          bool
	}{
		{"unblocked over", false, 1001, 1000, true},
		{"unblocked at cap", false, 1000, 1000, false},
		{"blocked above release", true, 901, 1000, true},
		{"blocked at release", true, 900, 1000, false},
		{"blocked below release", true, 10, 1000, false},
		{"cap 0, one byte", false, 1, 0, true},
		{"cap 0, no bytes, blocked", true, 0, 0, false},
		{"release floor is exact", true, 1799, 1999, false}, // floor(1999*0.9) = 1799
		{"release floor is exact, above", true, 1800, 1999, true},
		{"huge cap, no overflow", true, 1<<63 - 2, 1<<63 - 2, true},
		{"huge cap, released", true, (1<<63 - 2) / 10 * 9, 1<<63 - 2, false},
		{"unlimited", true, 1 << 40, Unlimited, false},
	}
	for _, c := range cases {
		s, _ := newTestStorage()
		if c.blockedBefore && !c.cap.IsUnlimited() {
			if blocked, _ := s.Observe("c", measured(1<<63-1), c.cap); !blocked {
				t.Fatalf("%s: setup did not block", c.name)
			}
		}
		got, _ := s.Observe("c", measured(c.bytes), c.cap)
		if got != c.want {
			t.Errorf("%s: blocked=%v, want %v", c.name, got, c.want)
		}
		if want := PushOpen; c.want {
			if s.PushBlock("c") != PushBlockedStorage {
				t.Errorf("%s: PushBlock open", c.name)
			}
		} else if c.cap.IsUnlimited() && s.PushBlock("c") != want {
			t.Errorf("%s: PushBlock blocked", c.name)
		}
	}
}

func TestStorageReleasesOnlyAtNinetyPercent(t *testing.T) {
	s, _ := newTestStorage()
	const cap = 1000
	steps := []struct {
		bytes       int64
		blocked     bool
		changed     bool
		description string
	}{
		{500, false, false, "under"},
		{1001, true, true, "over blocks"},
		{950, true, false, "under the cap but above 90% stays blocked"},
		{901, true, false, "still above"},
		{900, false, true, "at 90% releases"},
		{999, false, false, "under the cap again: open"},
		{1000, false, false, "at the cap: open"},
		{1200, true, true, "over again"},
	}
	for _, st := range steps {
		blocked, changed := s.Observe("c", measured(st.bytes), cap)
		if blocked != st.blocked || changed != st.changed {
			t.Fatalf("%s (%d): blocked=%v changed=%v", st.description, st.bytes, blocked, changed)
		}
	}
}

func TestStorageInFlightEstimate(t *testing.T) {
	s, _ := newTestStorage()
	const cap = 1000
	s.Observe("c", measured(999), cap)
	if s.InFlightBlocked("c", cap) {
		t.Fatal("999 of 1000 blocked")
	}
	// limits-meter §7.3: 999 + 1 on a 1,000 cap refuses, no measurement
	// needed.
	s.AddInFlight("c", 1)
	if !s.InFlightBlocked("c", cap) || s.PushBlock("c") != PushBlockedStorage {
		t.Fatal("999 + 1 of 1000 not blocked")
	}
	// Republishing the same figure keeps the estimate (the broker has not
	// recomputed); the block set by the estimate holds above 90%.
	s.Observe("c", measured(999), cap)
	if st := s.Status("c"); st.InFlight != 1 || !st.Blocked {
		t.Fatalf("after an unchanged figure: %+v", st)
	}
	// A changed figure resets the estimate; 999 is above the release level.
	s.Observe("c", measured(998), cap)
	if st := s.Status("c"); st.InFlight != 0 || !st.Blocked {
		t.Fatalf("after a changed figure above 90%%: %+v", st)
	}
	s.Observe("c", measured(900), cap)
	if s.InFlightBlocked("c", cap) {
		t.Fatal("not released at 90%")
	}
	// The estimate never counts twice: many small pushes add up once.
	for i := 0; i < 99; i++ {
		s.AddInFlight("c", 1)
	}
	if s.InFlightBlocked("c", cap) {
		t.Fatal("900 + 99 blocked")
	}
	s.AddInFlight("c", 1)
	if !s.InFlightBlocked("c", cap) {
		t.Fatal("900 + 100 not blocked")
	}
	// Saturating: a huge estimate does not wrap.
	s.AddInFlight("c", 1<<62)
	s.AddInFlight("c", 1<<62)
	s.AddInFlight("c", 0)
	s.AddInFlight("c", -5)
	if st := s.Status("c"); st.InFlight != 1<<63-1 {
		t.Fatalf("in-flight %d", st.InFlight)
	}
}

func TestStorageEstimateReleasedByLowMeasurement(t *testing.T) {
	// The estimate over-counts (payload text vs. the broker's compressed
	// bytes): the next measurement well under the cap releases at once.
	s, _ := newTestStorage()
	s.Observe("c", measured(100), 1000)
	s.AddInFlight("c", 2000)
	if !s.InFlightBlocked("c", 1000) {
		t.Fatal("not blocked")
	}
	if blocked, changed := s.Observe("c", measured(400), 1000); blocked || !changed {
		t.Fatalf("blocked=%v changed=%v", blocked, changed)
	}
	if s.InFlightBlocked("c", 1000) || s.PushBlock("c") != PushOpen {
		t.Fatal("still blocked")
	}
}

func TestStorageCapRaisedOrRemovedClearsAtOnce(t *testing.T) {
	// A raised or removed cap unblocks at once, not at the next
	// measurement.
	s, _ := newTestStorage()
	if blocked, _ := s.Observe("c", measured(5000), 1000); !blocked {
		t.Fatal("not blocked")
	}
	// Raised, but not above the measurement: still blocked.
	if !s.InFlightBlocked("c", 4000) {
		t.Fatal("cap below the measurement released")
	}
	// Raised above the measurement (though under 5000/0.9): open at once,
	// before any new measurement.
	if s.InFlightBlocked("c", 5001) || s.PushBlock("c") != PushOpen {
		t.Fatal("raising the cap did not clear the block")
	}
	// The estimate still applies under the new cap.
	s.AddInFlight("c", 1)
	if !s.InFlightBlocked("c", 5001) {
		t.Fatal("5000 + 1 of 5001 not blocked")
	}
	// Removed: open, and nothing blocks however much goes in.
	if s.InFlightBlocked("c", Unlimited) || s.PushBlock("c") != PushOpen {
		t.Fatal("removing the cap did not clear the block")
	}
	s.AddInFlight("c", 1<<40)
	if s.InFlightBlocked("c", Unlimited) {
		t.Fatal("unlimited blocked")
	}
	// Lowered below the measurement: blocked at once.
	if !s.InFlightBlocked("c", 10) {
		t.Fatal("lowering the cap did not block")
	}
	// SetCap (a cache refresh) applies a change without a push.
	s.SetCap("c", Unlimited)
	if s.PushBlock("c") != PushOpen {
		t.Fatal("SetCap did not clear")
	}
	s.SetCap("unknown", 5) // harmless
	// The measurement pass with a raised cap also clears (no 90% rule for
	// a new cap: the block is decided afresh).
	s2, _ := newTestStorage()
	s2.Observe("c", measured(5000), 1000)
	if blocked, changed := s2.Observe("c", measured(5000), 5500); blocked || !changed {
		t.Fatalf("raised cap in Observe: blocked=%v changed=%v", blocked, changed)
	}
	if blocked, _ := s2.Observe("c", measured(5000), Unlimited); blocked {
		t.Fatal("removed cap in Observe")
	}
}

func TestStorageUnreportedBrokerIsInactive(t *testing.T) {
	s, _ := newTestStorage()
	if active, known := s.Active(); active || known {
		t.Fatalf("fresh: active=%v known=%v", active, known)
	}
	// An empty listing settles nothing.
	s.Observe("c", Inventory{}, 10)
	if active, known := s.Active(); active || known {
		t.Fatalf("after an empty listing: active=%v known=%v", active, known)
	}
	s.Observe("c", unreported(), 10)
	if active, known := s.Active(); active || !known {
		t.Fatalf("old broker: active=%v known=%v", active, known)
	}
	// The estimate alone never blocks, whatever goes in.
	s.AddInFlight("c", 1<<40)
	if s.InFlightBlocked("c", 10) || s.PushBlock("c") != PushOpen {
		t.Fatal("blocked without byte counts")
	}
	if st := s.Status("c"); st.Reported || !st.Known || st.Blocked {
		t.Fatalf("status %+v", st)
	}
	// A cluster measured before the broker lost its byte counts (a
	// downgrade) is released.
	s.Observe("d", measured(100), 10)
	if s.PushBlock("d") != PushBlockedStorage {
		t.Fatal("not blocked")
	}
	if active, _ := s.Active(); !active {
		t.Fatal("one reporting cluster makes the quota active")
	}
	if blocked, changed := s.Observe("d", unreported(), 10); blocked || !changed {
		t.Fatalf("downgrade: blocked=%v changed=%v", blocked, changed)
	}
	if active, known := s.Active(); active || !known {
		t.Fatalf("after the downgrade: active=%v known=%v", active, known)
	}
	// Before any measurement a cluster is never blocked by the estimate.
	s.AddInFlight("new", 1<<40)
	if s.InFlightBlocked("new", 1) {
		t.Fatal("an unmeasured cluster blocked")
	}
	if s.PushBlock("nobody") != PushOpen || s.InFlightBlocked("nobody", 0) {
		t.Fatal("an unknown cluster blocked")
	}
}

func TestStorageEmptyListingMeasuresZero(t *testing.T) {
	// A cluster that deleted all its queues is measured at zero bytes and
	// released, even when the broker adds no kv/timer fields.
	s, _ := newTestStorage()
	s.Observe("c", measured(2000), 1000)
	if blocked, changed := s.Observe("c", Inventory{}, 1000); blocked || !changed {
		t.Fatalf("blocked=%v changed=%v", blocked, changed)
	}
	if st := s.Status("c"); !st.Reported || st.Measured != 0 {
		t.Fatalf("status %+v", st)
	}
}

func TestStorageStatusAndRetain(t *testing.T) {
	s, clock := newTestStorage()
	s.Observe("a", measured(10), 100)
	clock.Advance(time.Minute)
	s.Observe("b", measured(20), 100)
	s.AddInFlight("b", 5)
	if st := s.Status("b"); st.Measured != 20 || st.InFlight != 5 || st.Blocked || !st.Reported ||
		!st.ObservedAt.Equal(clock.Now()) {
		t.Fatalf("status %+v", st)
	}
	s.Retain([]string{"b"})
	if st := s.Status("a"); st != (StorageStatus{}) {
		t.Fatalf("a not forgotten: %+v", st)
	}
	if s.Status("b").Measured != 20 {
		t.Fatal("b forgotten")
	}
}

func TestStorageWithDecidePushBlock(t *testing.T) {
	s, _ := newTestStorage()
	s.Observe("c", measured(2000), 1000)
	if got := DecidePushBlock("c", true, []PushBlockSource{s}); got != PushBlockedStorage {
		t.Fatalf("got %v", got)
	}
	if got := DecidePushBlock("other", false, []PushBlockSource{s}); got != PushOpen {
		t.Fatalf("got %v", got)
	}
}

// Concurrent callers lose no update: in-flight bytes add up exactly, on
// clusters measured before and on clusters first seen by the workers (which
// race to create their entries), whatever the order of the calls. Each
// Observe repeats the same measurement under the same cap, which keeps the
// in-flight estimate, so the final gauges do not depend on the order.
func TestStorageConcurrent(t *testing.T) {
	s, _ := newTestStorage()
	const (
		workers    = 8
		iterations = 2000
		measure    = 1000
		cap        = Cap(1500)
	)
	for k := 0; k < 3; k++ {
		s.Observe(fmt.Sprintf("c%d", k), measured(measure), cap)
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			id, fresh := fmt.Sprintf("c%d", w%3), fmt.Sprintf("fresh%d", w%3)
			for i := 0; i < iterations; i++ {
				switch i % 5 {
				case 0:
					s.Observe(id, measured(measure), cap)
				case 1:
					s.AddInFlight(id, 3)
					s.AddInFlight(fresh, 2)
				case 2:
					s.InFlightBlocked(id, cap)
				case 3:
					s.PushBlock(id)
					s.Status(fresh)
				default:
					s.Active()
					s.Status(id)
				}
			}
		}(w)
	}
	wg.Wait()

	addsPerWorker := int64(iterations / 5)
	for k := 0; k < 3; k++ {
		n := int64(0) // workers on cluster k
		for w := 0; w < workers; w++ {
			if w%3 == k {
				n++
			}
		}
		id := fmt.Sprintf("c%d", k)
		inFlight := n * addsPerWorker * 3
		want := StorageStatus{Measured: measure, InFlight: inFlight, Blocked: measure+inFlight >= int64(cap), Reported: true, Known: true}
		got := s.Status(id)
		got.ObservedAt = time.Time{}
		if got != want {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
		if pb := s.PushBlock(id); pb != PushBlockedStorage {
			t.Errorf("%s: push verdict %v, want blocked (measurement plus in-flight reach the cap)", id, pb)
		}
		fresh := fmt.Sprintf("fresh%d", k)
		if got, want := s.Status(fresh), (StorageStatus{InFlight: n * addsPerWorker * 2}); got != want {
			t.Errorf("%s: %+v, want %+v", fresh, got, want)
		}
	}
	if active, known := s.Active(); !active || !known {
		t.Errorf("Active() = %v, %v; want the reporting clusters to count", active, known)
	}
}

// ---------------------------------------------------------------------------
// The reconciler.

func TestReconcilerAgainstFakeBroker(t *testing.T) {
	url := startBroker(t, fakebroker.Options{})
	auth := "Bearer " + cellToken
	brokerPush(t, url, tenantOne, `{"items":[{"queue":"big","payload":"`+string(make([]byte, 0))+`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]}`)
	brokerPush(t, url, tenantTwo, `{"items":[{"queue":"small","partition":"p1","payload":1},{"queue":"small","partition":"p2","payload":2}]}`)

	storage, _ := newTestStorage()
	admission := NewAdmission(newMemStore())
	core, logs := observer.New(zap.InfoLevel)
	clusters := []ClusterRef{
		{ID: clA, BrokerTenant: tenantOne, CellURL: url, Authorization: auth, MaxRetainedBytes: 50},
		{ID: "broken", BrokerTenant: tenantOne, CellURL: "http://127.0.0.1:1", MaxRetainedBytes: 1},
		{ID: clB, BrokerTenant: tenantTwo, CellURL: url, Authorization: auth, MaxRetainedBytes: 50},
	}
	r := &Reconciler{
		Clusters:  func(context.Context) ([]ClusterRef, error) { return clusters, nil },
		Storage:   storage,
		Admission: admission,
		Log:       zap.New(core),
	}
	err := r.RunOnce(context.Background())
	if err == nil {
		t.Fatal("the broken cluster's failure was not reported")
	}
	// One cluster's failure did not stop the others.
	if storage.PushBlock(clA) != PushBlockedStorage {
		t.Fatalf("cluster one (84 bytes of 50) not blocked: %+v", storage.Status(clA))
	}
	if storage.PushBlock(clB) != PushOpen || storage.Status(clB).Measured != 2 {
		t.Fatalf("cluster two: %+v", storage.Status(clB))
	}
	if logs.FilterMessage("storage quota exceeded; pushes blocked").Len() != 1 ||
		logs.FilterMessage("no usable queue inventory, skipping cluster").Len() != 1 {
		t.Fatalf("logs: %v", logs.All())
	}
	// The registry learned the broker's queues: with max_queues 1 the
	// cluster cannot add a second one, and "small" has 2 partitions (the
	// floor is 1: the listing cannot say whether Default is one of them).
	lim := capsQP(1, 2)
	wantAdmit(t, admission, clB, lim, OverQueues, "another", "Default")
	wantAdmit(t, admission, clB, lim, Admitted, "small", "p1", "small", "p2")
	wantAdmit(t, admission, clB, lim, OverPartitions, "small", "p3")
	if active, known := storage.Active(); !active || !known {
		t.Fatalf("active=%v known=%v", active, known)
	}

	// The cap is raised in the control plane: the next pass releases.
	clusters[0].MaxRetainedBytes = 1000
	_ = r.RunOnce(context.Background())
	if storage.PushBlock(clA) != PushOpen || logs.FilterMessage("storage back under quota; pushes unblocked").Len() != 1 {
		t.Fatalf("not released: %+v", storage.Status(clA))
	}
	// A cluster that left the cell is forgotten.
	clusters = clusters[:1]
	if err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if storage.Status(clB) != (StorageStatus{}) {
		t.Fatal("departed cluster kept")
	}
}

func TestReconcilerOldBrokerLeavesQuotaInactive(t *testing.T) {
	url, hits := recordedBroker(t, 113)
	storage, _ := newTestStorage()
	r := &Reconciler{
		Clusters: func(context.Context) ([]ClusterRef, error) {
			return []ClusterRef{{ID: clA, BrokerTenant: tenantOne, CellURL: url, MaxRetainedBytes: 1}}, nil
		},
		Storage: storage,
		Every:   time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	// Run reconciles at once, without waiting for the interval. The test
	// waits for the verdict, not the listing's read: on a loaded machine
	// the cancel could otherwise come between the two.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, known := storage.Active(); known {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if hits.Load() != 1 {
		t.Fatalf("listing reads = %d, want 1", hits.Load())
	}
	if active, known := storage.Active(); active || !known {
		t.Fatalf("active=%v known=%v", active, known)
	}
	storage.AddInFlight(clA, 1<<30)
	if storage.InFlightBlocked(clA, 1) || storage.PushBlock(clA) != PushOpen {
		t.Fatal("an old broker's cluster was blocked")
	}
}

func TestReconcilerClusterListFailure(t *testing.T) {
	storage, _ := newTestStorage()
	storage.Observe(clA, measured(5000), 10)
	r := &Reconciler{
		Clusters: func(context.Context) ([]ClusterRef, error) { return nil, errors.New("database down") },
		Storage:  storage,
	}
	if err := r.RunOnce(context.Background()); err == nil {
		t.Fatal("no error")
	}
	// Nothing changed: the verdict stands.
	if storage.PushBlock(clA) != PushBlockedStorage {
		t.Fatal("a failed pass touched the verdict")
	}
	if err := (&Reconciler{}).RunOnce(context.Background()); err == nil {
		t.Fatal("no cluster source accepted")
	}
	var calls atomic.Int64
	r2 := &Reconciler{Clusters: func(context.Context) ([]ClusterRef, error) {
		calls.Add(1)
		return []ClusterRef{{ID: "x", CellURL: "http://127.0.0.1:1"}}, nil
	}, Client: &http.Client{Timeout: time.Second}}
	if err := r2.RunOnce(context.Background()); err == nil || calls.Load() != 1 {
		t.Fatalf("err %v calls %d", err, calls.Load())
	}
}

// TestReconcilerTellsWhetherTheBrokerReportsBytes: OnReporting hears, per
// cluster whose listing settled it, whether its broker reports retained
// bytes (the recorded 0.15.1 broker does not; the fake, like 0.16, does);
// a listing without queues settles nothing.
func TestReconcilerTellsWhetherTheBrokerReportsBytes(t *testing.T) {
	old, _ := recordedBroker(t, 113)
	current := startBroker(t, fakebroker.Options{})
	brokerPush(t, current, tenantOne, `{"items":[{"queue":"q","payload":"some bytes"}]}`)
	heard := map[string]bool{}
	r := &Reconciler{
		Clusters: func(context.Context) ([]ClusterRef, error) {
			return []ClusterRef{
				{ID: "on-old", CellID: "cell-old", BrokerTenant: tenantOne, CellURL: old, MaxRetainedBytes: 1},
				{ID: "on-current", CellID: "cell-current", BrokerTenant: tenantOne, CellURL: current,
					Authorization: "Bearer " + cellToken, MaxRetainedBytes: 1 << 20},
				{ID: "empty", CellID: "cell-current", BrokerTenant: tenantTwo, CellURL: current,
					Authorization: "Bearer " + cellToken, MaxRetainedBytes: 1 << 20},
			}, nil
		},
		OnReporting: func(_ context.Context, ref ClusterRef, reported bool) { heard[ref.ID+"@"+ref.CellID] = reported },
	}
	if err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 2 || heard["on-old@cell-old"] || !heard["on-current@cell-current"] {
		t.Fatalf("heard %v, want the old broker reporting none and the current one reporting bytes, and nothing for the empty cluster", heard)
	}
}
