package tenancy

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// CellIsolationConfig configures CellIsolation. Zero durations take the
// defaults noted on each.
type CellIsolationConfig struct {
	// Probe decides a cell's scoping (ProbeTenantScoping in production).
	Probe func(ctx context.Context, cell ProbeCell) (TenantScoping, error)
	// Record stores a verdict in the control-plane database.
	Record func(ctx context.Context, cellID string, verdict TenantScoping, detail string) error
	// Keeper returns the id of the cluster a cell that does not scope
	// keeps serving (the oldest one on it).
	Keeper func(ctx context.Context, cellID string) (string, error)
	// Every is how often a cell is probed again while all goes well
	// (default 15 minutes).
	Every time.Duration
	// Retry is how soon a probe that could not decide is tried again
	// (default 5 seconds).
	Retry time.Duration
	// KeeperEvery is how often each cell's keeper is read again (default
	// 15 seconds), so that removing the keeper hands the cell on.
	KeeperEvery time.Duration
	// FirstWait bounds how long a request of another cluster waits for a
	// cell's first verdict before it is refused (default 3 seconds).
	FirstWait time.Duration
	Log       *zap.Logger
}

// CellIsolation decides, per cell, which clusters the gateway may serve
// there. A cell whose broker is known to scope by x-queen-tenant serves
// all its clusters. Any other cell, not scoping or not known to since the
// gateway started or since it was last unreachable, serves only its
// keeper: its oldest cluster, so that adding a cluster by mistake never
// takes the first one down.
type CellIsolation struct {
	cfg   CellIsolationConfig
	log   *zap.Logger
	cells sync.Map // cell id -> *cellIsolationState
	kick  chan struct{}
}

// cellIsolationState is one cell's verdict and keeper. verdict and keeper
// are read on every request without the lock.
type cellIsolationState struct {
	cell    atomic.Pointer[ProbeCell]
	verdict atomic.Pointer[TenantScoping]
	keeper  atomic.Pointer[string]

	mu         sync.Mutex
	decided    chan struct{} // closed when a probe has decided since the last reset (not by an undecided one)
	settled    bool          // decided is closed
	busy       bool          // a worker is reading the keeper or probing
	nextProbe  time.Time
	nextKeeper time.Time
	detail     string
	checkedAt  time.Time
	failures   int           // undecided probes in a row
	logged     TenantScoping // the verdict last written to the log
	refusedLog map[string]bool
}

// awaitDecision returns a channel closed once a probe has run since the
// verdict was last reset.
func (s *cellIsolationState) awaitDecision() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decided
}

// settle closes the decision channel; s.mu must be held.
func (s *cellIsolationState) settle() {
	if !s.settled {
		close(s.decided)
		s.settled = true
	}
}

// unsettle resets the verdict to unknown and opens a new decision
// channel; s.mu must be held.
func (s *cellIsolationState) unsettle() {
	unknown := ScopingUnknown
	s.verdict.Store(&unknown)
	if s.settled {
		s.decided, s.settled = make(chan struct{}), false
	}
	s.nextProbe = time.Time{}
	s.failures = 0
}

// NewCellIsolation returns a tracker; Run does its probing.
func NewCellIsolation(cfg CellIsolationConfig) *CellIsolation {
	if cfg.Every <= 0 {
		cfg.Every = 15 * time.Minute
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 5 * time.Second
	}
	if cfg.KeeperEvery <= 0 {
		cfg.KeeperEvery = 15 * time.Second
	}
	if cfg.FirstWait <= 0 {
		cfg.FirstWait = 3 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &CellIsolation{cfg: cfg, log: log, kick: make(chan struct{}, 1)}
}

// IsolationDecision is what Admit says about one cluster on its cell.
type IsolationDecision struct {
	Serve   bool
	Verdict TenantScoping
	// Keeper is the cluster the cell keeps serving when it does not scope
	// ("" when not known).
	Keeper string
}

// Admit decides whether cluster may be served on cell. A cell seen for the
// first time is probed at once, and a cluster other than the keeper waits
// (bounded by FirstWait and ctx) for the verdict instead of being refused
// while the probe runs.
func (ci *CellIsolation) Admit(ctx context.Context, cell ProbeCell, clusterID string) IsolationDecision {
	s := ci.state(cell)
	if d := s.decide(clusterID); d.Serve {
		return d
	}
	decided := s.awaitDecision()
	select {
	case <-decided:
		return s.decide(clusterID)
	default:
	}
	wait, cancel := context.WithTimeout(ctx, ci.cfg.FirstWait)
	defer cancel()
	retry := time.NewTicker(expediteSpacing)
	defer retry.Stop()
	for {
		ci.expediteProbe(s)
		select {
		case <-decided:
			return s.decide(clusterID)
		case <-wait.Done():
			return s.decide(clusterID)
		case <-retry.C:
		}
	}
}

// Serves is Admit without waiting: whether cluster may be served on cell
// by what is known now.
func (ci *CellIsolation) Serves(cell ProbeCell, clusterID string) bool {
	return ci.state(cell).decide(clusterID).Serve
}

func (s *cellIsolationState) decide(clusterID string) IsolationDecision {
	d := IsolationDecision{Verdict: *s.verdict.Load()}
	if k := s.keeper.Load(); k != nil {
		d.Keeper = *k
	}
	d.Serve = d.Verdict == ScopingScoped || (d.Keeper != "" && d.Keeper == clusterID)
	return d
}

// expediteSpacing is the least time between two probes of a cell that
// requests ask for.
const expediteSpacing = 250 * time.Millisecond

// expediteProbe has an undecided cell probed now rather than at its next
// retry (at most every expediteSpacing), so that a cell that answers again
// is decided by the first request that needs it.
func (ci *CellIsolation) expediteProbe(s *cellIsolationState) {
	s.mu.Lock()
	due := time.Since(s.checkedAt) >= expediteSpacing && !s.nextProbe.IsZero()
	if due {
		s.nextProbe = time.Time{}
	}
	s.mu.Unlock()
	if due {
		ci.poke()
	}
}

// state returns the cell's state, creating it (and asking for a probe) at
// first sight. The cell's address and credential are kept current.
func (ci *CellIsolation) state(cell ProbeCell) *cellIsolationState {
	if v, ok := ci.cells.Load(cell.ID); ok {
		s := v.(*cellIsolationState)
		if c := s.cell.Load(); *c != cell {
			moved := cell // only a changed cell is copied to the heap
			s.cell.Store(&moved)
		}
		return s
	}
	first := cell
	s := &cellIsolationState{decided: make(chan struct{}), refusedLog: map[string]bool{}}
	s.cell.Store(&first)
	unknown := ScopingUnknown
	s.verdict.Store(&unknown)
	v, loaded := ci.cells.LoadOrStore(cell.ID, s)
	if !loaded {
		ci.poke()
	}
	return v.(*cellIsolationState)
}

func (ci *CellIsolation) poke() {
	select {
	case ci.kick <- struct{}{}:
	default:
	}
}

// CellUnreachable forgets what is known of a cell's broker: whatever
// answers there next may be another broker, so until it has been probed
// again only the keeper is served.
func (ci *CellIsolation) CellUnreachable(cellID string) {
	v, ok := ci.cells.Load(cellID)
	if !ok {
		return
	}
	s := v.(*cellIsolationState)
	if *s.verdict.Load() == ScopingUnknown {
		return
	}
	s.mu.Lock()
	s.unsettle()
	s.detail = "cell was unreachable; probing again"
	s.mu.Unlock()
	ci.log.Warn("cell unreachable; serving only its oldest cluster until its broker is probed again",
		zap.String("cell", s.cell.Load().Slug))
	ci.poke()
}

// NoteRefusal logs once per cell and cluster that the cluster is refused,
// with what the operator should do.
func (ci *CellIsolation) NoteRefusal(cell ProbeCell, clusterSlug string, d IsolationDecision) {
	v, ok := ci.cells.Load(cell.ID)
	if !ok {
		return
	}
	s := v.(*cellIsolationState)
	s.mu.Lock()
	first := !s.refusedLog[clusterSlug]
	s.refusedLog[clusterSlug] = true
	s.mu.Unlock()
	if !first {
		return
	}
	ci.log.Error("cluster refused: its cell's broker does not keep clusters apart, and the cell serves only its oldest cluster",
		zap.String("cell", cell.Slug), zap.String("cluster", clusterSlug),
		zap.String("tenant_scoping", string(d.Verdict)), zap.String("serving_cluster_id", d.Keeper),
		zap.String("remedy", "move this cluster to a dedicated cell (caddy queen cluster move), or run a broker with tenancy on this cell"))
}

// Run probes cells as they become due and re-reads their keepers, until
// ctx ends.
func (ci *CellIsolation) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ci.RunOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ci.kick:
		case <-tick.C:
		}
	}
}

// RunOnce starts, for every cell with work due, a worker that re-reads
// its keeper and probes it; a cell has at most one worker at a time, so a
// cell that does not answer delays no other.
func (ci *CellIsolation) RunOnce(ctx context.Context) {
	now := time.Now()
	ci.cells.Range(func(_, v any) bool {
		s := v.(*cellIsolationState)
		s.mu.Lock()
		keeperDue, probeDue := !now.Before(s.nextKeeper), !now.Before(s.nextProbe)
		start := !s.busy && (keeperDue || probeDue)
		s.busy = s.busy || start
		s.mu.Unlock()
		if start {
			go func() {
				if keeperDue {
					ci.readKeeper(ctx, s)
				}
				if probeDue {
					ci.probe(ctx, s)
				}
				s.mu.Lock()
				s.busy = false
				s.mu.Unlock()
			}()
		}
		return ctx.Err() == nil
	})
}

func (ci *CellIsolation) readKeeper(ctx context.Context, s *cellIsolationState) {
	cell := s.cell.Load()
	id, err := ci.cfg.Keeper(ctx, cell.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.nextKeeper = time.Now().Add(ci.cfg.Retry)
		ci.log.Warn("cell keeper not read", zap.String("cell", cell.Slug), zap.Error(err))
		return
	}
	s.nextKeeper = time.Now().Add(ci.cfg.KeeperEvery)
	if old := s.keeper.Load(); old == nil || *old != id {
		s.keeper.Store(&id)
	}
}

func (ci *CellIsolation) probe(ctx context.Context, s *cellIsolationState) {
	cell := *s.cell.Load()
	verdict, err := ci.cfg.Probe(ctx, cell)
	if ctx.Err() != nil {
		return
	}
	detail := probeDetail(verdict, err)
	s.mu.Lock()
	s.checkedAt = time.Now()
	s.detail = detail
	if verdict == ScopingUnknown {
		// Back off while the cell does not answer: Retry, doubling, at
		// most a minute.
		s.nextProbe = s.checkedAt.Add(min(ci.cfg.Retry<<min(s.failures, 6), max(time.Minute, ci.cfg.Retry)))
		s.failures++
	} else {
		s.nextProbe = s.checkedAt.Add(ci.cfg.Every)
		s.failures = 0
	}
	changed := s.logged != verdict
	s.logged = verdict
	s.verdict.Store(&verdict)
	if verdict != ScopingUnknown {
		s.settle()
	}
	s.mu.Unlock()

	if changed {
		ci.logVerdict(cell, verdict, err)
	}
	if verdict == ScopingUnknown && !changed {
		return // an undecided probe is recorded once, not at every retry
	}
	if rerr := ci.cfg.Record(ctx, cell.ID, verdict, detail); rerr != nil {
		ci.log.Warn("cell isolation verdict not recorded in the database", zap.String("cell", cell.Slug), zap.Error(rerr))
	}
}

func probeDetail(v TenantScoping, err error) string {
	switch {
	case err != nil:
		return "probe undecided: " + err.Error()
	case v == ScopingScoped:
		return "the broker keeps a namespace per x-queen-tenant"
	case v == ScopingUnscoped:
		return "the broker ignores x-queen-tenant: one shared namespace; only the oldest cluster is served"
	}
	return ""
}

func (ci *CellIsolation) logVerdict(cell ProbeCell, v TenantScoping, err error) {
	switch v {
	case ScopingScoped:
		ci.log.Info("cell broker scopes by tenant: all its clusters are served", zap.String("cell", cell.Slug))
	case ScopingUnscoped:
		ci.log.Error("cell broker does not scope by tenant (x-queen-tenant is ignored): only the cell's oldest cluster is served, every other cluster on it is refused with cell_not_isolated",
			zap.String("cell", cell.Slug),
			zap.String("remedy", "give each other cluster a dedicated cell (caddy queen cluster move), or run a broker with tenancy on this cell"))
	default:
		ci.log.Warn("cell isolation probe undecided: only the cell's oldest cluster is served until a probe decides",
			zap.String("cell", cell.Slug), zap.Error(err))
	}
}

// CellVerdict is one cell's isolation state, for readiness and metrics.
type CellVerdict struct {
	CellID    string
	CellSlug  string
	Verdict   TenantScoping
	Detail    string
	CheckedAt time.Time
	Keeper    string
}

// Verdicts returns every known cell's state, ordered by cell slug.
func (ci *CellIsolation) Verdicts() []CellVerdict {
	var out []CellVerdict
	ci.cells.Range(func(k, v any) bool {
		s := v.(*cellIsolationState)
		cv := CellVerdict{CellID: k.(string), CellSlug: s.cell.Load().Slug, Verdict: *s.verdict.Load()}
		if kp := s.keeper.Load(); kp != nil {
			cv.Keeper = *kp
		}
		s.mu.Lock()
		cv.Detail, cv.CheckedAt = s.detail, s.checkedAt
		s.mu.Unlock()
		out = append(out, cv)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].CellSlug < out[j].CellSlug })
	return out
}

// ProbeRequestsPerHour is what the probe costs one cell in steady state.
func (ci *CellIsolation) ProbeRequestsPerHour() float64 {
	return probeRequests * float64(time.Hour) / float64(ci.cfg.Every)
}
