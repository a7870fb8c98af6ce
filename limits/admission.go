package limits

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/uuidtext"
)

// Queue and partition admission: the plan caps max_queues and
// max_partitions_per_queue, checked on every path that can create a queue or
// a partition (push, transaction, /configure, the streams cycle's sink, DLQ
// replay to a named destination).
//
// The broker owns which queues exist; queen_proxy.queues is a cache of it,
// one row per live queue with a partition count (never partition names).
// Admission loads a cluster's rows once (the only database read on the
// request path), then decides from memory; new pairs are persisted by a
// coalescing writer (Flush) and the per-cell reconciler corrects the picture
// from the broker's inventory.
//
// What counts toward max_partitions_per_queue: every partition of the queue
// except the one named "Default". The broker creates "Default" by itself
// (/configure does, and so does a push that names no partition), so it is
// not something a tenant asked for; a plan of N partitions allows N named
// partitions, so a tenant that asks for exactly N gets them. Persisted counts use
// the same unit, so the floor read back after a restart means what the
// gateway counts.
//
// After a restart (or an invalidation) the gateway knows how many partitions
// a queue has, not which: the first partitions written to after the load,
// up to that count, are taken to be the existing ones, so a queue at its cap
// keeps working on every partition it has after a restart as before it.
// A brand-new partition used before the existing ones are touched
// takes one of those places; that can exceed the cap by at most the loaded
// count, once per load, and the persisted count (a lower bound, raised with
// GREATEST) is never inflated by it.

// QueueRow is one queue of a cluster with its partition count.
type QueueRow struct {
	ClusterID, Name string
	Partitions      int
}

// AdmissionStore loads and persists the admission registry
// (queen_proxy.queues).
type AdmissionStore interface {
	// LoadQueues returns the live queues of a cluster.
	LoadQueues(ctx context.Context, clusterID string) ([]QueueRow, error)
	// PersistQueues raises the partition counts of the rows' queues
	// (inserting the queues that have no live row) in one statement.
	PersistQueues(ctx context.Context, rows []QueueRow) error
}

// QueueSweeper is an optional AdmissionStore method: mark deleted the live
// rows of a cluster whose queue is not in live. Flush calls it for clusters
// whose queues the reconciler found gone from the broker.
type QueueSweeper interface {
	SweepQueues(ctx context.Context, clusterID string, live []string) error
}

// AdmitResult is the verdict of Admit.
type AdmitResult uint8

const (
	// Admitted: every pair is within the caps, and the new ones are recorded.
	Admitted AdmitResult = iota
	// OverQueues: a new queue would exceed max_queues (403 quota_exceeded
	// "queue limit reached ({max})").
	OverQueues
	// OverPartitions: a new partition would exceed max_partitions_per_queue
	// (403 quota_exceeded "partition limit reached ({max})").
	OverPartitions
	// Unavailable: the cluster's registry could not be loaded from the
	// database, so the gateway cannot count. Nothing is recorded. The
	// recommended answer is to fail open (forward the request and log):
	// the broker, not this cache, is the source of truth for what exists,
	// the caps are plan limits rather than safety limits, and the reconciler
	// will bring the counts back from the broker. Failing closed would turn
	// a control-plane database outage into a produce outage for every
	// cluster that was not loaded yet.
	Unavailable
)

func (r AdmitResult) String() string {
	switch r {
	case Admitted:
		return "admitted"
	case OverQueues:
		return "queues"
	case OverPartitions:
		return "partitions"
	case Unavailable:
		return "unavailable"
	}
	return "unknown"
}

const (
	// admissionLoadTimeout bounds one load of a cluster's rows. The load is
	// shared by every request waiting for it, so it does not use any one
	// request's cancellation.
	admissionLoadTimeout = 5 * time.Second
	// admissionRetryAfter is how long a failed load is remembered before
	// the next request tries again, so a database outage does not put one
	// query on every request.
	admissionRetryAfter = time.Second
	// admissionFlushTimeout bounds the final flush when Run stops.
	admissionFlushTimeout = 5 * time.Second
	// DefaultAdmissionFlushEvery is the persister's default interval.
	DefaultAdmissionFlushEvery = time.Second
)

// Admission is the queue/partition registry of every cluster of the cell.
// It is safe for concurrent use. Keep one instance for the life of the
// process (across configuration reloads): it holds the admitted pairs.
type Admission struct {
	store AdmissionStore
	now   func() time.Time

	// Log receives the persister's warnings; nil means no logging.
	Log *zap.Logger

	mu       sync.RWMutex
	clusters map[string]*admCluster
	// clusterSet is a copy of clusters, replaced (under mu) when a cluster
	// is added, so that Admit finds its cluster without a lock.
	clusterSet atomic.Pointer[map[string]*admCluster]
	// lastCluster is the cluster Admit found last: a gateway's requests
	// come in runs for one cluster, and comparing its id is cheaper than
	// hashing it.
	lastCluster atomic.Pointer[admCluster]

	dirtyMu sync.Mutex
	dirty   map[admKey]int      // queue -> partition count to persist
	sweeps  map[string]struct{} // clusters whose rows need a sweep
}

type admKey struct{ cluster, queue string }

type admLoad uint8

const (
	admUnloaded admLoad = iota
	admLoading
	admLoaded
	admFailed
)

// admCluster is one cluster's registry.
type admCluster struct {
	id       string
	mu       sync.RWMutex
	state    admLoad
	ready    chan struct{} // closed when the load in progress ends
	gen      uint64        // bumped by Invalidate: a load for an older one is discarded
	loadErr  error
	failedAt time.Time
	queues   map[string]*admQueue
	// epoch counts the reconciler passes applied; see Reconcile.
	epoch uint64
	// early is an inventory received while the cluster was not loaded,
	// applied right after the load.
	early []QueueRow
	// known is the published set of admitted pairs (admissionknown.go),
	// nil while the cluster is not loaded; published is its size and
	// lagging counts the pairs it lacks since.
	known     atomic.Pointer[knownPairs]
	published int
	lagging   atomic.Int64
}

// admQueue is one queue's partition picture.
type admQueue struct {
	names map[string]struct{} // partitions known by name; may hold "Default"
	named int                 // names other than "Default"
	// floor is a lower bound on the queue's counted partitions, from the
	// database or the broker.
	floor int
	// budget is how many partitions the floor covered at load time that
	// have not been matched to a name yet: the next names seen are taken
	// to be those partitions.
	budget int
	// born is 0 for a queue known from the database or the broker, else
	// 1 + the cluster's epoch when this process admitted it.
	born uint64
}

// count is the number of partitions the gateway counts for the queue: every
// name it knows (other than "Default") plus the floor's partitions not yet
// matched to a name, and at least the floor.
func (q *admQueue) count() int { return max(q.named+q.budget, q.floor) }

// NewAdmission returns an empty registry over store.
func NewAdmission(store AdmissionStore) *Admission {
	return &Admission{
		store:    store,
		now:      time.Now,
		clusters: make(map[string]*admCluster),
		dirty:    make(map[admKey]int),
		sweeps:   make(map[string]struct{}),
	}
}

func (a *Admission) logger() *zap.Logger {
	if a.Log == nil {
		return zap.NewNop()
	}
	return a.Log
}

func (a *Admission) cluster(id string) *admCluster {
	if c := a.lastCluster.Load(); c != nil && c.id == id {
		return c
	}
	if set := a.clusterSet.Load(); set != nil {
		if c := (*set)[id]; c != nil {
			a.lastCluster.Store(c)
			return c
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clusters[id]
	if c == nil {
		c = &admCluster{id: id}
		a.clusters[id] = c
		set := make(map[string]*admCluster, len(a.clusters))
		for k, v := range a.clusters {
			set[k] = v
		}
		a.clusterSet.Store(&set)
	}
	return c
}

// Admit checks the distinct (queue, partition) pairs one request writes to
// against the cluster's caps and records them when all pass: either every
// new pair is recorded or none is. A pair already admitted is always
// allowed. max is the cap that refused (Unlimited otherwise). err is set
// only with Unavailable (the database load failed, or ctx ended while
// waiting for it).
//
// The first call for a cluster loads its rows (one query, shared by
// concurrent callers); every other call is answered from memory. New pairs
// are queued for the next Flush.
func (a *Admission) Admit(ctx context.Context, clusterID string, pairs []QueuePartition, lim Effective) (AdmitResult, Cap, error) {
	if len(pairs) == 0 {
		return Admitted, Unlimited, nil
	}
	c := a.cluster(clusterID)
	if c.knownAdmitted(pairs) {
		return Admitted, Unlimited, nil
	}
	// An Invalidate between the load and the check sends the caller back to
	// load; a cluster invalidated again and again gives up after a few.
	for attempt := 0; attempt < 3; attempt++ {
		if err := a.ensureLoaded(ctx, clusterID, c); err != nil {
			return Unavailable, Unlimited, err
		}
		if res, capHit, done := a.admitLoaded(clusterID, c, pairs, lim); done {
			return res, capHit, nil
		}
	}
	return Unavailable, Unlimited, errAdmissionReloading
}

// admitLoaded decides on a loaded cluster; done is false when the cluster
// is no longer loaded.
func (a *Admission) admitLoaded(clusterID string, c *admCluster, pairs []QueuePartition, lim Effective) (AdmitResult, Cap, bool) {
	// Fast path: every pair already admitted.
	c.mu.RLock()
	loaded := c.state == admLoaded
	known := loaded && c.allKnown(pairs)
	published := c.published
	c.mu.RUnlock()
	if known {
		c.noteSlowHit(published)
		return Admitted, Unlimited, true
	}
	if !loaded {
		return 0, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != admLoaded {
		return 0, 0, false
	}
	if c.allKnown(pairs) {
		c.noteUnpublishedLocked(1)
		return Admitted, Unlimited, true
	}
	plan, verdict, capHit := c.plan(pairs, lim)
	if verdict != Admitted {
		return verdict, capHit, true
	}
	a.commit(clusterID, c, plan)
	return Admitted, Unlimited, true
}

var errAdmissionReloading = errors.New("limits: cluster registry invalidated repeatedly while admitting")

// allKnown reports whether every pair is already admitted. c.mu is held.
func (c *admCluster) allKnown(pairs []QueuePartition) bool {
	for _, p := range pairs {
		q := c.queues[p.Queue]
		if q == nil {
			return false
		}
		if _, ok := q.names[p.Partition]; !ok {
			return false
		}
	}
	return true
}

// admPlan is the change a request makes to one queue, computed before
// anything is recorded.
type admPlan struct {
	queue  string
	q      *admQueue // nil for a new queue
	added  []string
	named  int
	budget int
	floor  int
}

// plan checks every pair and returns the changes to make, or the cap that
// refuses. c.mu is held for writing.
func (c *admCluster) plan(pairs []QueuePartition, lim Effective) ([]admPlan, AdmitResult, Cap) {
	var plans []admPlan
	newQueues := 0
	find := func(queue string) int {
		for i := range plans {
			if plans[i].queue == queue {
				return i
			}
		}
		return -1
	}
	for _, p := range pairs {
		i := find(p.Queue)
		if i < 0 {
			q := c.queues[p.Queue]
			if q == nil {
				if !lim.MaxQueues.IsUnlimited() && int64(len(c.queues)+newQueues+1) > int64(lim.MaxQueues) {
					return nil, OverQueues, lim.MaxQueues
				}
				newQueues++
				plans = append(plans, admPlan{queue: p.Queue})
			} else {
				plans = append(plans, admPlan{queue: p.Queue, q: q, named: q.named, budget: q.budget, floor: q.floor})
			}
			i = len(plans) - 1
		}
		pl := &plans[i]
		if pl.knows(p.Partition) {
			continue
		}
		switch {
		case p.Partition == DefaultPartition:
			// Free: not counted.
		case pl.budget > 0:
			// Taken to be one of the partitions the floor counts.
			pl.budget--
			pl.named++
		case lim.MaxPartitionsPerQueue.IsUnlimited() ||
			int64(max(pl.named+pl.budget, pl.floor)+1) <= int64(lim.MaxPartitionsPerQueue):
			pl.named++
		default:
			return nil, OverPartitions, lim.MaxPartitionsPerQueue
		}
		pl.added = append(pl.added, p.Partition)
	}
	return plans, Admitted, Unlimited
}

func (pl *admPlan) knows(partition string) bool {
	if pl.q != nil {
		if _, ok := pl.q.names[partition]; ok {
			return true
		}
	}
	for _, n := range pl.added {
		if n == partition {
			return true
		}
	}
	return false
}

// commit records planned changes and queues their rows for the persister.
// c.mu is held for writing.
func (a *Admission) commit(clusterID string, c *admCluster, plans []admPlan) {
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	added := 0
	defer func() { c.noteUnpublishedLocked(added) }()
	for i := range plans {
		pl := &plans[i]
		if len(pl.added) == 0 {
			continue
		}
		added += len(pl.added)
		q := pl.q
		if q == nil {
			q = &admQueue{names: make(map[string]struct{}, len(pl.added)), born: c.epoch + 1}
			c.queues[pl.queue] = q
		}
		for _, n := range pl.added {
			q.names[n] = struct{}{}
		}
		q.named, q.budget = pl.named, pl.budget
		a.markDirtyLocked(clusterID, pl.queue, q.count())
	}
}

// markDirtyLocked queues a row for the persister, keeping the highest count.
// a.dirtyMu is held.
func (a *Admission) markDirtyLocked(clusterID, queue string, count int) {
	k := admKey{clusterID, queue}
	if old, ok := a.dirty[k]; !ok || count > old {
		a.dirty[k] = count
	}
}

// ensureLoaded loads the cluster's rows once, sharing the load between
// concurrent callers.
func (a *Admission) ensureLoaded(ctx context.Context, clusterID string, c *admCluster) error {
	for {
		c.mu.Lock()
		switch c.state {
		case admLoaded:
			c.mu.Unlock()
			return nil
		case admLoading:
			ready := c.ready
			c.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		case admFailed:
			if a.now().Sub(c.failedAt) < admissionRetryAfter {
				err := c.loadErr
				c.mu.Unlock()
				return err
			}
		}
		c.state, c.ready = admLoading, make(chan struct{})
		gen, ready := c.gen, c.ready
		c.mu.Unlock()

		loadCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admissionLoadTimeout)
		rows, err := a.store.LoadQueues(loadCtx, clusterID)
		cancel()

		c.mu.Lock()
		switch {
		case c.gen != gen:
			// Invalidated while loading: the rows may predate the change.
			c.state = admUnloaded
		case err != nil:
			c.state, c.loadErr, c.failedAt = admFailed, err, a.now()
		default:
			a.seed(clusterID, c, rows)
			c.state = admLoaded
			c.publishKnownLocked()
		}
		close(ready)
		c.mu.Unlock()
	}
}

// seed builds a cluster's registry from its rows, the rows still waiting
// for the persister, and an inventory that arrived before the load. c.mu is
// held for writing.
func (a *Admission) seed(clusterID string, c *admCluster, rows []QueueRow) {
	c.queues = make(map[string]*admQueue, len(rows))
	for _, r := range rows {
		n := max(r.Partitions, 0)
		if q := c.queues[r.Name]; q != nil {
			n = max(n, q.floor)
		}
		c.queues[r.Name] = &admQueue{names: map[string]struct{}{}, floor: n, budget: n}
	}
	// Rows admitted before an invalidation and not yet flushed are newer
	// than the database: they count, and an early inventory must not drop
	// them.
	a.dirtyMu.Lock()
	for k, n := range a.dirty {
		if k.cluster != clusterID {
			continue
		}
		q := c.queues[k.queue]
		if q == nil {
			q = &admQueue{names: map[string]struct{}{}}
			c.queues[k.queue] = q
		}
		q.born = c.epoch + 1
		if n > q.floor {
			q.budget += n - q.floor
			q.floor = n
		}
	}
	a.dirtyMu.Unlock()
	if c.early != nil {
		early := c.early
		c.early = nil
		a.reconcileLocked(clusterID, c, early)
	}
}

// Invalidate drops a cluster's registry (its configuration or queues
// changed, as a NOTIFY says); the next Admit reloads it from the database.
// Partition names are forgotten as after a restart; the counts keep the
// caps. Rows waiting for the persister are kept.
func (a *Admission) Invalidate(clusterID string) {
	a.mu.RLock()
	c := a.clusters[clusterID]
	a.mu.RUnlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.gen++
	if c.state != admLoading {
		c.state = admUnloaded
	}
	c.queues, c.early, c.loadErr = nil, nil, nil
	c.forgetKnownLocked()
	c.mu.Unlock()
}

// Reconcile applies the broker's inventory of a cluster (from
// ReadInventory): queues the broker no longer has are forgotten (their
// slots freed, their rows swept by the next Flush) and partition counts are
// raised to what the broker reports. It returns how many queues were
// forgotten.
//
// A queue this process admitted after the previous Reconcile of the cluster
// is kept even when the inventory lacks it: the inventory may have been read
// before its first push reached the broker. The reconciler must therefore
// read and apply one cluster's inventories in order.
//
// The broker's partition count includes "Default" when the queue has one,
// which the listing does not say; the count minus one is what is certain,
// so that is the floor taken from the broker.
func (a *Admission) Reconcile(clusterID string, queues []QueueRow) (forgotten int) {
	c := a.cluster(clusterID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != admLoaded {
		c.early = append([]QueueRow(nil), queues...)
		if c.early == nil {
			c.early = []QueueRow{}
		}
		return 0
	}
	return a.reconcileLocked(clusterID, c, queues)
}

// reconcileLocked applies an inventory to a loaded cluster. c.mu is held for
// writing.
func (a *Admission) reconcileLocked(clusterID string, c *admCluster, queues []QueueRow) int {
	c.epoch++
	live := make(map[string]struct{}, len(queues))
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	for _, r := range queues {
		live[r.Name] = struct{}{}
		floor := max(r.Partitions-1, 0)
		q := c.queues[r.Name]
		if q == nil {
			q = &admQueue{names: map[string]struct{}{}, floor: floor, budget: floor}
			c.queues[r.Name] = q
			a.markDirtyLocked(clusterID, r.Name, q.count())
			continue
		}
		if floor > q.count() {
			a.markDirtyLocked(clusterID, r.Name, floor)
		}
		q.floor = max(q.floor, floor)
	}
	forgotten := 0
	for name, q := range c.queues {
		if _, ok := live[name]; ok || q.born >= c.epoch {
			continue
		}
		delete(c.queues, name)
		delete(a.dirty, admKey{clusterID, name})
		forgotten++
	}
	if forgotten > 0 {
		a.sweeps[clusterID] = struct{}{}
		if c.state == admLoaded {
			c.publishKnownLocked() // the set must not keep a forgotten queue's pairs
		}
	}
	return forgotten
}

// Pending reports how many queue rows wait for the persister.
func (a *Admission) Pending() int {
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	return len(a.dirty)
}

// Flush writes every queue row admitted since the last flush in one
// statement (PersistQueues), then sweeps the clusters the reconciler found
// queues gone from. Rows that fail stay queued for the next flush. Rows that
// the table cannot hold (a blank name, NUL or invalid UTF-8 in it, a cluster
// id that is not a UUID) stay in memory only.
func (a *Admission) Flush(ctx context.Context) error {
	a.dirtyMu.Lock()
	batch, sweeps := a.dirty, a.sweeps
	if len(batch) == 0 && len(sweeps) == 0 {
		a.dirtyMu.Unlock()
		return nil
	}
	a.dirty, a.sweeps = make(map[admKey]int), make(map[string]struct{})
	a.dirtyMu.Unlock()

	var errs []error
	rows := make([]QueueRow, 0, len(batch))
	for k, n := range batch {
		if persistable(k.cluster, k.queue) {
			rows = append(rows, QueueRow{ClusterID: k.cluster, Name: k.queue, Partitions: n})
		}
	}
	if len(rows) > 0 {
		if err := a.store.PersistQueues(ctx, rows); err != nil {
			a.requeue(batch, nil)
			errs = append(errs, err)
		}
	}
	if sw, ok := a.store.(QueueSweeper); ok {
		for id := range sweeps {
			live, loaded := a.liveNames(id)
			if !loaded || !uuidtext.Valid(id) {
				continue
			}
			if err := sw.SweepQueues(ctx, id, live); err != nil {
				a.requeue(nil, map[string]struct{}{id: {}})
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// requeue merges a failed batch back, keeping the highest counts.
func (a *Admission) requeue(batch map[admKey]int, sweeps map[string]struct{}) {
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	for k, n := range batch {
		a.markDirtyLocked(k.cluster, k.queue, n)
	}
	for id := range sweeps {
		a.sweeps[id] = struct{}{}
	}
}

// liveNames returns the queues a loaded cluster holds.
func (a *Admission) liveNames(clusterID string) ([]string, bool) {
	a.mu.RLock()
	c := a.clusters[clusterID]
	a.mu.RUnlock()
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.state != admLoaded {
		return nil, false
	}
	names := make([]string, 0, len(c.queues))
	for n := range c.queues {
		names = append(names, n)
	}
	return names, true
}

// Run flushes every interval (DefaultAdmissionFlushEvery when every is not
// positive) until ctx ends, then flushes once more within a bounded time.
func (a *Admission) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultAdmissionFlushEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admissionFlushTimeout)
			if err := a.Flush(fctx); err != nil {
				a.logger().Warn("queue registry: final flush failed; rows not persisted",
					zap.Int("pending", a.Pending()), zap.Error(err))
			}
			cancel()
			return
		case <-t.C:
			if err := a.Flush(ctx); err != nil && ctx.Err() == nil {
				a.logger().Warn("queue registry: flush failed; rows kept for the next one",
					zap.Int("pending", a.Pending()), zap.Error(err))
			}
		}
	}
}

// persistable reports whether a queue row can be stored in
// queen_proxy.queues (uuid cluster id; text name that is not blank).
func persistable(clusterID, name string) bool {
	return uuidtext.Valid(clusterID) && strings.Trim(name, " ") != "" &&
		utf8.ValidString(name) && !strings.ContainsRune(name, 0)
}
