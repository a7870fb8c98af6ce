package tenancy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// memDrains is a DrainStore in memory.
type memDrains struct {
	mu      sync.Mutex
	live    bool
	beatErr error
	drains  []Drain
	acked   map[string]bool
	served  map[string]string // cluster id -> cell it is served on, without a drain
	looks   int               // calls of Drains
}

func (m *memDrains) Heartbeat(context.Context, string, string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.live
	m.live = m.beatErr == nil
	return was, m.beatErr
}
func (m *memDrains) Leave(context.Context, string) error { return nil }
func (m *memDrains) Drains(context.Context, string) ([]Drain, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.looks++
	out := make([]Drain, len(m.drains))
	for i, d := range m.drains {
		d.Acked = m.acked[d.ID]
		out[i] = d
	}
	return out, nil
}
func (m *memDrains) Ack(_ context.Context, drain, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acked[drain] = true
	return nil
}
func (m *memDrains) StillFenced(_ context.Context, fences map[string]string) (map[string]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := map[string]bool{}
	for id, cell := range fences {
		if m.served[id] != cell {
			keep[id] = true
		}
	}
	return keep, nil
}
func (m *memDrains) isAcked(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acked[id]
}

// TestDrainAcknowledgesOnlyOnceAdmittedRequestsEnded: a drain fences the
// cluster off the cell at once, and is acknowledged only after the last
// request that entered before the fence has left.
func TestDrainAcknowledgesOnlyOnceAdmittedRequestsEnded(t *testing.T) {
	store := &memDrains{acked: map[string]bool{}, served: map[string]string{}}
	var fenced []string
	d := NewDrains(DrainConfig{Store: store, GatewayID: "g", Name: "g", Fenced: func(id string) { fenced = append(fenced, id) }})
	ctx := context.Background()
	if err := d.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	inFlight, ok := d.Enter("c1", "cell-a")
	if !ok {
		t.Fatal("an undrained cluster was not let through")
	}
	store.mu.Lock()
	store.drains = []Drain{{ID: "d1", ClusterID: "c1", CellID: "cell-a"}}
	store.mu.Unlock()
	if err := d.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fenced) != 1 || fenced[0] != "c1" {
		t.Fatalf("Fenced called for %v", fenced)
	}
	if _, ok := d.Enter("c1", "cell-a"); ok {
		t.Fatal("a drained cluster was let through to its cell")
	}
	if f, ok := d.Enter("c1", "cell-b"); !ok {
		t.Fatal("the cluster was fenced off a cell it is not drained off")
	} else {
		f.Leave()
	}
	time.Sleep(50 * time.Millisecond)
	if store.isAcked("d1") {
		t.Fatal("acknowledged while a request admitted before the drain was on its way")
	}
	inFlight.Leave()
	deadline := time.Now().Add(5 * time.Second)
	for !store.isAcked("d1") {
		if time.Now().After(deadline) {
			t.Fatal("not acknowledged after the last request left")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The drain ends and the cluster is served on the cell again: the fence
	// goes. A cluster gone (not served anywhere) stays fenced.
	store.mu.Lock()
	store.drains = nil
	store.mu.Unlock()
	if err := d.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Enter("c1", "cell-a"); ok {
		t.Fatal("the fence of a cluster the store no longer serves there was lifted")
	}
	store.mu.Lock()
	store.served["c1"] = "cell-a"
	store.mu.Unlock()
	if err := d.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if f, ok := d.Enter("c1", "cell-a"); !ok {
		t.Fatal("the fence stayed after the drain ended")
	} else {
		f.Leave()
	}
}

// TestDrainLapse: without a recent heartbeat the gateway is not live (it
// serves no keeper), and when it beats again after the control plane
// stopped counting it, it drops its caches first.
func TestDrainLapse(t *testing.T) {
	store := &memDrains{acked: map[string]bool{}, served: map[string]string{}}
	lapsed := 0
	d := NewDrains(DrainConfig{Store: store, GatewayID: "g", Name: "g", LiveFor: 100 * time.Millisecond, Lapsed: func() { lapsed++ }})
	ctx := context.Background()
	if d.Live() {
		t.Fatal("live before any heartbeat")
	}
	if err := d.Beat(ctx); err != nil || !d.Live() {
		t.Fatalf("after a heartbeat: live %v, %v", d.Live(), err)
	}
	if lapsed != 1 {
		t.Fatalf("a first heartbeat dropped the caches %d times, want 1", lapsed)
	}
	if err := d.Beat(ctx); err != nil || lapsed != 1 {
		t.Fatalf("a heartbeat in time dropped the caches (%d, %v)", lapsed, err)
	}
	store.mu.Lock()
	store.beatErr = errors.New("database down")
	store.mu.Unlock()
	time.Sleep(150 * time.Millisecond)
	if err := d.Beat(ctx); err == nil || d.Live() {
		t.Fatalf("with the database down: live %v, %v", d.Live(), err)
	}
	store.mu.Lock()
	store.beatErr = nil
	store.mu.Unlock()
	if err := d.Beat(ctx); err != nil || !d.Live() || lapsed != 2 {
		t.Fatalf("beating again after a lapse: live %v, caches dropped %d times, %v", d.Live(), lapsed, err)
	}
}

// TestDrainKicksCoalesce: every change to any cluster kicks the drains,
// and a fleet under a stream of key changes must not read the drains once
// per change on every gateway. A burst of kicks is answered by one look
// at once and one at the end of the gap, and that last look sees what the
// last kick announced.
func TestDrainKicksCoalesce(t *testing.T) {
	store := &memDrains{acked: map[string]bool{}, served: map[string]string{}}
	const gap = 200 * time.Millisecond
	d := NewDrains(DrainConfig{Store: store, GatewayID: "g", Name: "g", Every: time.Hour, KickGap: gap})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	const kicks = 50
	start := time.Now()
	for i := range kicks {
		if i == kicks-1 {
			store.mu.Lock()
			store.drains = []Drain{{ID: "d1", ClusterID: "c1", CellID: "cell-a"}}
			store.mu.Unlock()
		}
		d.Kick()
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	deadline := time.Now().Add(5 * time.Second)
	for !store.isAcked("d1") {
		if time.Now().After(deadline) {
			t.Fatal("the drain announced by the last kick was never looked at")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(gap + 100*time.Millisecond)
	store.mu.Lock()
	looks := store.looks
	store.mu.Unlock()
	// One look at the first kick, then at most one per gap while kicks
	// come, and one for the kicks of the last gap.
	if most := 2 + int(elapsed/gap); looks > most || looks < 2 {
		t.Fatalf("%d kicks over %v read the drains %d times, want 2 to %d (one per %v gap)", kicks, elapsed, looks, most, gap)
	}
}
