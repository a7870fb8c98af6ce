package harden

import (
	"hash/maphash"
	"math"
	"net/netip"
	"sync"
	"time"
)

// A name shaped like a cluster's host ("<slug>.<base domain>", in a Host
// header or a TLS server name) that the cluster cache cannot answer costs a
// control-plane lookup. Anyone can send such names, each one new, as fast
// as the network carries them; the cache remembers a miss only briefly and
// up to a cap. HostLookups bounds those lookups per client address and for
// the whole gateway, so that such a flood costs the database a bounded
// rate. A lookup that finds a cluster gives its token back: the bounds are
// on names that are not clusters, and a gateway whose cache was just
// emptied (a restart, a reconnected invalidation listener) looks up its
// real clusters as fast as they come.

// HostLookupsConfig tunes HostLookups. Zero fields take the defaults noted.
type HostLookupsConfig struct {
	// PerAddress is the lookups per second one address earns back, with a
	// burst of PerAddressBurst; default 5 and 20. IPv6 counts per /64.
	PerAddress      float64
	PerAddressBurst int
	// Gateway is the lookups per second of every address together, with a
	// burst of GatewayBurst; default 100 and 200.
	Gateway      float64
	GatewayBurst int
	// MaxTracked bounds the addresses tracked; default 100,000.
	MaxTracked int
	Now        func() time.Time // clock, for tests
}

// HostLookups is the pair of budgets for lookups of names the cluster
// cache cannot answer.
type HostLookups struct {
	cfg     HostLookupsConfig
	gateway *lookupBudget
	seed    maphash.Seed
	max     int // addresses per shard
	shards  [16]hostLookupShard
}

type hostLookupShard struct {
	mu      sync.Mutex
	buckets map[netip.Prefix]*lookupBudget
}

// NewHostLookups returns the budgets, full.
func NewHostLookups(cfg HostLookupsConfig) *HostLookups {
	if cfg.PerAddress <= 0 {
		cfg.PerAddress = 5
	}
	if cfg.PerAddressBurst <= 0 {
		cfg.PerAddressBurst = 20
	}
	if cfg.Gateway <= 0 {
		cfg.Gateway = 100
	}
	if cfg.GatewayBurst <= 0 {
		cfg.GatewayBurst = 200
	}
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = 100000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &HostLookups{cfg: cfg, gateway: newLookupBudget(cfg.Gateway, cfg.GatewayBurst, cfg.Now()),
		seed: maphash.MakeSeed(), max: max(1, cfg.MaxTracked/len(HostLookups{}.shards))}
	for i := range h.shards {
		h.shards[i].buckets = map[netip.Prefix]*lookupBudget{}
	}
	return h
}

// Take reports whether a lookup from addr may run now, taking it from
// addr's budget and the gateway's; if not, it takes nothing and says in
// how many whole seconds one may (1 to 60). An invalid address counts
// against the gateway's budget only.
func (h *HostLookups) Take(addr netip.Addr) (ok bool, retryAfter int) {
	now := h.cfg.Now()
	var b *lookupBudget
	if addr.IsValid() {
		b = h.bucket(AddressKey(addr), now)
		if wait, ok := b.takeOrWait(now); !ok {
			return false, wait
		}
	}
	if wait, ok := h.gateway.takeOrWait(now); !ok {
		if b != nil {
			b.give()
		}
		return false, wait
	}
	return true, 0
}

// Refund gives back what Take took for addr, for a lookup that found a
// cluster.
func (h *HostLookups) Refund(addr netip.Addr) {
	h.gateway.give()
	if !addr.IsValid() {
		return
	}
	key := AddressKey(addr)
	s := h.shard(key)
	s.mu.Lock()
	b := s.buckets[key]
	s.mu.Unlock()
	if b != nil {
		b.give()
	}
}

// Tracked reports how many addresses hold a budget.
func (h *HostLookups) Tracked() int {
	n := 0
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

func (h *HostLookups) bucket(key netip.Prefix, now time.Time) *lookupBudget {
	s := h.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[key]
	if b == nil {
		if len(s.buckets) >= h.max {
			h.evict(s, now)
		}
		b = newLookupBudget(h.cfg.PerAddress, h.cfg.PerAddressBurst, now)
		s.buckets[key] = b
	}
	return b
}

// evict makes room in a full shard: first every budget that has refilled
// (it would start full anyway), then, if none has, an arbitrary one.
func (h *HostLookups) evict(s *hostLookupShard, now time.Time) {
	for k, b := range s.buckets {
		if b.full(now) {
			delete(s.buckets, k)
		}
	}
	if len(s.buckets) < h.max {
		return
	}
	for k := range s.buckets {
		delete(s.buckets, k)
		return
	}
}

func (h *HostLookups) shard(key netip.Prefix) *hostLookupShard {
	a := key.Addr().As16()
	return &h.shards[maphash.Bytes(h.seed, a[:])%uint64(len(h.shards))]
}

// takeOrWait is take, and when it refuses, the whole seconds until a token
// is back (1 to 60).
func (b *lookupBudget) takeOrWait(now time.Time) (wait int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return min(60, max(1, int(math.Ceil((1-b.tokens)/b.rate)))), false
}

// give puts a token back, up to the burst.
func (b *lookupBudget) give() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+1)
}

// full reports whether the budget has refilled to its burst by now.
func (b *lookupBudget) full(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	return b.tokens >= b.burst
}
