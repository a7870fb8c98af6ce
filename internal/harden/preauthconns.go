package harden

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Before a connection's first request authenticates, the gateway knows
// nothing of who holds it: anyone can open thousands and hold each until
// its header timeout. PreauthConns bounds, per client address, the open
// connections that have not yet carried an authenticated request: past
// the cap, the address's oldest such connection is closed to make room
// for the new one. The newest are kept so that a client behind the same
// address (a NAT) still gets in while another holds idle connections: it
// only makes the holder's connections churn.
// A connection that authenticated no longer counts, so a tenant's parked
// long-poll pops behind one NAT address are never limited by it; and a
// connection counts only once it has been open for PreauthGrace without
// authenticating, so that a crowd of clients behind one address that
// reconnects at once (after a hand-over) is not cut while the gateway
// works through their first requests.
//
// It learns of a connection at accept and of its authentication from the
// request, but of its close from nothing: it checks whether the connections
// it counts are still open when an address reaches the cap, and all of
// them at most every preauthSweep.

// preauthSweep is how often at most every tracked connection is checked.
const preauthSweep = time.Second

// PreauthGrace is how long a connection may be open without authenticating
// before it counts against its address's cap.
const PreauthGrace = time.Second

// PreauthConns counts connections that have not authenticated, per
// address (IPv6 per /64).
type PreauthConns struct {
	max     int
	mu      sync.Mutex
	byAddr  map[netip.Prefix]map[*PreauthConn]struct{}
	total   int
	sweptAt time.Time
	now     func() time.Time
}

// PreauthConn is one counted connection.
type PreauthConn struct {
	p      *PreauthConns
	key    netip.Prefix
	conn   net.Conn // the socket itself: closing it writes nothing, so never blocks
	raw    syscall.RawConn
	at     time.Time // accepted
	authed atomic.Bool
}

// NewPreauthConns returns a counter that admits perAddress connections
// that have not authenticated from one address.
func NewPreauthConns(perAddress int) *PreauthConns {
	return &PreauthConns{max: max(1, perAddress), byAddr: map[netip.Prefix]map[*PreauthConn]struct{}{}, now: time.Now}
}

// Admit counts c, closing its address's oldest connections past the grace
// beyond the cap less one. A connection whose address or liveness cannot
// be read (not TCP underneath) is left uncounted, with a nil handle.
func (p *PreauthConns) Admit(c net.Conn) *PreauthConn {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	socket, raw := rawConn(c)
	if err != nil || raw == nil {
		return nil
	}
	now := p.now()
	pc := &PreauthConn{p: p, key: AddressKey(ap.Addr()), conn: socket, raw: raw, at: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.sweptAt) >= preauthSweep {
		p.sweptAt = now
		for key, set := range p.byAddr {
			p.pruneLocked(key, set, now, p.max)
		}
	}
	set := p.byAddr[pc.key]
	if len(set) >= p.max {
		p.pruneLocked(pc.key, set, now, p.max-1)
	}
	if set == nil {
		set = map[*PreauthConn]struct{}{}
		p.byAddr[pc.key] = set
	}
	set[pc] = struct{}{}
	p.total++
	return pc
}

// Authenticated stops counting the connection: a request on it
// authenticated. Safe on a nil handle and more than once.
func (pc *PreauthConn) Authenticated() {
	if pc == nil || !pc.authed.CompareAndSwap(false, true) {
		return
	}
	pc.p.mu.Lock()
	defer pc.p.mu.Unlock()
	pc.p.removeLocked(pc)
}

// Open reports how many connections that have not authenticated are
// counted, all addresses together (closed ones until they are noticed).
func (p *PreauthConns) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func (p *PreauthConns) removeLocked(pc *PreauthConn) {
	set := p.byAddr[pc.key]
	if _, ok := set[pc]; !ok {
		return
	}
	delete(set, pc)
	p.total--
	if len(set) == 0 {
		delete(p.byAddr, pc.key)
	}
}

// pruneLocked forgets the connections of key that have been closed, and
// closes the oldest of those past the grace beyond keep.
func (p *PreauthConns) pruneLocked(key netip.Prefix, set map[*PreauthConn]struct{}, now time.Time, keep int) {
	var old []*PreauthConn
	for pc := range set {
		switch {
		case pc.raw.Control(func(uintptr) {}) != nil:
			delete(set, pc)
			p.total--
		case now.Sub(pc.at) >= PreauthGrace:
			old = append(old, pc)
		}
	}
	if len(old) > keep {
		slices.SortFunc(old, func(a, b *PreauthConn) int { return a.at.Compare(b.at) })
		for _, pc := range old[:len(old)-keep] {
			_ = pc.conn.Close()
			delete(set, pc)
			p.total--
		}
	}
	if len(set) == 0 {
		delete(p.byAddr, key)
	}
}

// rawConn is the socket under c and whatever wraps it (TLS, a proxy
// protocol header), with its raw form, whose Control fails once the socket
// is closed; nils when there is none.
func rawConn(c net.Conn) (net.Conn, syscall.RawConn) {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			raw, err := sc.SyscallConn()
			if err != nil {
				return nil, nil
			}
			return c, raw
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, nil
		}
		c = u.NetConn()
	}
	return nil, nil
}
