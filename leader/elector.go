// Package leader elects one gateway of a group to serve the data plane,
// with a lease in the control-plane database as the only coordinator. It
// does not import Caddy.
package leader

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Role is what a gateway of a group does now.
type Role int32

const (
	// Standby serves nothing but health probes, and takes the lease once it
	// has expired.
	Standby Role = iota
	// Leader serves the data plane and renews the lease.
	Leader
)

func (r Role) String() string {
	if r == Leader {
		return "leader"
	}
	return "standby"
}

// Lease is the group's lease as the database reports it after an attempt.
type Lease struct {
	Holder string
	Epoch  int64
	// TakenOver is true when this attempt made the caller the holder.
	TakenOver bool
}

// Store is the database side of the lease (the control-plane SQL functions
// acquire_gateway_lease and release_gateway_lease).
type Store interface {
	// Acquire takes or renews the lease for holder for ttl; with mayTake
	// false it only renews a lease holder already holds.
	Acquire(ctx context.Context, group, holder string, ttl time.Duration, mayTake bool) (Lease, error)
	// Release gives the lease up if holder holds it.
	Release(ctx context.Context, group, holder string) error
}

// Config configures an Elector. Zero durations take the defaults noted on
// each; they must keep Renew and Poll well under TTL.
type Config struct {
	Group string // the group's name, shared by its gateways
	Name  string // this gateway's name, unique in the group
	Store Store
	// TTL is how long a lease lives without renewal (default 2 s): the
	// longest a dead leader keeps its group without a server.
	TTL time.Duration
	// Renew is how often the leader renews (default TTL/5).
	Renew time.Duration
	// Poll is how often a standby tries to take the lease (default TTL/10).
	Poll time.Duration
	// Settle is how long a standby must have reached the database without
	// a break before it may take an expired lease (default TTL/2): after
	// an outage that cut every gateway off, the leader gets to renew first
	// rather than lose its group to whichever gateway reconnected sooner.
	Settle time.Duration
	Log    *zap.Logger
	// OnChange, when set, is called with the new role at every change.
	OnChange func(Role)
}

// Elector keeps this gateway's role in its group.
type Elector struct {
	cfg  Config
	log  *zap.Logger
	role atomic.Int32

	mu          sync.Mutex
	holder      string    // the holder last seen
	reachedFrom time.Time // since when attempts have reached the database without a break
	stopped     bool

	renewals  atomic.Uint64
	failures  atomic.Uint64
	takeovers atomic.Uint64
}

// New returns an elector in the standby role; Run starts electing.
func New(cfg Config) *Elector {
	if cfg.TTL <= 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.Renew <= 0 {
		cfg.Renew = cfg.TTL / 5
	}
	if cfg.Poll <= 0 {
		cfg.Poll = cfg.TTL / 10
	}
	if cfg.Settle <= 0 {
		cfg.Settle = cfg.TTL / 2
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Elector{cfg: cfg, log: log.With(zap.String("group", cfg.Group), zap.String("gateway", cfg.Name))}
}

// Group is the name of the elector's group.
func (e *Elector) Group() string { return e.cfg.Group }

// Role is this gateway's role now.
func (e *Elector) Role() Role { return Role(e.role.Load()) }

// Holder is the gateway that held the lease when the database last
// answered ("" before it first did).
func (e *Elector) Holder() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holder
}

// Counters are the elector's totals, for metrics.
type Counters struct {
	Renewals, Failures, Takeovers uint64
}

// Counters returns the totals so far.
func (e *Elector) Counters() Counters {
	return Counters{Renewals: e.renewals.Load(), Failures: e.failures.Load(), Takeovers: e.takeovers.Load()}
}

// Run attempts at the leader's or the standby's pace until ctx ends.
func (e *Elector) Run(ctx context.Context) {
	for {
		e.Attempt(ctx)
		wait := e.cfg.Poll
		if e.Role() == Leader {
			wait = e.cfg.Renew
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Attempt renews or tries to take the lease once, and updates the role
// from the answer. A failed attempt changes nothing: a leader that cannot
// reach the database keeps serving (the database may be down for every
// gateway of the group, and then no standby can take over either), and a
// standby stays one.
func (e *Elector) Attempt(ctx context.Context) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	now := time.Now()
	settled := !e.reachedFrom.IsZero() && now.Sub(e.reachedFrom) >= e.cfg.Settle
	e.mu.Unlock()

	leading := e.Role() == Leader
	attempt, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	lease, err := e.cfg.Store.Acquire(attempt, e.cfg.Group, e.cfg.Name, e.cfg.TTL, leading || settled)
	cancel()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	if err != nil {
		e.failures.Add(1)
		e.reachedFrom = time.Time{}
		if leading {
			e.log.Warn("leader lease not renewed; still serving while the database does not answer", zap.Error(err))
		}
		return
	}
	if e.reachedFrom.IsZero() {
		e.reachedFrom = now
	}
	e.holder = lease.Holder
	if lease.Holder == e.cfg.Name {
		e.renewals.Add(1)
		if !leading {
			e.takeovers.Add(1)
			e.setRole(Leader)
			e.log.Info("leading the group: serving the data plane", zap.Int64("epoch", lease.Epoch))
		}
		return
	}
	if leading {
		e.setRole(Standby)
		e.log.Warn("another gateway holds the lease: stepping down to standby", zap.String("leader", lease.Holder))
	}
}

func (e *Elector) setRole(r Role) {
	e.role.Store(int32(r))
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(r)
	}
}

// Stop ends the elector for good: a leader releases the lease so that a
// standby takes it at once, and the role becomes standby.
func (e *Elector) Stop(ctx context.Context) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	leading := e.Role() == Leader
	e.mu.Unlock()
	e.setRole(Standby)
	if !leading {
		return
	}
	if err := e.cfg.Store.Release(ctx, e.cfg.Group, e.cfg.Name); err != nil {
		e.log.Warn("leader lease not released; a standby takes over once it expires", zap.Error(err))
		return
	}
	e.log.Info("released the leader lease")
}
