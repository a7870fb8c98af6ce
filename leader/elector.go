// Package leader elects one gateway of a group to serve the data plane,
// with a lease in the control-plane database as the coordinator and the
// leader's own answer on its peer address as the last word before a
// takeover. It does not import Caddy.
package leader

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Role is what a gateway of a group does now.
type Role int32

const (
	// Standby serves nothing but health probes, and takes the lease once it
	// has expired and its holder does not answer as leader.
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
	Holder string // "" when there is no lease yet
	Epoch  int64  // grows by one at every change of holder; 0 when there is no lease
	// PeerURL is where the holder answers its peers ("" when it gave none,
	// or released the lease).
	PeerURL string
	// Expired is true when the lease has run out by the database's clock.
	Expired bool
	// TakenOver is true when this attempt made the caller the holder.
	TakenOver bool
}

// Store is the database side of the lease (the control-plane SQL functions
// gateway_lease_attempt and release_gateway_lease).
type Store interface {
	// Renew renews the lease for ttl when holder holds it, writing peerURL
	// as its peer address, and reports the lease as it is afterwards.
	Renew(ctx context.Context, group, holder string, ttl time.Duration, peerURL string) (Lease, error)
	// Take takes the lease for holder when it has expired and is still at
	// epoch (0: there is no lease yet), and reports the lease afterwards.
	Take(ctx context.Context, group, holder string, ttl time.Duration, peerURL string, epoch int64) (Lease, error)
	// Release gives the lease up if holder holds it.
	Release(ctx context.Context, group, holder string) error
}

// Peer asks a member of the group, on its peer address, what it is.
type Peer interface {
	// Ask returns the member's proven answer. An error means the address
	// did not answer in time, or answered something that is not a proven
	// answer of holder in this group (ErrUnproven). A non-empty grant is
	// the token of holder's last answer, sent back to grant it Hold more
	// of serving (see Config.Hold).
	Ask(ctx context.Context, peerURL, holder, grant string) (PeerAnswer, error)
}

// Config configures an Elector. Zero durations take the defaults noted on
// each; they must keep Renew and Poll well under TTL.
type Config struct {
	Group string // the group's name, shared by its gateways
	Name  string // this gateway's name, unique in the group
	Store Store
	// TTL is how long a lease lives without renewal (default 2 s): the
	// longest a dead leader keeps its group without a server, and the
	// longest a leader serves after its last successful renewal.
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
	// PeerURL is where this gateway answers its peers; it is written into
	// the lease while this gateway holds it. Empty: peers cannot ask it.
	PeerURL string
	// Peer asks the holder of an expired lease whether it still leads
	// before a takeover. Nil: an expired lease is taken without asking.
	Peer Peer
	// PeerTimeout bounds asking the holder (default min(400 ms, TTL/4)).
	PeerTimeout time.Duration
	// Hold is how long a grant keeps a leader serving past its last
	// renewal (default TTL). A standby that cannot reach the database
	// either grants the holder, at every heartbeat, Hold from the answer it
	// grants, and promises not to take the lease before Hold after it
	// received that answer; the leader serves until Hold after it made the
	// answer, which is earlier. So during an outage of the database for
	// the whole group the leader serves on, and the standbys stay standbys.
	Hold time.Duration
	// Members is how many gateways the group has (default 2). A leader
	// serves on grants only while every other member has granted: a member
	// that did not promise anything may take the lease once it expired.
	// With MemberNames it is their number.
	Members int
	// MemberNames are the names of the group's gateways, this one
	// included. The peer endpoint answers only these (other than itself),
	// and only their grants count, each once. Empty: it answers any name
	// that proves the secret, and takes no grant at all, since a holder of
	// the secret could grant under names of members the group does not
	// have.
	MemberNames []string
	Log         *zap.Logger
	// OnChange, when set, is called with the new role at every change.
	OnChange func(Role)
}

// Elector keeps this gateway's role in its group.
type Elector struct {
	cfg Config
	log *zap.Logger
	// role is the role elected by the last answers; a Leader serves only
	// while the monotonic clock is short of until (see Role).
	role atomic.Int32
	// base anchors until on the monotonic clock.
	base time.Time
	// until is when this gateway's lease runs out by its own clock (time
	// since base): TTL after it sent its last renewal the database took.
	until atomic.Int64
	epoch atomic.Int64

	attemptMu   sync.Mutex // held through an attempt
	mu          sync.Mutex
	holder      string    // the holder last seen
	reachedFrom time.Time // since when attempts have reached the database without a break
	stopped     bool
	// withheld says why this standby does not take an expired lease ("" when
	// it is not withholding), for readiness.
	withheld string
	// lapsed is set when this gateway's lease ran out by its own clock and
	// cleared when it holds the lease again or sees another holder.
	lapsed atomic.Bool

	// instance tells this elector's tokens from a previous process's.
	instance [16]byte
	// extended is until when (time since base) the grants of every other
	// member keep this leader serving; 0 when they do not.
	extended atomic.Int64
	grants   map[string]int64 // per granting member: Hold after the answer it granted
	// asks remembers the proven asks recently answered, so that a
	// recorded one is not answered again.
	asks *askLog

	hbMu sync.Mutex
	// hb is the holder this standby heartbeats, from its last lease read.
	hb heartbeatTarget
	// token is the holder's last answer as leading at hb's epoch, and
	// tokenAt when this standby received it (time since base).
	token   string
	tokenAt int64
	// promised is until when (time since base) this standby does not take
	// the lease: Hold after the last answer it granted. A new elector
	// starts with Hold promised, for what a previous process granted.
	promised atomic.Int64

	renewals  atomic.Uint64
	failures  atomic.Uint64
	takeovers atomic.Uint64
	vetoes    atomic.Uint64
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
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = min(400*time.Millisecond, cfg.TTL/4)
	}
	if cfg.Hold <= 0 {
		cfg.Hold = cfg.TTL
	}
	if len(cfg.MemberNames) > 0 {
		cfg.Members = len(cfg.MemberNames)
	}
	if cfg.Members <= 0 {
		cfg.Members = 2
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	e := &Elector{cfg: cfg, base: time.Now(), grants: map[string]int64{}, asks: newAskLog(),
		log: log.With(zap.String("group", cfg.Group), zap.String("gateway", cfg.Name))}
	_, _ = rand.Read(e.instance[:])
	e.promised.Store(int64(cfg.Hold))
	return e
}

// bound is until when (time since base) this gateway serves as leader:
// TTL after its last renewal, or as long as the grants of the other
// members keep it, whichever is later.
func (e *Elector) bound() int64 { return max(e.until.Load(), e.extended.Load()) }

// Group is the name of the elector's group.
func (e *Elector) Group() string { return e.cfg.Group }

// Name is this gateway's name in its group.
func (e *Elector) Name() string { return e.cfg.Name }

// clock is the monotonic time since the elector was made.
func (e *Elector) clock() int64 { return int64(time.Since(e.base)) }

// Role is this gateway's role now. A leader past its bound (its lease run
// out by its own clock, and no grants of the other members that hold) is a
// standby from that instant, whether or not an attempt has noticed yet: it
// never serves past the bound a standby relies on.
func (e *Elector) Role() Role {
	if Role(e.role.Load()) == Leader && e.clock() < e.bound() {
		return Leader
	}
	return Standby
}

// OnGrants reports whether this gateway leads only because the other
// members granted it time: its own lease ran out by its clock.
func (e *Elector) OnGrants() bool {
	return e.Role() == Leader && e.clock() >= e.until.Load()
}

// LeadingFor is how much longer this gateway serves without another
// renewal; 0 unless it leads.
func (e *Elector) LeadingFor() time.Duration {
	if Role(e.role.Load()) != Leader {
		return 0
	}
	return max(0, time.Duration(e.bound()-e.clock()))
}

// Holder is the gateway that held the lease when the database last
// answered ("" before it first did).
func (e *Elector) Holder() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holder
}

// Withheld says why this standby does not take the expired lease ("" when
// it is not withholding a takeover).
func (e *Elector) Withheld() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.withheld
}

// Lapsed reports whether this gateway was elected leader but its lease ran
// out by its own clock without a renewal: it does not serve.
func (e *Elector) Lapsed() bool {
	return e.lapsed.Load() || (Role(e.role.Load()) == Leader && e.Role() != Leader)
}

// Counters are the elector's totals, for metrics.
type Counters struct {
	Renewals, Failures, Takeovers uint64
	// Withheld counts attempts at an expired lease that did not take it
	// because its holder answered on its peer address that it still leads.
	Withheld uint64
}

// Counters returns the totals so far.
func (e *Elector) Counters() Counters {
	return Counters{Renewals: e.renewals.Load(), Failures: e.failures.Load(),
		Takeovers: e.takeovers.Load(), Withheld: e.vetoes.Load()}
}

// Run attempts at the leader's or the standby's pace until ctx ends, and,
// with a Peer, heartbeats the holder at the standby's pace beside it, so
// that a stalled database attempt never delays a grant.
func (e *Elector) Run(ctx context.Context) {
	if e.cfg.Peer != nil {
		go func() {
			for {
				e.Heartbeat(ctx)
				select {
				case <-ctx.Done():
					return
				case <-time.After(e.cfg.Poll):
				}
			}
		}()
	}
	for {
		e.Attempt(ctx)
		wait := e.cfg.Poll
		if e.Role() == Leader {
			wait = min(e.cfg.Renew, e.LeadingFor())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Attempt renews the lease, or, for a standby, tries to take it once, and
// updates the role from the answer. A leader that cannot reach the
// database keeps serving only until its lease runs out by its own clock
// (TTL after it sent its last renewal that the database took), which is no
// later than the database lets a standby take it, or for as long as every
// other member grants it time (see heartbeat.go).
func (e *Elector) Attempt(ctx context.Context) {
	// Stop waits for an attempt in flight, so that a renewal sent before
	// the release cannot land after it and make the lease live again.
	e.attemptMu.Lock()
	defer e.attemptMu.Unlock()
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	now := time.Now()
	settled := !e.reachedFrom.IsZero() && now.Sub(e.reachedFrom) >= e.cfg.Settle
	e.noticeLapseLocked()
	e.mu.Unlock()

	sent := e.clock()
	attempt, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	lease, err := e.cfg.Store.Renew(attempt, e.cfg.Group, e.cfg.Name, e.cfg.TTL, e.cfg.PeerURL)
	cancel()
	if err == nil && lease.Holder != e.cfg.Name && lease.Expired && settled {
		lease, sent, err = e.takeOver(ctx, lease)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	if err != nil {
		e.failures.Add(1)
		first := !e.reachedFrom.IsZero()
		e.reachedFrom = time.Time{}
		if Role(e.role.Load()) == Leader && !e.noticeLapseLocked() && first {
			e.log.Warn("leader lease not renewed; serving until it runs out by this gateway's clock",
				zap.Duration("serving_for", e.LeadingFor()), zap.Error(err))
		}
		return
	}
	if e.reachedFrom.IsZero() {
		e.reachedFrom = now
	}
	e.holder = lease.Holder
	if lease.Holder != "" {
		e.lapsed.Store(false)
	}
	e.heartbeat(lease)
	if lease.Holder == e.cfg.Name {
		e.withheld = ""
		e.renewals.Add(1)
		e.until.Store(sent + int64(e.cfg.TTL))
		if e.epoch.Swap(lease.Epoch) != lease.Epoch {
			clear(e.grants)
			e.extended.Store(0)
		}
		if Role(e.role.Load()) != Leader {
			e.takeovers.Add(1)
			e.setRole(Leader)
			e.log.Info("leading the group: serving the data plane", zap.Int64("epoch", lease.Epoch))
		}
		return
	}
	if !lease.Expired {
		e.withheld = ""
	}
	if Role(e.role.Load()) == Leader {
		e.setRole(Standby)
		e.log.Warn("another gateway holds the lease: stepping down to standby", zap.String("leader", lease.Holder))
	}
}

// noticeLapseLocked turns an elected leader whose lease ran out by its own
// clock into a standby, and says so; it reports whether it did.
func (e *Elector) noticeLapseLocked() bool {
	if Role(e.role.Load()) != Leader || e.clock() < e.bound() {
		return false
	}
	e.setRole(Standby)
	e.lapsed.Store(true)
	e.log.Error("leader lease ran out without a renewal (the database does not answer): stopped serving; "+
		"a standby may take over, or this gateway leads again once it renews", zap.Duration("ttl", e.cfg.TTL))
	return true
}

// takeOver takes the expired lease, unless its holder answers on its peer
// address that it still leads at the lease's epoch. It returns the lease
// afterwards and when the take was sent (by the elector's clock).
func (e *Elector) takeOver(ctx context.Context, lease Lease) (Lease, int64, error) {
	if lease.Holder != "" && lease.PeerURL != "" && e.cfg.Peer != nil {
		ask, cancel := context.WithTimeout(ctx, e.cfg.PeerTimeout)
		answer, err := e.cfg.Peer.Ask(ask, lease.PeerURL, lease.Holder, "")
		cancel()
		fields := []zap.Field{zap.String("leader", lease.Holder), zap.String("peer_url", lease.PeerURL), zap.Int64("epoch", lease.Epoch)}
		switch {
		case err == nil && answer.Leading && answer.Epoch == lease.Epoch:
			e.vetoes.Add(1)
			reason := "the lease expired in the database, but " + lease.Holder +
				" answers on its peer address that it leads for " + answer.LeadingFor.Round(time.Millisecond).String() +
				" more: not taking over"
			e.mu.Lock()
			first := e.withheld == ""
			e.withheld = reason
			e.mu.Unlock()
			if first {
				e.log.Warn("lease expired but its holder still leads: not taking over",
					append(fields, zap.Duration("leading_for", answer.LeadingFor))...)
			}
			return lease, 0, nil
		case e.withholdForPromise(lease.Holder):
			return lease, 0, nil
		case errors.Is(err, ErrUnproven):
			e.log.Error("the leader's peer address answered without a valid proof (is peer_secret the same on every member?); taking over",
				append(fields, zap.Error(err))...)
		case err != nil:
			e.log.Warn("the leader does not answer on its peer address; taking over", append(fields, zap.Error(err))...)
		case answer.Leading:
			e.log.Warn("the leader's peer address answers for another epoch; taking over",
				append(fields, zap.Int64("answered_epoch", answer.Epoch))...)
		default:
			e.log.Info("the leader answers that it no longer leads; taking over", fields...)
		}
	}
	sent := e.clock()
	attempt, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	defer cancel()
	taken, err := e.cfg.Store.Take(attempt, e.cfg.Group, e.cfg.Name, e.cfg.TTL, e.cfg.PeerURL, lease.Epoch)
	return taken, sent, err
}

// withholdForPromise reports whether this standby promised, by a grant or
// by having just started, not to take the lease yet, and says so.
func (e *Elector) withholdForPromise(holder string) bool {
	promised := e.promised.Load()
	left := time.Duration(promised - e.clock())
	if left <= 0 {
		return false
	}
	why := "this member granted " + holder + " more time to serve while it could not reach the database"
	if promised == int64(e.cfg.Hold) {
		why = "this member has just started (and may have granted " + holder + " time before)"
	}
	e.vetoes.Add(1)
	e.mu.Lock()
	first := e.withheld == ""
	e.withheld = "the lease expired in the database, but " + why + ": not taking over for " +
		left.Round(time.Millisecond).String() + " more"
	e.mu.Unlock()
	if first {
		e.log.Warn("lease expired and its holder does not lead, but this member promised not to take it yet",
			zap.String("leader", holder), zap.Duration("promised_for", left))
	}
	return true
}

func (e *Elector) setRole(r Role) {
	e.role.Store(int32(r))
	if r != Leader {
		e.until.Store(0)
		e.extended.Store(0)
		clear(e.grants)
	}
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(r)
	}
}

// Stop ends the elector for good: the role becomes standby, then a leader
// releases the lease so that a standby takes it at once.
func (e *Elector) Stop(ctx context.Context) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	leading := Role(e.role.Load()) == Leader
	e.setRole(Standby)
	e.mu.Unlock()
	if !leading {
		return
	}
	e.attemptMu.Lock() // the renewal in flight, if any, lands first
	defer e.attemptMu.Unlock()
	if err := e.cfg.Store.Release(ctx, e.cfg.Group, e.cfg.Name); err != nil {
		e.log.Warn("leader lease not released; a standby takes over once it expires", zap.Error(err))
		return
	}
	e.log.Info("released the leader lease")
}
