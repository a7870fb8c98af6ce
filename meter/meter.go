package meter

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Op is a usage operation class, the op_class column of usage_minutes.
type Op string

// The operation classes (the database's CHECK list).
const (
	OpPush      Op = "push"
	OpDelivery  Op = "delivery"
	OpTxn       Op = "txn"
	OpConfigure Op = "configure"
	OpRead      Op = "read"
)

// Billed reports whether the messages of an op class are billable
// messages: those that pushes and transactions stored. Deliveries and reads
// are counted, not billed, so a message is billed once however often it is
// read.
func (o Op) Billed() bool { return o == OpPush || o == OpTxn }

// BilledOpsSQL is Billed as a SQL list, for the queries that sum billable
// messages.
const BilledOpsSQL = "('" + string(OpPush) + "', '" + string(OpTxn) + "')"

// Valid reports whether o is one of the five operation classes.
func (o Op) Valid() bool {
	switch o {
	case OpPush, OpDelivery, OpTxn, OpConfigure, OpRead:
		return true
	}
	return false
}

// Billable reports whether the class's messages are billed (and count
// toward the monthly quota): the messages stored by pushes and
// transactions. Deliveries and reads are counted, not billed.
func (o Op) Billable() bool { return o == OpPush || o == OpTxn }

// Sample is the usage of one proxied request (or a part of it) for a
// cluster. Negative counts are treated as 0.
type Sample struct {
	ClusterID string // the cluster's UUID
	Op        Op
	Reqs      int64
	Msgs      int64
	BytesIn   int64
	BytesOut  int64
	// Unanswered is the part of Msgs billed without the broker's answer:
	// a produce request that was forwarded and never answered (the cell's
	// connection broke, or the upstream timeout passed, once the request
	// had been written) is billed its admitted items, since the broker may
	// have stored them. It is counted within Msgs, never beside it, so
	// anything that reads Msgs bills it; more than Msgs is cut to Msgs.
	Unanswered int64
}

// Defaults for the zero values of Config.
const (
	DefaultSpoolDir         = "./queengate-spool"
	DefaultFlushEvery       = 15 * time.Second
	DefaultShutdownDrain    = 5 * time.Second
	DefaultSpoolRotateBytes = 5 << 20
	DefaultFlushTimeout     = 10 * time.Second
	// DefaultCheckpointEvery is the crash bound: what was recorded is on
	// disk, fsync'd, within this long, so a SIGKILL loses at most about
	// this much usage (doc.go, "Crash safety").
	DefaultCheckpointEvery = time.Second
)

// Config configures a Meter. Only Pool is required.
type Config struct {
	Pool             *pgxpool.Pool    // the control-plane database
	SpoolDir         string           // default DefaultSpoolDir; created if missing
	FlushEvery       time.Duration    // default 15 s
	ShutdownDrain    time.Duration    // budget of the final drain in Run; default 5 s
	SpoolRotateBytes int64            // a spool file is closed once it holds this much; default 5 MiB
	FlushTimeout     time.Duration    // one periodic flush or replay statement; default 10 s
	CheckpointEvery  time.Duration    // usage is journaled (fsync'd) at least this often while Run runs; default 1 s
	Now              func() time.Time // default time.Now
	Log              *zap.Logger      // default no logging
}

// numShards spreads clusters over independently locked maps.
const numShards = 32

type aggKey struct {
	cluster string
	op      Op
	minute  int64 // unix seconds / 60, UTC
}

type counters struct {
	reqs, msgs, bytesIn, bytesOut int64
	unanswered                    int64 // of msgs
	// dirty is set by Record and cleared when a checkpoint takes the
	// counts: the entry stays in the map zeroed, so the next second's
	// Record on the same key neither allocates nor grows the map.
	dirty bool
}

type shard struct {
	mu sync.Mutex
	m  map[aggKey]*counters
	_  [48]byte // keep neighbouring shards' locks on separate cache lines
}

// Meter aggregates usage per (cluster, operation class, UTC minute) in
// memory and writes it to queen_proxy.usage_minutes, falling back to an
// on-disk spool when the database does not take it. Every write carries a
// unique batch id recorded in the same statement (queen_proxy.meter_batches),
// so a batch is added exactly once however often it is retried.
type Meter struct {
	cfg   Config
	now   func() time.Time
	log   *zap.Logger
	pool  *pgxpool.Pool
	seed  maphash.Seed
	spool *spool

	shards  [numShards]shard
	pending atomic.Int64 // dirty entries in the shards

	// While Run runs with the real clock, a ticker keeps the current minute
	// here so that Record need not read the clock (about half its cost).
	realClock    bool
	coarseOn     atomic.Bool
	coarseMinute atomic.Int64

	// Once Run has begun its final drain, a Record (a request that was still
	// in flight, e.g. across a Caddy reload) schedules a late drain.
	closed    atomic.Bool
	lateMu    sync.Mutex
	lateTimer *time.Timer

	flushMu  sync.Mutex // one flush or drain at a time
	replayMu sync.Mutex // one replay at a time
	br       breaker

	// The journal (journal.go): batches sealed from the shards, on disk
	// unless the disk failed, not yet in the database. Under journalMu,
	// which is taken before any shard lock.
	journalMu      sync.Mutex
	held           []heldBatch
	heldIndex      map[string]map[minuteOp]*heldTotals // per cluster, for Unflushed
	heldRows       atomic.Int64                        // rows of held, for Stats
	journalFailing bool                                // the last journal write failed (logged once)

	flushOK, flushFailed, spooledRows, replayedRows atomic.Uint64
	lastFlush                                       atomic.Int64 // nanoseconds
}

// New returns a Meter. It creates the spool directory but does not touch
// the database: Run (or ReplaySpool) replays what an earlier process
// spooled.
func New(cfg Config) (*Meter, error) {
	if cfg.Pool == nil {
		return nil, errors.New("meter: Config.Pool is required")
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = DefaultSpoolDir
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = DefaultFlushEvery
	}
	if cfg.ShutdownDrain <= 0 {
		cfg.ShutdownDrain = DefaultShutdownDrain
	}
	if cfg.SpoolRotateBytes <= 0 {
		cfg.SpoolRotateBytes = DefaultSpoolRotateBytes
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = DefaultFlushTimeout
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	realClock := cfg.Now == nil
	if realClock {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.SpoolRotateBytes, cfg.Log)
	if err != nil {
		return nil, err
	}
	m := &Meter{
		cfg:   cfg,
		now:   cfg.Now,
		log:   cfg.Log,
		pool:  cfg.Pool,
		seed:  maphash.MakeSeed(),
		spool: sp,
		br:    newBreaker(),

		heldIndex: make(map[string]map[minuteOp]*heldTotals),
		realClock: realClock,
	}
	for i := range m.shards {
		m.shards[i].m = make(map[aggKey]*counters)
	}
	return m, nil
}

// minuteOf is the aggregation minute of t: unix seconds / 60.
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	if s < 0 {
		return (s - 59) / 60
	}
	return s / 60
}

// minuteNow is the current aggregation minute.
func (m *Meter) minuteNow() int64 {
	if m.coarseOn.Load() {
		return m.coarseMinute.Load()
	}
	return minuteOf(m.now())
}

// startMinuteClock keeps coarseMinute current until the returned stop is
// called: it wakes just after each minute boundary, and at least every
// second so that a step of the wall clock is followed quickly. A sample
// recorded within that millisecond after a boundary lands in the minute
// before, which only moves it, never loses or doubles it.
func (m *Meter) startMinuteClock() (stop func()) {
	m.coarseMinute.Store(minuteOf(time.Now()))
	m.coarseOn.Store(true)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(time.Second)
		defer t.Stop()
		for {
			now := time.Now()
			m.coarseMinute.Store(minuteOf(now))
			wait := time.Unix((minuteOf(now)+1)*60, 0).Sub(now) + time.Millisecond
			t.Reset(min(wait, time.Second))
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		m.coarseOn.Store(false)
		close(quit)
		<-done
	}
}

func nonNeg(v int64) int64 {
	if v < 0 {
		return 0
	}
	return v
}

// Record adds s to the current minute's aggregate of its cluster and
// operation class. It is safe for concurrent use, takes only its cluster's
// shard lock, does not log and does not allocate once the key exists.
func (m *Meter) Record(s Sample) {
	if s.ClusterID == "" {
		return
	}
	k := aggKey{cluster: s.ClusterID, op: s.Op, minute: m.minuteNow()}
	sh := &m.shards[maphash.String(m.seed, s.ClusterID)%numShards]
	sh.mu.Lock()
	c := sh.m[k]
	if c == nil {
		// Own copy: the key outlives the caller's string.
		k.cluster = strings.Clone(k.cluster)
		c = new(counters)
		sh.m[k] = c
	}
	if !c.dirty {
		c.dirty = true
		m.pending.Add(1)
	}
	msgs := nonNeg(s.Msgs)
	c.reqs += nonNeg(s.Reqs)
	c.msgs += msgs
	c.unanswered += min(nonNeg(s.Unanswered), msgs)
	c.bytesIn += nonNeg(s.BytesIn)
	c.bytesOut += nonNeg(s.BytesOut)
	sh.mu.Unlock()
	if m.closed.Load() {
		m.scheduleLateDrain()
	}
}

// lateDrainDelay gathers the stragglers recorded after Run's final drain
// into one late drain.
const lateDrainDelay = time.Second

// scheduleLateDrain drains, within ShutdownDrain, lateDrainDelay after the
// first Record that followed Run's shutdown, so that no sample recorded
// after it is left in memory.
func (m *Meter) scheduleLateDrain() {
	m.lateMu.Lock()
	defer m.lateMu.Unlock()
	if m.lateTimer != nil {
		return
	}
	m.lateTimer = time.AfterFunc(lateDrainDelay, func() {
		m.lateMu.Lock()
		m.lateTimer = nil
		m.lateMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownDrain)
		defer cancel()
		if err := m.Drain(ctx); err != nil {
			m.log.Warn("late usage drain did not reach the database; rows spooled", zap.Error(err))
		}
	})
}

// row is one usage_minutes increment.
type row struct {
	ClusterID string `json:"cluster_id"`
	Minute    int64  `json:"minute"`
	Op        Op     `json:"op"`
	Reqs      int64  `json:"reqs"`
	Msgs      int64  `json:"msgs"`
	BytesIn   int64  `json:"bytes_in"`
	BytesOut  int64  `json:"bytes_out"`
	// Unanswered is of Msgs (usage_minutes.unanswered_msgs). Left out of
	// spool lines when 0, so that lines stay as queen_proxy's spool row;
	// a line without it reads as 0.
	Unanswered int64 `json:"unanswered_msgs,omitempty"`
}

// take returns the counts recorded since the last take for the minutes
// before the given one (all minutes when all is set) and zeroes them. An
// entry with nothing recorded since the last take is deleted: its key has
// gone quiet (a closed minute, an idle cluster).
func (m *Meter) take(before int64, all bool) []row {
	var out []row
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, c := range sh.m {
			if !all && k.minute >= before {
				continue
			}
			if !c.dirty {
				delete(sh.m, k)
				continue
			}
			out = append(out, row{
				ClusterID: k.cluster, Minute: k.minute, Op: k.op,
				Reqs: c.reqs, Msgs: c.msgs, BytesIn: c.bytesIn, BytesOut: c.bytesOut, Unanswered: c.unanswered,
			})
			*c = counters{}
			m.pending.Add(-1)
		}
		sh.mu.Unlock()
	}
	return out
}

// Stats is a snapshot of the meter's health, for metrics.
type Stats struct {
	FlushOK          uint64        // writes (flushes, drains) the database took
	FlushFailed      uint64        // database writes that failed (their rows went to the spool)
	SpooledRows      uint64        // rows written to the spool (failed writes, open circuit)
	ReplayedRows     uint64        // spooled rows added to the database by replays
	SpoolFiles       int           // spool files waiting for replay
	SpoolBytes       int64         // their total size
	QuarantinedFiles int           // *.bad spool files waiting for an operator
	LastFlush        time.Duration // duration of the last database write attempt
	CircuitOpen      bool          // the database is being skipped after repeated failures
	Pending          int           // aggregates and journaled rows not in the database or the spool yet
}

// Stats returns current figures. It lists the spool directory.
func (m *Meter) Stats() Stats {
	files, bytes, bad := m.spool.usage()
	return Stats{
		FlushOK:          m.flushOK.Load(),
		FlushFailed:      m.flushFailed.Load(),
		SpooledRows:      m.spooledRows.Load(),
		ReplayedRows:     m.replayedRows.Load(),
		SpoolFiles:       files,
		SpoolBytes:       bytes,
		QuarantinedFiles: bad,
		LastFlush:        time.Duration(m.lastFlush.Load()),
		CircuitOpen:      m.br.isOpen(),
		Pending:          int(m.pending.Load() + m.heldRows.Load()),
	}
}
