package leader

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

// The heartbeat keeps a group served while the database is down for all
// of it. A standby asks the holder it last read in the lease at every
// poll, whether or not it reaches the database. While it does not reach
// the database, it sends back the token of the holder's last answer as
// leading: a grant. Before it sends a grant it promises itself not to take
// the lease until Hold after it received that answer. The leader, on a
// grant from every other member, serves until Hold after it made the
// answer, which is before the granter received it: the leader has stopped
// before any granter may take over. A standby that reaches the database
// grants nothing, so a leader cut off alone still stops at its own bound.

// heartbeatTarget is the holder a standby heartbeats, as its last lease
// read named it.
type heartbeatTarget struct {
	holder, url string
	epoch       int64
}

// heartbeat records whom a standby heartbeats from a lease it read.
func (e *Elector) heartbeat(lease Lease) {
	e.hbMu.Lock()
	defer e.hbMu.Unlock()
	target := heartbeatTarget{holder: lease.Holder, url: lease.PeerURL, epoch: lease.Epoch}
	if lease.Holder == e.cfg.Name || lease.Holder == "" || lease.PeerURL == "" {
		target = heartbeatTarget{}
	}
	if target != e.hb {
		e.hb, e.token = target, ""
	}
}

// Heartbeat asks the holder last read in the lease what it is, granting
// it Hold more of serving while this standby cannot reach the database.
// A leader, or a standby without a Peer or a holder to ask, does nothing.
func (e *Elector) Heartbeat(ctx context.Context) {
	e.mu.Lock()
	idle := e.stopped || e.cfg.Peer == nil
	cutOff := e.reachedFrom.IsZero()
	e.mu.Unlock()
	if idle || e.Role() == Leader {
		return
	}
	// The ask runs without the lock: a stuck holder must not hold up the
	// attempts, which record the next target under it.
	e.hbMu.Lock()
	target, grant := e.hb, ""
	if target.url != "" && cutOff && e.token != "" {
		grant = e.token
		// Promised before the grant is sent: the holder may receive it
		// even if its answer never comes back.
		if promise := e.tokenAt + int64(e.cfg.Hold); e.promised.Load() < promise {
			e.promised.Store(promise)
		}
	}
	e.hbMu.Unlock()
	if target.url == "" {
		return
	}
	ask, cancel := context.WithTimeout(ctx, e.cfg.PeerTimeout)
	answer, err := e.cfg.Peer.Ask(ask, target.url, target.holder, grant)
	cancel()
	received := e.clock()
	e.hbMu.Lock()
	defer e.hbMu.Unlock()
	if e.hb != target {
		return // the lease moved on meanwhile
	}
	switch {
	case err != nil:
		// Granting the last token again grants nothing more.
	case answer.Leading && answer.Epoch == target.epoch && answer.Token != "":
		if grant == "" && cutOff {
			e.log.Warn("the database does not answer this member: granting the leader time to serve while it answers its peer address",
				zap.String("leader", target.holder), zap.Duration("hold", e.cfg.Hold))
		}
		e.token, e.tokenAt = answer.Token, received
	default:
		e.token = ""
	}
}

// isOtherMember reports whether name is one of the group's configured
// members other than this one; never without a list of members.
func (e *Elector) isOtherMember(name string) bool {
	return name != e.cfg.Name && slices.Contains(e.cfg.MemberNames, name)
}

// acceptGrant extends this leader's bound to Hold after it made the
// answer granted by member, once every other member has granted; it
// reports whether the grant was taken (a grant for another epoch, or to a
// gateway that no longer leads, is not).
func (e *Elector) acceptGrant(member string, epoch, answeredAt int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	others := e.cfg.Members - 1
	if others < 1 || e.stopped || !e.isOtherMember(member) || epoch != e.epoch.Load() || e.Role() != Leader {
		return false
	}
	until := answeredAt + int64(e.cfg.Hold)
	if e.grants[member] >= until {
		return true
	}
	e.grants[member] = until
	if len(e.grants) < others {
		return true
	}
	held := make([]int64, 0, len(e.grants))
	for _, u := range e.grants {
		held = append(held, u)
	}
	slices.Sort(held)
	// Served on only while every other member's grant holds: the
	// others'th latest of them.
	extended := held[len(held)-others]
	if was := e.extended.Load(); extended > was {
		e.extended.Store(extended)
		if own := e.until.Load(); was <= own && extended > own {
			e.log.Warn("leader lease not renewed, but every other member granted more time on the peer address: serving on",
				zap.Duration("serving_for", time.Duration(extended-e.clock())))
		}
	}
	return true
}
