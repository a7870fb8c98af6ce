package tenancy

import (
	"context"
	"fmt"
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
	// Record stores a verdict in the control-plane database, for the cell
	// as the probe reached it (its URL and secret).
	Record func(ctx context.Context, cell ProbeCell, verdict TenantScoping, detail string) error
	// Keeper returns the id of the cluster a cell that does not scope
	// keeps serving (the first one placed on it).
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
	// Confirmations is how many scoped probes in a row, each with fresh
	// names, lift a cell to scoped (default DefaultProbeConfirmations).
	Confirmations int
	Log           *zap.Logger
}

// CellIsolation decides, per cell, which clusters the gateway may serve
// there. A cell whose broker is known to scope by x-queen-tenant serves
// all its clusters. Any other cell, not scoping or not known to since the
// gateway started or since it was last unreachable, serves only its
// keeper: the first cluster placed on it, so that adding a cluster by mistake never
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
	judgement  cellJudgement
	generation uint64        // counts resets: a probe begun before one is discarded
	decided    chan struct{} // closed when the judgement settled since the last reset
	settled    bool          // decided is closed
	busy       bool          // a worker is reading the keeper or probing
	nextProbe  time.Time
	nextKeeper time.Time
	detail     string
	checkedAt  time.Time
	failures   int           // undecided probes in a row
	logged     TenantScoping // the verdict last written to the log
	loggedBad  bool          // the contradiction was last written to the log
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

// reset forgets what is known of the cell's broker: the verdict goes back
// to what the operator's statement alone says, a probe is due at once,
// and a probe already running is discarded when it ends; s.mu must be
// held.
func (s *cellIsolationState) reset(stated string) {
	s.judgement = newJudgement(stated)
	s.generation++
	v := s.judgement.verdict
	s.verdict.Store(&v)
	if s.settled {
		s.decided, s.settled = make(chan struct{}), false
	}
	s.failures = 0
	s.nextProbe = time.Time{}
	// A cell stated unscoped is settled by its worker, once it has read
	// the keeper (requests wait for that) and recorded the statement.
}

// notProbed is the next probe of a cell stated unscoped: never.
var notProbed = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

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
	if cfg.Confirmations <= 0 {
		cfg.Confirmations = DefaultProbeConfirmations
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
	return ci.Decide(cell, clusterID).Serve
}

// Decide is Admit without waiting, with the verdict it went by.
func (ci *CellIsolation) Decide(cell ProbeCell, clusterID string) IsolationDecision {
	return ci.state(cell).decide(clusterID)
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
// first sight. The cell's address and credential are kept current: a new
// URL, secret or stated tenancy is another broker as far as the verdict
// goes, so it resets the verdict and the cell is probed at once.
func (ci *CellIsolation) state(cell ProbeCell) *cellIsolationState {
	if v, ok := ci.cells.Load(cell.ID); ok {
		s := v.(*cellIsolationState)
		if c := s.cell.Load(); *c != cell {
			ci.cellChanged(s, cell)
		}
		return s
	}
	first := cell
	s := &cellIsolationState{decided: make(chan struct{}), refusedLog: map[string]bool{}}
	s.cell.Store(&first)
	s.reset(cell.Tenancy)
	v, loaded := ci.cells.LoadOrStore(cell.ID, s)
	if !loaded {
		ci.poke()
	}
	return v.(*cellIsolationState)
}

// cellChanged keeps the cell's new description, and resets its verdict
// unless only its slug changed.
func (ci *CellIsolation) cellChanged(s *cellIsolationState, cell ProbeCell) {
	s.mu.Lock()
	old := *s.cell.Load()
	if old == cell { // another request got here first
		s.mu.Unlock()
		return
	}
	moved := cell // only a changed cell is copied to the heap
	s.cell.Store(&moved)
	broker := old.BaseURL != cell.BaseURL || old.Secret != cell.Secret || old.Tenancy != cell.Tenancy
	if broker {
		s.reset(cell.Tenancy)
		s.detail = "the cell's URL, credential or stated tenancy changed; probing again"
		s.logged, s.loggedBad = "", false
		clear(s.refusedLog)
	}
	s.mu.Unlock()
	if broker {
		ci.log.Warn("cell changed (URL, credential or stated tenancy): its verdict is reset and it serves only its keeper until probed again",
			zap.String("cell", cell.Slug), zap.Bool("url_changed", old.BaseURL != cell.BaseURL),
			zap.Bool("credential_changed", old.Secret != cell.Secret), zap.String("stated", cell.Tenancy))
		ci.poke()
	}
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
	stated := s.cell.Load().Tenancy
	if stated == StatedUnscoped {
		return // the keeper only, whatever answers there
	}
	// Already unknown: a probe is due or backing off; resetting again at
	// every failed request would probe a cell that is down in a loop.
	if *s.verdict.Load() == ScopingUnknown {
		return
	}
	s.mu.Lock()
	s.reset(stated)
	s.detail = "cell was unreachable; probing again"
	s.mu.Unlock()
	ci.log.Warn("cell unreachable; serving only its keeper (the first cluster placed on it) until its broker is probed again",
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
	ci.log.Error("cluster refused: its cell's broker does not keep clusters apart, and the cell serves only its keeper (the first cluster placed on it)",
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
				again := s.nextProbe.IsZero() // reset while the worker ran
				s.mu.Unlock()
				if again {
					ci.poke()
				}
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

// probe probes the cell, and again at once while a run of confirmations
// is not complete, then records the verdict.
func (ci *CellIsolation) probe(ctx context.Context, s *cellIsolationState) {
	s.mu.Lock()
	generation := s.generation
	s.mu.Unlock()
	cell := *s.cell.Load()
	if cell.Tenancy == StatedUnscoped {
		ci.recordStatedUnscoped(ctx, s, cell, generation)
		return
	}
	var (
		probed TenantScoping
		err    error
		more   = true
	)
	for more {
		probed, err = ci.cfg.Probe(ctx, cell)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if s.generation != generation {
			s.mu.Unlock()
			return // the cell changed meanwhile: this was another broker
		}
		more = s.judgement.apply(cell.Tenancy, probed, ci.cfg.Confirmations)
		s.mu.Unlock()
	}
	j, changed, contradictionNew := ci.conclude(s, cell, probed, err)
	if changed || contradictionNew {
		ci.logVerdict(cell, j, err)
	}
	if j.verdict == ScopingUnknown && !changed {
		return // an undecided probe is recorded once, not at every retry
	}
	s.mu.Lock()
	detail := s.detail
	s.mu.Unlock()
	if rerr := ci.cfg.Record(ctx, cell, recordedVerdict(j), detail); rerr != nil {
		ci.log.Warn("cell isolation verdict not recorded in the database", zap.String("cell", cell.Slug), zap.Error(rerr))
	}
}

// conclude publishes the judgement after a run of probes and schedules the
// next one.
func (ci *CellIsolation) conclude(s *cellIsolationState, cell ProbeCell, probed TenantScoping, err error) (j cellJudgement, changed, contradictionNew bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j = s.judgement
	s.checkedAt = time.Now()
	s.detail = judgementDetail(cell, j, probed, err, ci.cfg.Confirmations)
	if probed == ScopingUnknown {
		// Back off while the cell does not answer: Retry, doubling, at
		// most a minute.
		s.nextProbe = s.checkedAt.Add(min(ci.cfg.Retry<<min(s.failures, 6), max(time.Minute, ci.cfg.Retry)))
		s.failures++
	} else {
		s.nextProbe = s.checkedAt.Add(ci.cfg.Every)
		s.failures = 0
	}
	changed = s.logged != j.verdict
	contradictionNew = j.contradicted && !s.loggedBad
	s.logged, s.loggedBad = j.verdict, j.contradicted
	v := j.verdict
	s.verdict.Store(&v)
	if j.settled() {
		s.settle()
	}
	return j, changed, contradictionNew
}

// recordedVerdict is what the database holds of a judgement: what the
// probes found (a contradicted statement records unscoped).
func recordedVerdict(j cellJudgement) TenantScoping {
	if j.contradicted {
		return ScopingUnscoped
	}
	return j.verdict
}

// recordStatedUnscoped records, once per reset, that a cell stated
// unscoped is not probed.
func (ci *CellIsolation) recordStatedUnscoped(ctx context.Context, s *cellIsolationState, cell ProbeCell, generation uint64) {
	s.mu.Lock()
	if s.generation != generation {
		s.mu.Unlock()
		return
	}
	s.nextProbe = notProbed
	s.settle()
	if s.logged == ScopingUnscoped {
		s.mu.Unlock()
		return
	}
	s.logged = ScopingUnscoped
	s.checkedAt = time.Now()
	s.detail = "stated unscoped by the operator: not probed; only the keeper is served"
	detail := s.detail
	s.mu.Unlock()
	ci.log.Info("cell stated unscoped by the operator: only its keeper is served, and it is not probed", zap.String("cell", cell.Slug))
	if err := ci.cfg.Record(ctx, cell, ScopingUnknown, detail); err != nil {
		ci.log.Warn("cell isolation verdict not recorded in the database", zap.String("cell", cell.Slug), zap.Error(err))
	}
}

// contradictionRemedy is what the operator should do about a cell stated
// scoped whose broker a probe found unscoped.
const contradictionRemedy = "the cell is stated scoped but its broker ignores x-queen-tenant: fix the broker (run one with tenancy at the cell's URL), or state the truth with caddy queen cell update <cell> --tenancy probe|unscoped and move the other clusters to dedicated cells (caddy queen cluster move)"

func judgementDetail(cell ProbeCell, j cellJudgement, probed TenantScoping, err error, need int) string {
	switch {
	case j.contradicted:
		return "CONTRADICTION: stated scoped, but a probe found that the broker ignores x-queen-tenant (one shared namespace); only the keeper is served. Remedy: " + contradictionRemedy
	case j.verdict == ScopingScoped && cell.Tenancy == StatedScoped && probed != ScopingScoped:
		msg := "stated scoped by the operator; the probe has not confirmed it"
		if err != nil {
			msg += " (probe undecided: " + err.Error() + ")"
		}
		return msg
	case j.verdict == ScopingScoped:
		return "the broker keeps a namespace per x-queen-tenant"
	case j.verdict == ScopingUnscoped:
		return "the broker ignores x-queen-tenant: one shared namespace; only the keeper (the cluster placed first) is served"
	case err != nil:
		return "probe undecided: " + err.Error()
	case probed == ScopingScoped:
		return fmt.Sprintf("%d of %d probes in a row said scoped; not yet confirmed", j.streak, need)
	}
	return ""
}

func (ci *CellIsolation) logVerdict(cell ProbeCell, j cellJudgement, err error) {
	switch {
	case j.contradicted:
		ci.log.Error("CELL TENANCY CONTRADICTED: the cell is stated scoped, but a probe found that its broker ignores x-queen-tenant; only its keeper is served, every other cluster on it is refused with cell_not_isolated",
			zap.String("cell", cell.Slug), zap.String("stated", cell.Tenancy), zap.String("probed", string(ScopingUnscoped)),
			zap.String("remedy", contradictionRemedy))
	case j.verdict == ScopingScoped:
		ci.log.Info("cell broker scopes by tenant: all its clusters are served", zap.String("cell", cell.Slug), zap.String("stated", cell.Tenancy))
	case j.verdict == ScopingUnscoped:
		// The normal mode in front of the public broker, which has no
		// tenancy: nothing is wrong until a second cluster is refused
		// (NoteRefusal says that at error level).
		ci.log.Info("cell broker does not scope by tenant (x-queen-tenant is ignored): only the cell's keeper is served, every other cluster on it is refused with cell_not_isolated",
			zap.String("cell", cell.Slug),
			zap.String("remedy", "give each other cluster a dedicated cell (caddy queen cluster move), or run a broker with tenancy on this cell"))
	default:
		ci.log.Warn("cell isolation probe undecided: only the cell's keeper is served until probes decide",
			zap.String("cell", cell.Slug), zap.Error(err))
	}
}

// CellVerdict is one cell's isolation state, for readiness and metrics.
type CellVerdict struct {
	CellID   string
	CellSlug string
	// Stated is the operator's statement (StatedProbe, StatedScoped,
	// StatedUnscoped).
	Stated  string
	Verdict TenantScoping
	// Contradicted: stated scoped, but a decided probe found unscoped.
	Contradicted bool
	Detail       string
	CheckedAt    time.Time
	Keeper       string
}

// Verdicts returns every known cell's state, ordered by cell slug.
func (ci *CellIsolation) Verdicts() []CellVerdict {
	var out []CellVerdict
	ci.cells.Range(func(k, v any) bool {
		s := v.(*cellIsolationState)
		cell := s.cell.Load()
		cv := CellVerdict{CellID: k.(string), CellSlug: cell.Slug, Stated: cell.Tenancy, Verdict: *s.verdict.Load()}
		if kp := s.keeper.Load(); kp != nil {
			cv.Keeper = *kp
		}
		s.mu.Lock()
		cv.Detail, cv.CheckedAt, cv.Contradicted = s.detail, s.checkedAt, s.judgement.contradicted
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
