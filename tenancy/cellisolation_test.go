package tenancy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCellBroker stands in for the probe and the database.
type fakeCellBroker struct {
	verdict  atomic.Pointer[TenantScoping]
	keeper   atomic.Pointer[string]
	probes   atomic.Int32
	mu       sync.Mutex
	recorded []TenantScoping
}

func (f *fakeCellBroker) set(v TenantScoping) { f.verdict.Store(&v) }

func (f *fakeCellBroker) config() CellIsolationConfig {
	return CellIsolationConfig{
		Probe: func(context.Context, ProbeCell) (TenantScoping, error) {
			f.probes.Add(1)
			v := *f.verdict.Load()
			if v == ScopingUnknown {
				return v, errors.New("cell does not answer")
			}
			return v, nil
		},
		Record: func(_ context.Context, _ ProbeCell, v TenantScoping, _ string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.recorded = append(f.recorded, v)
			return nil
		},
		Keeper: func(context.Context, string) (string, error) { return *f.keeper.Load(), nil },
		Every:  time.Hour, Retry: 20 * time.Millisecond, KeeperEvery: 50 * time.Millisecond, FirstWait: 2 * time.Second,
	}
}

func TestCellIsolationServesOnlyTheKeeperUnlessScoped(t *testing.T) {
	f := &fakeCellBroker{}
	f.set(ScopingUnscoped)
	first := "cluster-old"
	f.keeper.Store(&first)
	ci := NewCellIsolation(f.config())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ci.Run(ctx)
	cell := ProbeCell{ID: "cell-1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1"}

	// First sight: both wait for the verdict; the keeper is served, the
	// other refused.
	if d := ci.Admit(ctx, cell, "cluster-new"); d.Serve || d.Verdict != ScopingUnscoped || d.Keeper != first {
		t.Fatalf("second cluster on an unscoped cell: %+v", d)
	}
	if d := ci.Admit(ctx, cell, first); !d.Serve {
		t.Fatalf("keeper refused: %+v", d)
	}

	// The broker gains tenancy: after a reset (the cell was unreachable),
	// the re-probe serves both.
	f.set(ScopingScoped)
	ci.CellUnreachable(cell.ID)
	if d := ci.Admit(ctx, cell, "cluster-new"); !d.Serve || d.Verdict != ScopingScoped {
		t.Fatalf("after the broker gained tenancy: %+v", d)
	}

	// It loses it again while the cell was down: unknown until a probe
	// decides, and then refused.
	f.set(ScopingUnknown)
	ci.CellUnreachable(cell.ID)
	if d := ci.Admit(context.Background(), cell, first); !d.Serve {
		t.Fatalf("keeper refused while the cell is undecided: %+v", d)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	if d := ci.Admit(short, cell, "cluster-new"); d.Serve || d.Verdict != ScopingUnknown {
		t.Fatalf("other cluster served while undecided: %+v", d)
	}
	cancelShort()
	f.set(ScopingUnscoped)
	deadline := time.Now().Add(3 * time.Second)
	for *ci.mustState(cell.ID).verdict.Load() != ScopingUnscoped {
		if time.Now().After(deadline) {
			t.Fatal("the retried probe never decided")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := ci.Admit(ctx, cell, "cluster-new"); d.Serve {
		t.Fatalf("served on a cell that lost tenancy: %+v", d)
	}

	// Removing the keeper hands the cell to the next oldest.
	next := "cluster-new"
	f.keeper.Store(&next)
	deadline = time.Now().Add(3 * time.Second)
	for !ci.Admit(ctx, cell, next).Serve {
		if time.Now().After(deadline) {
			t.Fatal("the new keeper was never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ci.Admit(ctx, cell, first).Serve {
		t.Fatal("the removed keeper is still served")
	}

	f.mu.Lock()
	recorded := append([]TenantScoping(nil), f.recorded...)
	f.mu.Unlock()
	want := []TenantScoping{ScopingUnscoped, ScopingScoped, ScopingUnknown, ScopingUnscoped}
	if len(recorded) != len(want) {
		t.Fatalf("recorded %v, want %v (an undecided retry is recorded once)", recorded, want)
	}
	for i := range want {
		if recorded[i] != want[i] {
			t.Fatalf("recorded %v, want %v", recorded, want)
		}
	}
	vs := ci.Verdicts()
	if len(vs) != 1 || vs[0].CellSlug != "eu1-a" || vs[0].Verdict != ScopingUnscoped || vs[0].Keeper != next || vs[0].CheckedAt.IsZero() {
		t.Fatalf("verdicts %+v", vs)
	}
	if got := ci.ProbeRequestsPerHour(); got != probeRequests {
		t.Fatalf("probe cost %v requests an hour at one probe an hour, want %d", got, probeRequests)
	}
}

// mustState is the cell's state, for tests.
func (ci *CellIsolation) mustState(id string) *cellIsolationState {
	v, _ := ci.cells.Load(id)
	return v.(*cellIsolationState)
}

// decidedScopedCell returns a tracker that has decided cell is scoped.
func decidedScopedCell(tb testing.TB, ctx context.Context, cell ProbeCell) *CellIsolation {
	tb.Helper()
	f := &fakeCellBroker{}
	f.set(ScopingScoped)
	k := "keeper"
	f.keeper.Store(&k)
	ci := NewCellIsolation(f.config())
	go ci.Run(ctx)
	if !ci.Admit(ctx, cell, "other").Serve {
		tb.Fatal("a scoped cell refused a cluster")
	}
	return ci
}

var benchCell = ProbeCell{ID: "cell-1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1", Secret: "s"}

// TestAdmitAllocatesNothing: Admit runs on every request; a cell already
// decided costs no allocation.
func TestAdmitAllocatesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ci := decidedScopedCell(t, ctx, benchCell)
	if n := testing.AllocsPerRun(1000, func() { ci.Admit(ctx, benchCell, "other") }); n != 0 {
		t.Fatalf("Admit allocates %v times per call, want 0", n)
	}
}

func BenchmarkAdmitScopedCell(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ci := decidedScopedCell(b, ctx, benchCell)
	b.ReportAllocs()
	for b.Loop() {
		ci.Admit(ctx, benchCell, "other")
	}
}
