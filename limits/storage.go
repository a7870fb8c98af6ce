package limits

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The storage quota (max_retained_bytes): pushes to a cluster are refused
// (403 storage_quota_exceeded, in shadow mode too) while its broker-side
// storage is over the cap. Pops, acks and reads go on.
//
// Two signals feed the verdict:
//
//   - the measurement: the inventory reconciler reads the broker's queue
//     listing every minute and Observe applies it. Over the cap blocks; a
//     blocked cluster is released only at or below 90% of the cap, so a
//     cluster hovering at its cap does not flap.
//   - the in-flight estimate: the payload bytes the gateway has let through
//     since the measurement last changed (the broker recomputes its figure
//     slowly, every few minutes). measured + in-flight reaching the cap
//     blocks at once, so a burst cannot run far past the cap between two
//     measurements; that block, too, is released by a measurement at or
//     below 90%.
//
// A cap raised above the measurement, or removed, clears the block at once,
// not at the next measurement minutes later (an operator who raises a
// cluster's cap expects its pushes to go through now): the current cap
// comes with every InFlightBlocked call (each push) and SetCap.
//
// A broker that reports no byte counts (older than 0.16) leaves the quota
// inactive: nothing blocks, the estimate included, and Active says so.
//
// Observe applies the verdict itself, so the reference's separate 10 s
// storage pump is not needed: a measurement takes effect as soon as it is
// read, and a cap change as soon as a request carries it.

// StorageReleasePercent is the share of the cap at or below which a blocked
// cluster is released.
const StorageReleasePercent = 90

// Storage keeps the storage verdict of every cluster. It is safe for
// concurrent use and implements PushBlockSource. Keep one instance for the
// life of the process.
type Storage struct {
	now Clock

	mu       sync.RWMutex
	clusters map[string]*storageEntry
}

type storageSupport uint8

const (
	storageUnknown storageSupport = iota
	storageReported
	storageNotReported
)

type storageEntry struct {
	mu         sync.Mutex
	support    storageSupport
	measured   int64
	hasMeasure bool
	inFlight   int64
	blocked    bool
	cap        Cap
	capKnown   bool
	observedAt time.Time
}

var _ PushBlockSource = (*Storage)(nil)

// NewStorage returns an empty Storage; now stamps measurements (nil means
// time.Now).
func NewStorage(now Clock) *Storage {
	if now == nil {
		now = time.Now
	}
	return &Storage{now: now, clusters: make(map[string]*storageEntry)}
}

func (s *Storage) lookup(clusterID string) *storageEntry {
	s.mu.RLock()
	e := s.clusters[clusterID]
	s.mu.RUnlock()
	return e
}

func (s *Storage) entry(clusterID string) *storageEntry {
	if e := s.lookup(clusterID); e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.clusters[clusterID]
	if e == nil {
		e = &storageEntry{}
		s.clusters[clusterID] = e
	}
	return e
}

// Observe applies a measurement of one cluster under its current cap and
// reports the resulting verdict and whether it changed.
//
// A changed figure replaces the measurement and resets the in-flight
// estimate; the same figure again means the broker has not recomputed yet,
// so the estimate is kept (neither forgotten nor counted twice). An
// inventory without byte counts makes the quota inactive for the cluster
// (unblocked, estimate dropped); one with no queues at all measures zero
// queue bytes whatever the broker's version.
func (s *Storage) Observe(clusterID string, inv Inventory, cap Cap) (blocked, changed bool) {
	e := s.entry(clusterID)
	e.mu.Lock()
	defer e.mu.Unlock()
	was := e.blocked
	e.setCap(cap)
	e.observedAt = s.now()
	switch {
	case inv.Supported:
		e.support = storageReported
		e.measure(inv.RetainedBytes)
	case len(inv.Queues) == 0:
		e.measure(0)
	default:
		e.support = storageNotReported
		e.measured, e.hasMeasure, e.inFlight, e.blocked = 0, false, 0, false
		return false, was
	}
	e.blocked = e.overCap(e.blocked)
	return e.blocked, e.blocked != was
}

func (e *storageEntry) measure(total int64) {
	if !e.hasMeasure || total != e.measured {
		e.measured, e.hasMeasure, e.inFlight = max(total, 0), true, 0
	}
}

// overCap is the measurement's verdict under e.cap: over the cap, or for a
// cluster already blocked, over the release level.
func (e *storageEntry) overCap(blocked bool) bool {
	if !e.hasMeasure || !e.capKnown || e.cap.IsUnlimited() {
		return false
	}
	c := int64(e.cap)
	if !blocked {
		return e.measured > c
	}
	release := c/100*StorageReleasePercent + c%100*StorageReleasePercent/100 // floor(c*90/100), no overflow
	return e.measured > release
}

// setCap applies a changed cap at once: the block is decided afresh against
// it, so raising the cap above the measurement or removing it clears the
// block, and lowering it below the measurement blocks.
func (e *storageEntry) setCap(cap Cap) {
	if e.capKnown && cap == e.cap {
		return
	}
	e.cap, e.capKnown = cap, true
	e.blocked = e.overCap(false)
}

// estimateOver is the in-flight verdict: measured + in-flight reaching the
// cap. It needs a broker that reports bytes and a measurement to add to.
func (e *storageEntry) estimateOver() bool {
	return e.support == storageReported && e.hasMeasure && e.capKnown && !e.cap.IsUnlimited() &&
		satAdd(e.measured, e.inFlight) >= int64(e.cap)
}

// SetCap records a cluster's current max_retained_bytes (for example when
// its cached configuration is refreshed) and applies a change at once.
func (s *Storage) SetCap(clusterID string, cap Cap) {
	e := s.lookup(clusterID)
	if e == nil {
		return
	}
	e.mu.Lock()
	e.setCap(cap)
	e.mu.Unlock()
}

// AddInFlight counts payload bytes let through to a cluster since the last
// measurement (call it after every other check of a produce request passed,
// just before forwarding).
func (s *Storage) AddInFlight(clusterID string, bytes int64) {
	if bytes <= 0 {
		return
	}
	e := s.entry(clusterID)
	e.mu.Lock()
	e.inFlight = satAdd(e.inFlight, bytes)
	e.mu.Unlock()
}

// InFlightBlocked is the storage verdict for a push to a cluster whose cap
// is cap: true when the cluster is blocked, or when its measurement plus
// the in-flight estimate reaches the cap (which blocks it until a
// measurement releases it). It applies a changed cap first, so call it on
// the push path before consulting PushBlock. It answers from memory.
func (s *Storage) InFlightBlocked(clusterID string, cap Cap) bool {
	e := s.lookup(clusterID)
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setCap(cap)
	if e.estimateOver() {
		e.blocked = true
	}
	return e.blocked
}

// PushBlock implements PushBlockSource: PushBlockedStorage while the
// cluster is blocked or its estimate reaches the last cap seen.
func (s *Storage) PushBlock(clusterID string) PushBlock {
	e := s.lookup(clusterID)
	if e == nil {
		return PushOpen
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.blocked || e.estimateOver() {
		return PushBlockedStorage
	}
	return PushOpen
}

// Active reports whether the storage quota is in force: active when the
// broker reports byte counts for at least one cluster; known once any
// measurement settled the question. known && !active means the broker is
// too old to report bytes: the quota is inactive, which the gateway should
// say once in its log and on its readiness endpoint.
func (s *Storage) Active() (active bool, known bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.clusters {
		e.mu.Lock()
		sup := e.support
		e.mu.Unlock()
		switch sup {
		case storageReported:
			return true, true
		case storageNotReported:
			known = true
		}
	}
	return false, known
}

// StorageStatus is one cluster's storage picture.
type StorageStatus struct {
	Measured, InFlight int64
	Blocked            bool
	// Reported is true when the broker reports byte counts for the
	// cluster; Known is false before a measurement settled it.
	Reported, Known bool
	ObservedAt      time.Time
}

// Status returns a cluster's storage picture (zero for an unknown cluster).
func (s *Storage) Status(clusterID string) StorageStatus {
	e := s.lookup(clusterID)
	if e == nil {
		return StorageStatus{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return StorageStatus{
		Measured: e.measured, InFlight: e.inFlight, Blocked: e.blocked || e.estimateOver(),
		Reported: e.support == storageReported, Known: e.support != storageUnknown,
		ObservedAt: e.observedAt,
	}
}

// Retain forgets every cluster not in ids (clusters deleted or moved away).
func (s *Storage) Retain(ids []string) {
	keep := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		keep[id] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.clusters {
		if _, ok := keep[id]; !ok {
			delete(s.clusters, id)
		}
	}
}

// ---------------------------------------------------------------------------

// DefaultReconcileEvery is the inventory reconciler's default interval.
const DefaultReconcileEvery = 60 * time.Second

// Reconciler reads every cluster's queue inventory from its cell and feeds
// the storage verdicts and the admission registry. It runs once at start,
// then every interval.
type Reconciler struct {
	// Clusters lists the clusters to reconcile (those of the cell, push
	// blocked ones included: only this loop can release them). An error
	// skips the pass.
	Clusters func(ctx context.Context) ([]ClusterRef, error)
	// Client reads the listings; nil means http.DefaultClient. Each read
	// is bounded by 10 s.
	Client    *http.Client
	Storage   *Storage   // nil skips the storage quota
	Admission *Admission // nil skips the registry
	// Every is the interval; DefaultReconcileEvery when not positive.
	Every time.Duration
	Log   *zap.Logger
	// OnReporting, when set, hears for each cluster whose listing settled
	// it whether the cell's broker reports retained bytes (a listing
	// without queues settles nothing), so that it can be recorded where
	// the CLI and the console read it.
	OnReporting func(ctx context.Context, ref ClusterRef, reported bool)
}

func (r *Reconciler) logger() *zap.Logger {
	if r.Log == nil {
		return zap.NewNop()
	}
	return r.Log
}

// Run reconciles at once and then every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	every := r.Every
	if every <= 0 {
		every = DefaultReconcileEvery
	}
	for {
		if err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger().Warn("inventory reconcile pass incomplete", zap.Error(err))
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// RunOnce runs one pass over every cluster, one after the other. A cluster
// whose inventory cannot be read is left as it was and does not stop the
// others; the returned error joins every failure.
func (r *Reconciler) RunOnce(ctx context.Context) error {
	if r.Clusters == nil {
		return errors.New("inventory reconciler: no cluster source")
	}
	refs, err := r.Clusters(ctx)
	if err != nil {
		return fmt.Errorf("inventory reconciler: listing clusters: %w", err)
	}
	log := r.logger()
	var errs []error
	ids := make([]string, 0, len(refs))
	for _, c := range refs {
		ids = append(ids, c.ID)
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		inv, err := ReadInventory(ctx, r.Client, c)
		if err != nil {
			log.Warn("no usable queue inventory, skipping cluster", zap.String("cluster", c.ID), zap.Error(err))
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.ID, err))
			continue
		}
		if r.Storage != nil {
			blocked, changed := r.Storage.Observe(c.ID, inv, c.MaxRetainedBytes)
			switch {
			case changed && blocked:
				log.Warn("storage quota exceeded; pushes blocked", zap.String("cluster", c.ID),
					zap.String("kind", "storage"), zap.Bool("blocked", true),
					zap.Int64("retained_bytes", inv.RetainedBytes), zap.Int64("max", int64(c.MaxRetainedBytes)))
			case changed:
				log.Info("storage back under quota; pushes unblocked", zap.String("cluster", c.ID),
					zap.String("kind", "storage"), zap.Int64("retained_bytes", inv.RetainedBytes))
			}
		}
		if r.OnReporting != nil && (inv.Supported || len(inv.Queues) > 0) {
			r.OnReporting(ctx, c, inv.Supported)
		}
		if r.Admission != nil {
			if freed := r.Admission.Reconcile(c.ID, inv.Queues); freed > 0 {
				log.Info("registry: released queue slots for queues the broker no longer has",
					zap.String("cluster", c.ID), zap.String("kind", "queues"),
					zap.Int("freed", freed), zap.Int("live", len(inv.Queues)))
			}
		}
	}
	if r.Storage != nil && ctx.Err() == nil {
		r.Storage.Retain(ids)
	}
	return errors.Join(errs...)
}
