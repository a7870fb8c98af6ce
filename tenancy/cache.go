package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Source is where the cluster cache reads from; *Store is the production
// Source.
type Source interface {
	ClusterBySlug(ctx context.Context, slug string) (*Cluster, error)
	ClusterByID(ctx context.Context, id string) (*Cluster, error)
	APIKeyByHash(ctx context.Context, hash string) (*APIKey, error)
}

// CacheConfig tunes the cluster cache. Zero values take the defaults noted
// on each field.
type CacheConfig struct {
	TTL             time.Duration // fresh life of a found cluster or key; default 30s
	KeyNegativeTTL  time.Duration // life of an unknown-key answer; default 5s
	MaxNegativeKeys int           // cap on cached unknown keys; default 10,000
	// HostNegativeTTL is the life of an answer that no cluster has a slug
	// (or id); default 5s. Any cluster's invalidation drops them all, so a
	// cluster just created is found at once.
	HostNegativeTTL  time.Duration
	MaxNegativeHosts int              // cap on cached unknown slugs and ids; default 10,000
	StaleGrace       time.Duration    // how long a known entry outlives its TTL while the database does not answer; default 10m
	RefreshBackoff   time.Duration    // pause between refresh attempts of one entry; default 1s
	LookupTimeout    time.Duration    // bound on one database lookup; default 5s
	Now              func() time.Time // clock, for tests; default time.Now
}

func (c *CacheConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.TTL, 30*time.Second)
	def(&c.KeyNegativeTTL, 5*time.Second)
	def(&c.HostNegativeTTL, 5*time.Second)
	def(&c.StaleGrace, 10*time.Minute)
	def(&c.RefreshBackoff, time.Second)
	def(&c.LookupTimeout, 5*time.Second)
	if c.MaxNegativeKeys <= 0 {
		c.MaxNegativeKeys = 10000
	}
	if c.MaxNegativeHosts <= 0 {
		c.MaxNegativeHosts = 10000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// ClusterCache keeps clusters (by host slug and by id) and API keys (by
// hash) close to the request path. Unknown hosts and unknown keys are
// cached briefly, each up to a cap; a flood of names past the cap is
// bounded by the caller's admit function (ClusterBySlugAdmit). See
// swrCache for the freshness rules.
type ClusterCache struct {
	clusters *swrCache[*Cluster]
	keys     *swrCache[*APIKey]

	log           *zap.Logger
	lastStaleWarn atomic.Int64
}

// clusterIDPrefix namespaces id lookups in the cluster table; a slug cannot
// contain ':' so the two can never collide.
const clusterIDPrefix = "id:"

// NewClusterCache returns a cache reading from src.
func NewClusterCache(src Source, cfg CacheConfig, log *zap.Logger) *ClusterCache {
	cfg.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	cc := &ClusterCache{log: log}
	cc.clusters = &swrCache[*Cluster]{
		load: func(ctx context.Context, key string) (*Cluster, error) {
			if id, ok := strings.CutPrefix(key, clusterIDPrefix); ok {
				return src.ClusterByID(ctx, id)
			}
			return src.ClusterBySlug(ctx, key)
		},
		ttl: cfg.TTL, negativeTTL: cfg.HostNegativeTTL, maxNegatives: cfg.MaxNegativeHosts,
		grace: cfg.StaleGrace, refreshBackoff: cfg.RefreshBackoff,
		lookupTimeout: cfg.LookupTimeout, now: cfg.Now, onStale: cc.warnStale,
		entries: map[string]*cacheEntry[*Cluster]{}, flights: map[string]*flight[*Cluster]{},
	}
	cc.keys = &swrCache[*APIKey]{
		load: src.APIKeyByHash,
		ttl:  cfg.TTL, negativeTTL: cfg.KeyNegativeTTL, maxNegatives: cfg.MaxNegativeKeys,
		grace: cfg.StaleGrace, refreshBackoff: cfg.RefreshBackoff,
		lookupTimeout: cfg.LookupTimeout, now: cfg.Now, onStale: cc.warnStale,
		entries: map[string]*cacheEntry[*APIKey]{}, flights: map[string]*flight[*APIKey]{},
	}
	return cc
}

// ClusterBySlug returns the cluster a host label names. It returns an error
// wrapping ErrNotFound when there is no such cluster, or ErrUnavailable when
// the database did not answer and no known-good entry is within its grace.
func (cc *ClusterCache) ClusterBySlug(ctx context.Context, slug string) (*Cluster, error) {
	if slug == "" || strings.Contains(slug, ":") {
		return nil, ErrNotFound
	}
	return cc.clusters.get(ctx, slug)
}

// ClusterBySlugAdmit is ClusterBySlug, but a slug the cache cannot answer
// (neither a cluster nor a recent "no such cluster" is cached, and no lookup
// of it is in flight) is looked up only if admit says so; otherwise it
// returns ErrNotAdmitted without asking the database. admit must not call
// back into the cache.
func (cc *ClusterCache) ClusterBySlugAdmit(ctx context.Context, slug string, admit func() bool) (*Cluster, error) {
	if slug == "" || strings.Contains(slug, ":") {
		return nil, ErrNotFound
	}
	return cc.clusters.getAdmit(ctx, slug, admit)
}

// ClusterByID returns the cluster with the given id, under the same rules as
// ClusterBySlug.
func (cc *ClusterCache) ClusterByID(ctx context.Context, id string) (*Cluster, error) {
	if id == "" {
		return nil, ErrNotFound
	}
	return cc.clusters.get(ctx, clusterIDPrefix+id)
}

// APIKey returns the live key whose plaintext is presented, with its
// cluster. Only the key's SHA-256 is looked up or kept.
func (cc *ClusterCache) APIKey(ctx context.Context, presented string) (*APIKey, error) {
	return cc.keys.get(ctx, HashAPIKey(presented))
}

// KnownAPIKey returns the key whose plaintext is presented when the cache
// holds it as live, without a database lookup; nil otherwise.
func (cc *ClusterCache) KnownAPIKey(presented string) *APIKey {
	k, ok := cc.keys.holds(HashAPIKey(presented))
	if !ok {
		return nil
	}
	return k
}

// InvalidateCluster drops every cached entry of one cluster: its host and id
// entries and its keys, and every cached unknown slug and id (the change may
// be the cluster's creation, or a new slug, and an unknown name does not say
// which cluster it would become). Cached unknown keys stay until they
// expire: a new key's hash was never asked for.
func (cc *ClusterCache) InvalidateCluster(id string) {
	cc.clusters.invalidate(func(c *Cluster) bool { return c.ID == id }, true)
	cc.keys.invalidate(func(k *APIKey) bool { return k.Cluster.ID == id }, false)
}

// InvalidateAll drops every cached cluster and key, for when invalidation
// messages may have been missed.
func (cc *ClusterCache) InvalidateAll() {
	cc.clusters.invalidate(func(*Cluster) bool { return true }, true)
	cc.keys.invalidate(func(*APIKey) bool { return true }, false)
}

// Sizes reports how many clusters, keys and unknown keys are cached.
func (cc *ClusterCache) Sizes() (clusters, keys, unknownKeys int) {
	clusters, _ = cc.clusters.len()
	keys, unknownKeys = cc.keys.len()
	return clusters, keys, unknownKeys
}

// UnknownHosts reports how many unknown slugs and ids are cached.
func (cc *ClusterCache) UnknownHosts() int {
	_, n := cc.clusters.len()
	return n
}

// CacheCounters are the cache's lookups since start.
type CacheCounters struct {
	ClusterHits, ClusterMisses uint64
	KeyHits, KeyMisses         uint64
}

// Counters reports how many lookups the cache answered itself and how many
// went to the database.
func (cc *ClusterCache) Counters() CacheCounters {
	return CacheCounters{
		ClusterHits: cc.clusters.hits.Load(), ClusterMisses: cc.clusters.misses.Load(),
		KeyHits: cc.keys.hits.Load(), KeyMisses: cc.keys.misses.Load(),
	}
}

// warnStale logs, at most once per 10 s, that the database did not answer a
// lookup, so an outage is visible without flooding the log.
func (cc *ClusterCache) warnStale(key string, err error) {
	now := time.Now().UnixNano()
	last := cc.lastStaleWarn.Load()
	if now-last < int64(10*time.Second) || !cc.lastStaleWarn.CompareAndSwap(last, now) {
		return
	}
	cc.log.Warn("control-plane lookup failed; serving known clusters from cache within the stale grace",
		zap.Error(err))
}

// HashAPIKey returns the lowercase SHA-256 hex of a presented key, the only
// form in which keys are stored or cached.
func HashAPIKey(presented string) string {
	// The key is copied to a buffer on the stack and hex-encoded into
	// another: one allocation (the result) instead of three, on every
	// request that presents a key.
	var in [128]byte
	var sum [sha256.Size]byte
	if len(presented) <= len(in) {
		n := copy(in[:], presented)
		sum = sha256.Sum256(in[:n])
	} else {
		sum = sha256.Sum256([]byte(presented))
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}
