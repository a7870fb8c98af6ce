package limits

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// DefaultCellMaxParked is the cell-wide cap on parked long-poll pops when
// none is configured.
const DefaultCellMaxParked = 5000

// ParkedRetryAfter is the Retry-After, in seconds, of a refused parked pop.
const ParkedRetryAfter = 5

// parkedShardCount is the number of independently locked shards of
// per-cluster gauges.
const parkedShardCount = 16

// parkedShard holds the per-cluster gauges of one shard: the number of
// slots each cluster holds, only read or written with the shard locked.
type parkedShard struct {
	mu sync.Mutex
	m  map[string]int64
	_  [48]byte // keeps neighbouring shards' locks off one cache line
}

// Parked counts the long-poll pops (wait=true) a cell holds open upstream:
// one cell-wide gauge with a cap, and one gauge per cluster checked against
// the cluster's max_parked_pops.
//
// A slot is taken by incrementing both gauges first and then comparing the
// values they had BEFORE the increment with the caps, so concurrent
// acquirers can never overshoot a cap together, and exactly cap slots can be
// held. A refused (enforced) slot is rolled back at once. (The cell gauge is
// one atomic counter; a cluster gauge lives under its shard's lock, where
// the increment is simply not stored when the slot is refused.) A slot
// refused by its cluster cap still counts in the cell gauge for the instant
// before its rollback, so under a race at the cell cap another cluster may
// be refused while the cell is one short of full: refusals err towards
// protecting the cell, grants never exceed a cap.
//
// Per-cluster gauges exist only while they hold a slot: a gauge that comes
// back to zero is removed, so there is nothing to garbage-collect and a
// gauge with live slots is never dropped. A Parked keeps no per-config
// state except the cell cap (SetCellCap), so it can outlive reloads.
type Parked struct {
	cell    atomic.Int64
	cellCap atomic.Int64
	seed    maphash.Seed
	shards  [parkedShardCount]parkedShard
}

// NewParked returns gauges with the given cell-wide cap
// (DefaultCellMaxParked when cellCap ≤ 0).
func NewParked(cellCap int) *Parked {
	p := &Parked{seed: maphash.MakeSeed()}
	for i := range p.shards {
		p.shards[i].m = make(map[string]int64)
	}
	p.SetCellCap(cellCap)
	return p
}

// SetCellCap changes the cell-wide cap (DefaultCellMaxParked when n ≤ 0).
// Slots already held are kept; a lower cap only refuses new ones.
func (p *Parked) SetCellCap(n int) {
	if n <= 0 {
		n = DefaultCellMaxParked
	}
	p.cellCap.Store(int64(n))
}

// CellCap returns the cell-wide cap.
func (p *Parked) CellCap() int64 { return p.cellCap.Load() }

func (p *Parked) shard(clusterID string) *parkedShard {
	return &p.shards[maphash.String(p.seed, clusterID)%parkedShardCount]
}

// noRelease is the release of a slot that was not taken.
func noRelease() {}

// TryAcquire takes a slot for one parked pop of clusterID and reports the
// true verdict: over is true when the cell gauge already held the cell cap,
// or the cluster gauge already held clusterCap (Unlimited: only the cell
// cap applies; 0: no parked pop is allowed).
//
// Enforcing and over: nothing is held (both increments are undone) and
// release is a no-op; the caller answers 429 rate_limited with Retry-After
// ParkedRetryAfter. Otherwise the slot is held, in shadow mode even when
// over (the caller logs "limit exceeded (shadow)" and goes on, and the
// gauges stay honest), and release gives it back.
//
// release is never nil, is safe to call more than once and from any
// goroutine, and decrements both gauges exactly once: defer it, and call it
// early as soon as the upstream answers.
func (p *Parked) TryAcquire(clusterID string, clusterCap Cap, enforce bool) (release func(), over bool) {
	prevCell := p.cell.Add(1) - 1
	over = prevCell >= p.cellCap.Load()

	s := p.shard(clusterID)
	s.mu.Lock()
	// The cluster gauge is only visible under the shard lock, so checking
	// its value before storing the increment is the same as incrementing,
	// checking the previous value and undoing: a refused slot never shows.
	prev := s.m[clusterID]
	if !clusterCap.IsUnlimited() && prev >= int64(clusterCap) {
		over = true
	}
	if over && enforce {
		s.mu.Unlock()
		p.cell.Add(-1)
		return noRelease, true
	}
	s.m[clusterID] = prev + 1
	s.mu.Unlock()

	slot := &parkedSlot{p: p, s: s, id: clusterID}
	return slot.release, over
}

// Acquire is TryAcquire reduced to the enforcement answer: ok is false only
// when enforce is set and a cap is reached (nothing is then held). In
// shadow mode ok is always true; use TryAcquire or AcquireShadow to learn
// whether a shadow slot was over a cap.
func (p *Parked) Acquire(clusterID string, clusterCap Cap, enforce bool) (release func(), ok bool) {
	release, over := p.TryAcquire(clusterID, clusterCap, enforce)
	return release, !(over && enforce)
}

// AcquireShadow always takes the slot and reports whether it was over a
// cap, for shadow mode.
func (p *Parked) AcquireShadow(clusterID string, clusterCap Cap) (release func(), over bool) {
	return p.TryAcquire(clusterID, clusterCap, false)
}

// parkedSlot is one held slot. Each held slot counts exactly once in its
// cluster's gauge, and a gauge is removed only at zero, so a slot's release
// always finds the gauge it incremented (or its successor, which it also
// counts in).
type parkedSlot struct {
	p    *Parked
	s    *parkedShard
	id   string
	done atomic.Bool
}

func (sl *parkedSlot) release() {
	if !sl.done.CompareAndSwap(false, true) {
		return
	}
	sl.s.mu.Lock()
	if n := sl.s.m[sl.id] - 1; n > 0 {
		sl.s.m[sl.id] = n
	} else {
		delete(sl.s.m, sl.id)
	}
	sl.s.mu.Unlock()
	sl.p.cell.Add(-1)
}

// Cell returns the number of slots held on the cell.
func (p *Parked) Cell() int64 { return p.cell.Load() }

// Cluster returns the number of slots clusterID holds.
func (p *Parked) Cluster(clusterID string) int64 {
	s := p.shard(clusterID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[clusterID]
}

// Clusters returns the number of clusters holding at least one slot.
func (p *Parked) Clusters() int {
	n := 0
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
