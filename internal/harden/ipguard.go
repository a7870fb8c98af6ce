package harden

import (
	"hash/maphash"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// FailureGuard limits how often one client address may fail
// authentication: every failure takes a token from the address's bucket,
// and an address with an empty bucket is refused before its credential is
// looked up, unless that credential is one the guard remembers as valid
// (Known; knownvalid.go). Successful requests cost nothing, so a busy,
// correctly configured client behind one address is never slowed down,
// nor locked out by another client's failures from the same address.
type FailureGuard struct {
	rate   float64 // tokens per second
	burst  float64
	now    func() time.Time
	max    int // tracked addresses per shard
	seed   maphash.Seed
	shards [16]guardShard
	// lastFail is when any address last failed (Unix nanoseconds, by now).
	// A bucket earns a token back every 1/rate seconds, so once that long
	// has passed since the last failure every bucket holds a token, and
	// Allow answers without hashing or locking: the state of nearly every
	// request of a healthy gateway.
	lastFail atomic.Int64
	// valid remembers credentials that authenticated (knownvalid.go).
	valid *knownValid
	// lookups bounds the lookups of unguessable keys from addresses in
	// backoff (lookupbudget.go).
	lookups *lookupBudget
}

type guardShard struct {
	mu      sync.Mutex
	buckets map[netip.Prefix]*guardBucket
}

type guardBucket struct {
	tokens float64
	at     time.Time
}

// FailureGuardConfig tunes a FailureGuard.
type FailureGuardConfig struct {
	Rate       float64       // failures per second an address earns back; default 1
	Burst      int           // failures an address may make in a row; default 20
	MaxTracked int           // addresses tracked at most, and credentials remembered; default 100,000
	Remember   time.Duration // how long a credential that authenticated is let through a backoff; default 24h
	// UnguessableLookups is how many unguessable keys presented from
	// addresses in backoff the gateway still looks up per second, all
	// addresses together (a burst of twice that); default 20.
	UnguessableLookups float64
	Now                func() time.Time // clock, for tests
}

// NewFailureGuard returns a guard.
func NewFailureGuard(cfg FailureGuardConfig) *FailureGuard {
	if cfg.Rate <= 0 {
		cfg.Rate = 1
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 20
	}
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = 100000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Remember <= 0 {
		cfg.Remember = 24 * time.Hour
	}
	if cfg.UnguessableLookups <= 0 {
		cfg.UnguessableLookups = 20
	}
	g := &FailureGuard{rate: cfg.Rate, burst: float64(cfg.Burst), now: cfg.Now,
		max: max(1, cfg.MaxTracked/len(FailureGuard{}.shards)), seed: maphash.MakeSeed(),
		valid:   newKnownValid(cfg.Remember, cfg.MaxTracked),
		lookups: newLookupBudget(cfg.UnguessableLookups, max(1, int(2*cfg.UnguessableLookups)), cfg.Now())}
	for i := range g.shards {
		g.shards[i].buckets = map[netip.Prefix]*guardBucket{}
	}
	return g
}

// AddressKey is the unit the guard counts by: an IPv4 address, or the /64
// an IPv6 address belongs to (one host usually holds a whole /64).
func AddressKey(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, addr.BitLen())
}

// Allow reports whether addr may try to authenticate now and, if not, in
// how many whole seconds it may (at least 1). An invalid address is
// allowed: without a peer address there is nothing to count by.
func (g *FailureGuard) Allow(addr netip.Addr) (ok bool, retryAfter int) {
	if !addr.IsValid() || g.sinceLastFail() >= time.Duration(float64(time.Second)/g.rate) {
		return true, 0
	}
	key := AddressKey(addr)
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, found := s.buckets[key]
	if !found {
		return true, 0
	}
	g.refill(b)
	if b.tokens >= 1 {
		return true, 0
	}
	return false, max(1, int(math.Ceil((1-b.tokens)/g.rate)))
}

// Known reports whether a credential was remembered as valid (Succeed):
// the caller lets it through its address's backoff.
func (g *FailureGuard) Known(d CredentialDigest) bool { return g.valid.known(d, g.now()) }

// Succeed remembers a credential that authenticated, so that its address's
// backoff never refuses it.
func (g *FailureGuard) Succeed(d CredentialDigest) { g.valid.remember(d, g.now()) }

// Fail takes one token from addr's bucket after a failed authentication.
func (g *FailureGuard) Fail(addr netip.Addr) {
	if !addr.IsValid() {
		return
	}
	key := AddressKey(addr)
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, found := s.buckets[key]
	if !found {
		if len(s.buckets) >= g.max {
			g.evict(s)
		}
		b = &guardBucket{tokens: g.burst, at: g.now()}
		s.buckets[key] = b
	}
	g.refill(b)
	b.tokens = max(b.tokens-1, 0)
	g.lastFail.Store(b.at.UnixNano())
}

// sinceLastFail is how long ago any address last failed (very long when
// none has).
func (g *FailureGuard) sinceLastFail() time.Duration {
	last := g.lastFail.Load()
	if last == 0 {
		return math.MaxInt64
	}
	return time.Duration(g.now().UnixNano() - last)
}

// Tracked reports how many addresses hold a bucket.
func (g *FailureGuard) Tracked() int {
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

func (g *FailureGuard) refill(b *guardBucket) {
	now := g.now()
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = min(g.burst, b.tokens+el*g.rate)
	}
	b.at = now
}

// evict makes room in a full shard: first every bucket that has refilled
// (it would start full anyway), then, if none has, an arbitrary one.
func (g *FailureGuard) evict(s *guardShard) {
	for k, b := range s.buckets {
		g.refill(b)
		if b.tokens >= g.burst {
			delete(s.buckets, k)
		}
	}
	if len(s.buckets) < g.max {
		return
	}
	for k := range s.buckets {
		delete(s.buckets, k)
		return
	}
}

func (g *FailureGuard) shard(key netip.Prefix) *guardShard {
	a := key.Addr().As16()
	return &g.shards[maphash.Bytes(g.seed, a[:])%uint64(len(g.shards))]
}
