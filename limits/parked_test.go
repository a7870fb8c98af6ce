package limits

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func checkGauges(t *testing.T, p *Parked, cell int64, clusters map[string]int64) {
	t.Helper()
	if got := p.Cell(); got != cell {
		t.Fatalf("cell gauge = %d, want %d", got, cell)
	}
	for id, want := range clusters {
		if got := p.Cluster(id); got != want {
			t.Fatalf("cluster %s gauge = %d, want %d", id, got, want)
		}
	}
}

func TestParkedClusterCapEnforcing(t *testing.T) {
	// cap 1 enforcing -> second slot refused and the gauge still reads 1.
	p := NewParked(0)
	rel1, ok := p.Acquire("a", 1, true)
	if !ok {
		t.Fatalf("first slot refused")
	}
	rel2, ok := p.Acquire("a", 1, true)
	if ok {
		t.Fatalf("second slot granted over cap 1")
	}
	checkGauges(t, p, 1, map[string]int64{"a": 1})
	rel2() // the release of a refused slot is a harmless no-op
	checkGauges(t, p, 1, map[string]int64{"a": 1})
	rel1()
	checkGauges(t, p, 0, map[string]int64{"a": 0})
	if _, ok := p.Acquire("a", 1, true); !ok {
		t.Fatalf("slot refused after the release")
	}
}

func TestParkedExactlyAtCap(t *testing.T) {
	p := NewParked(0)
	var rels []func()
	for i := 0; i < 3; i++ {
		rel, over := p.TryAcquire("a", 3, true)
		if over {
			t.Fatalf("slot %d of 3 refused", i+1)
		}
		rels = append(rels, rel)
	}
	if _, over := p.TryAcquire("a", 3, true); !over {
		t.Fatalf("4th slot on cap 3 granted")
	}
	checkGauges(t, p, 3, map[string]int64{"a": 3})
	rels[0]()
	if _, over := p.TryAcquire("a", 3, true); over {
		t.Fatalf("slot refused at 2 of 3")
	}
	// Cap 0 allows no parked pop at all.
	if _, ok := p.Acquire("z", 0, true); ok {
		t.Fatalf("cap 0 granted a slot")
	}
	checkGauges(t, p, 3, map[string]int64{"a": 3, "z": 0})
}

func TestParkedShadowCountsAndReports(t *testing.T) {
	// cap 1 shadow -> second slot granted and the gauge reads 2.
	p := NewParked(0)
	rel1, over1 := p.AcquireShadow("a", 1)
	rel2, over2 := p.AcquireShadow("a", 1)
	if over1 || !over2 {
		t.Fatalf("shadow verdicts = %v %v, want false true", over1, over2)
	}
	checkGauges(t, p, 2, map[string]int64{"a": 2})
	rel3, ok := p.Acquire("a", 1, false)
	if !ok {
		t.Fatalf("Acquire in shadow mode refused")
	}
	checkGauges(t, p, 3, map[string]int64{"a": 3})
	rel1()
	rel2()
	rel3()
	checkGauges(t, p, 0, map[string]int64{"a": 0})
	if p.Clusters() != 0 {
		t.Fatalf("a zero gauge was kept: %d clusters", p.Clusters())
	}
}

func TestParkedCellCap(t *testing.T) {
	// cell cap 1 -> a second cluster is refused even with no per-cluster cap.
	p := NewParked(1)
	rel, ok := p.Acquire("a", Unlimited, true)
	if !ok {
		t.Fatalf("first slot refused")
	}
	if _, ok := p.Acquire("b", Unlimited, true); ok {
		t.Fatalf("second cluster granted over the cell cap")
	}
	checkGauges(t, p, 1, map[string]int64{"a": 1, "b": 0})
	if p.Clusters() != 1 {
		t.Fatalf("the refused cluster kept a gauge")
	}
	// Shadow mode over the cell cap counts and reports.
	relb, over := p.AcquireShadow("b", Unlimited)
	if !over {
		t.Fatalf("shadow slot over the cell cap not reported")
	}
	checkGauges(t, p, 2, map[string]int64{"a": 1, "b": 1})
	relb()
	rel()
	checkGauges(t, p, 0, nil)
}

func TestParkedCellCapExactAndChange(t *testing.T) {
	p := NewParked(3)
	var rels []func()
	for i := 0; i < 3; i++ {
		rel, ok := p.Acquire(fmt.Sprint("c", i), Unlimited, true)
		if !ok {
			t.Fatalf("slot %d of cell cap 3 refused", i+1)
		}
		rels = append(rels, rel)
	}
	if _, ok := p.Acquire("c9", 100, true); ok {
		t.Fatalf("4th slot on cell cap 3 granted")
	}
	// Lowering the cap keeps what is held and refuses new slots.
	p.SetCellCap(1)
	checkGauges(t, p, 3, nil)
	rels[0]()
	if _, ok := p.Acquire("c9", Unlimited, true); ok {
		t.Fatalf("slot granted at 2 held with cap 1")
	}
	// Raising it admits again; ≤ 0 means the default.
	p.SetCellCap(0)
	if p.CellCap() != DefaultCellMaxParked {
		t.Fatalf("cell cap = %d, want the default", p.CellCap())
	}
	if _, ok := p.Acquire("c9", Unlimited, true); !ok {
		t.Fatalf("slot refused under the default cap")
	}
	if NewParked(-1).CellCap() != DefaultCellMaxParked {
		t.Fatalf("NewParked(-1) has no default cap")
	}
}

func TestParkedReleaseIdempotent(t *testing.T) {
	p := NewParked(0)
	rel1, _ := p.Acquire("a", 5, true)
	rel2, _ := p.Acquire("a", 5, true)
	rel1()
	rel1()
	rel1()
	checkGauges(t, p, 1, map[string]int64{"a": 1})
	// Concurrent double release of one slot still counts once.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); rel2() }()
	}
	wg.Wait()
	checkGauges(t, p, 0, map[string]int64{"a": 0})
	// A stale release of a slot whose gauge was removed must not touch a
	// newer gauge of the same cluster.
	rel3, _ := p.Acquire("a", 5, true)
	rel1()
	rel2()
	checkGauges(t, p, 1, map[string]int64{"a": 1})
	rel3()
	checkGauges(t, p, 0, map[string]int64{"a": 0})
}

// raceAcquire starts n goroutines that all try to take a slot at once and
// keep what they get; it returns the releases of the granted slots.
func raceAcquire(p *Parked, n int, id func(g int) string, clusterCap Cap) []func() {
	var mu sync.Mutex
	var rels []func()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			<-start
			if rel, ok := p.Acquire(id(g), clusterCap, true); ok {
				mu.Lock()
				rels = append(rels, rel)
				mu.Unlock()
			}
		}(g)
	}
	close(start)
	wg.Wait()
	return rels
}

func TestParkedConcurrentCapsAreExact(t *testing.T) {
	// Increment-then-check: 64 racing acquirers get exactly the cap, never
	// more and (slots being held) never fewer.
	p := NewParked(1000)
	rels := raceAcquire(p, 64, func(int) string { return "hot" }, 10)
	if len(rels) != 10 {
		t.Fatalf("cluster cap 10 granted %d", len(rels))
	}
	checkGauges(t, p, 10, map[string]int64{"hot": 10})
	for _, rel := range rels {
		rel()
	}
	checkGauges(t, p, 0, map[string]int64{"hot": 0})

	p = NewParked(40)
	rels = raceAcquire(p, 64, func(g int) string { return fmt.Sprint("c", g%7) }, Unlimited)
	if len(rels) != 40 {
		t.Fatalf("cell cap 40 granted %d", len(rels))
	}
	checkGauges(t, p, 40, nil)
	var wg sync.WaitGroup
	for _, rel := range rels {
		wg.Add(2)
		go func() { defer wg.Done(); rel() }()
		go func() { defer wg.Done(); rel() }()
	}
	wg.Wait()
	checkGauges(t, p, 0, nil)
	if p.Clusters() != 0 {
		t.Fatalf("%d gauges left", p.Clusters())
	}
}

func TestParkedConcurrentChurn(t *testing.T) {
	p := NewParked(1000)
	var wg sync.WaitGroup
	var maxHot atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				rel, ok := p.Acquire("hot", 4, true)
				if ok {
					if n := p.Cluster("hot"); n > maxHot.Load() {
						maxHot.Store(n)
					}
					rel()
				}
				r2, _ := p.AcquireShadow(fmt.Sprint("s", g), 1)
				p.Cell()
				r2()
			}
		}(g)
	}
	wg.Wait()
	checkGauges(t, p, 0, map[string]int64{"hot": 0})
	if p.Clusters() != 0 {
		t.Fatalf("%d gauges left", p.Clusters())
	}
	// A reading can include slots being rolled back (increment first), so
	// it may exceed the cap by the number of concurrent acquirers, never by
	// more.
	if maxHot.Load() > 4+16 {
		t.Fatalf("hot gauge reached %d", maxHot.Load())
	}
}

func BenchmarkParkedAcquireRelease(b *testing.B) {
	const id = "0b4a2f5e-6c1d-4e8a-9f3b-7d2c1a0e5f64"
	b.Run("serial", func(b *testing.B) {
		p := NewParked(0)
		hold, _ := p.Acquire(id, 1000, true) // keep the gauge alive
		defer hold()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			rel, _ := p.Acquire(id, 1000, true)
			rel()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := NewParked(1 << 30)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rel, _ := p.Acquire(id, Unlimited, true)
				rel()
			}
		})
	})
	b.Run("refused", func(b *testing.B) {
		p := NewParked(0)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			rel, _ := p.Acquire(id, 0, true)
			rel()
		}
	})
}
