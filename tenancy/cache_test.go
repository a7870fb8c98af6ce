package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSource is a Source whose answers the test sets, counting lookups.
type fakeSource struct {
	mu       sync.Mutex
	clusters map[string]*Cluster
	keys     map[string]*APIKey
	down     bool
	gate     chan struct{} // when set, lookups wait on it
	lookups  atomic.Int64
}

func (f *fakeSource) answer(ctx context.Context) error {
	f.lookups.Add(1)
	f.mu.Lock()
	gate, down := f.gate, f.down
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if down {
		return errors.New("connection refused")
	}
	return nil
}

func (f *fakeSource) ClusterBySlug(ctx context.Context, slug string) (*Cluster, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clusters[slug]; ok {
		cp := *c
		return &cp, nil
	}
	return nil, ErrNotFound
}

func (f *fakeSource) ClusterByID(ctx context.Context, id string) (*Cluster, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clusters {
		if c.ID == id {
			cp := *c
			return &cp, nil
		}
	}
	return nil, ErrNotFound
}

func (f *fakeSource) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, ok := f.keys[hash]; ok {
		return k, nil
	}
	return nil, ErrNotFound
}

func (f *fakeSource) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestCache(t *testing.T) (*ClusterCache, *fakeSource, *fakeClock) {
	t.Helper()
	src := &fakeSource{
		clusters: map[string]*Cluster{
			"acme": {ID: "11111111-1111-1111-1111-111111111111", Slug: "acme", Status: StatusActive},
			"beta": {ID: "22222222-2222-2222-2222-222222222222", Slug: "beta", Status: StatusActive},
		},
		keys: map[string]*APIKey{},
	}
	src.keys[HashAPIKey("qk_live_acme")] = &APIKey{ID: "k1", Scopes: ScopeSet(ScopeProduce), Cluster: src.clusters["acme"]}
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cc := NewClusterCache(src, CacheConfig{Now: clock.Now, MaxNegativeKeys: 3}, nil)
	return cc, src, clock
}

// eventually polls cond, for effects of background refreshes.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 2s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCacheServesFreshEntriesWithoutLookup(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	for range 5 {
		c, err := cc.ClusterBySlug(ctx, "acme")
		if err != nil || c.Slug != "acme" {
			t.Fatalf("ClusterBySlug = %v, %v", c, err)
		}
	}
	if n := src.lookups.Load(); n != 1 {
		t.Fatalf("lookups = %d, want 1", n)
	}
	clock.Advance(29 * time.Second)
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if n := src.lookups.Load(); n != 1 {
		t.Fatalf("lookups within TTL = %d, want 1", n)
	}
}

func TestCacheUnknownHostIsRememberedBriefly(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	for range 3 {
		if _, err := cc.ClusterBySlug(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	}
	if n := src.lookups.Load(); n != 1 {
		t.Fatalf("lookups = %d, want 1 (a miss is remembered)", n)
	}
	clock.Advance(5 * time.Second)
	if _, err := cc.ClusterBySlug(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if n := src.lookups.Load(); n != 2 {
		t.Fatalf("lookups = %d, want 2 (a miss is forgotten after the negative TTL)", n)
	}
}

func TestCacheClusterCreatedAfterAMissIsFoundOnItsInvalidation(t *testing.T) {
	cc, src, _ := newTestCache(t)
	ctx := context.Background()
	if _, err := cc.ClusterBySlug(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	const id = "33333333-3333-3333-3333-333333333333"
	src.set(func() { src.clusters["nope"] = &Cluster{ID: id, Slug: "nope"} })
	// The creation's notification names only the new cluster's id.
	cc.InvalidateCluster(id)
	if _, err := cc.ClusterBySlug(ctx, "nope"); err != nil {
		t.Fatalf("a cluster created after a miss must be found once its invalidation arrives: %v", err)
	}
}

func TestCacheMissReadBeforeAnInvalidationIsNotRemembered(t *testing.T) {
	cc, src, _ := newTestCache(t)
	gate := make(chan struct{})
	src.set(func() { src.gate = gate })
	done := make(chan error, 1)
	go func() { _, err := cc.ClusterBySlug(context.Background(), "nope"); done <- err }()
	eventually(t, func() bool { return src.lookups.Load() == 1 })
	// The lookup has read "no such row"; the cluster is created and its
	// invalidation arrives before the lookup stores its answer.
	const id = "33333333-3333-3333-3333-333333333333"
	src.set(func() { src.clusters["nope"] = &Cluster{ID: id, Slug: "nope"}; src.gate = nil })
	cc.InvalidateCluster(id)
	close(gate)
	<-done
	if _, err := cc.ClusterBySlug(context.Background(), "nope"); err != nil {
		t.Fatalf("a miss read before the invalidation was remembered: %v", err)
	}
}

func TestCacheUnknownHostsAreBounded(t *testing.T) {
	src := &fakeSource{clusters: map[string]*Cluster{}, keys: map[string]*APIKey{}}
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cc := NewClusterCache(src, CacheConfig{Now: clock.Now, MaxNegativeHosts: 4}, nil)
	for i := range 10 {
		_, _ = cc.ClusterBySlug(context.Background(), "nope"+strings.Repeat("x", i))
	}
	if n := cc.UnknownHosts(); n != 4 {
		t.Fatalf("unknown hosts cached = %d, want the cap 4", n)
	}
}

func TestCacheAdmitGuardsOnlyDatabaseLookups(t *testing.T) {
	cc, src, _ := newTestCache(t)
	ctx := context.Background()
	var asked int
	refuse := func() bool { asked++; return false }
	if _, err := cc.ClusterBySlugAdmit(ctx, "acme", refuse); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("err = %v, want ErrNotAdmitted", err)
	}
	if n := src.lookups.Load(); n != 0 || asked != 1 {
		t.Fatalf("lookups = %d, admit asked %d times; want 0 and 1", n, asked)
	}
	// What the cache holds, found or not, is answered without asking.
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.ClusterBySlug(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := cc.ClusterBySlugAdmit(ctx, "acme", refuse); err != nil {
		t.Fatalf("a cached cluster: %v", err)
	}
	if _, err := cc.ClusterBySlugAdmit(ctx, "nope", refuse); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a cached miss: err = %v, want ErrNotFound", err)
	}
	if asked != 1 {
		t.Fatalf("admit asked %d times, want 1: cached answers cost nothing", asked)
	}
}

func TestCacheSingleFlight(t *testing.T) {
	cc, src, _ := newTestCache(t)
	gate := make(chan struct{})
	src.set(func() { src.gate = gate })
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cc.ClusterBySlug(context.Background(), "acme")
			errs <- err
		}()
	}
	eventually(t, func() bool { return src.lookups.Load() >= 1 })
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := src.lookups.Load(); n != 1 {
		t.Fatalf("lookups = %d, want 1", n)
	}
}

func TestCacheStaleWhileRevalidate(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	src.set(func() { src.clusters["acme"].PlanCode = "pro" })
	clock.Advance(31 * time.Second)
	c, err := cc.ClusterBySlug(ctx, "acme")
	if err != nil || c.PlanCode != "" {
		t.Fatalf("expired entry must be served as-is while refreshing: %+v, %v", c, err)
	}
	eventually(t, func() bool {
		c, _ := cc.ClusterBySlug(ctx, "acme")
		return c.PlanCode == "pro"
	})
	if n := src.lookups.Load(); n != 2 {
		t.Fatalf("lookups = %d, want 2 (one background refresh)", n)
	}
}

func TestCacheStaleGraceWhenDatabaseDown(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	src.set(func() { src.down = true })

	clock.Advance(9 * time.Minute)
	if c, err := cc.ClusterBySlug(ctx, "acme"); err != nil || c.Slug != "acme" {
		t.Fatalf("known cluster within grace must be served: %v", err)
	}
	// Never-seen clusters fail closed at once, as unavailable.
	if _, err := cc.ClusterBySlug(ctx, "beta"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unseen cluster while down: err = %v, want ErrUnavailable", err)
	}
	// Past TTL + grace, the entry is gone too.
	clock.Advance(2 * time.Minute)
	eventually(t, func() bool {
		_, err := cc.ClusterBySlug(ctx, "acme")
		return errors.Is(err, ErrUnavailable)
	})
	// The database answers again.
	src.set(func() { src.down = false })
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

func TestCacheCleanMissRemovesStaleEntry(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	src.set(func() { delete(src.clusters, "acme") })
	clock.Advance(31 * time.Second)
	_, _ = cc.ClusterBySlug(ctx, "acme") // stale, triggers the refresh that finds no row
	eventually(t, func() bool {
		_, err := cc.ClusterBySlug(ctx, "acme")
		return errors.Is(err, ErrNotFound)
	})
}

func TestCacheKeys(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	k, err := cc.APIKey(ctx, "qk_live_acme")
	if err != nil || k.Cluster.Slug != "acme" || !k.Has(ScopeProduce) || k.Has(ScopeAdmin) {
		t.Fatalf("APIKey = %+v, %v", k, err)
	}
	// Unknown keys are cached for 5 s.
	for range 3 {
		if _, err := cc.APIKey(ctx, "qk_live_unknown"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	}
	if n := src.lookups.Load(); n != 2 {
		t.Fatalf("lookups = %d, want 2", n)
	}
	clock.Advance(6 * time.Second)
	_, _ = cc.APIKey(ctx, "qk_live_unknown")
	if n := src.lookups.Load(); n != 3 {
		t.Fatalf("lookups after negative TTL = %d, want 3", n)
	}

	// A revoked key is refused after invalidation even though the
	// database is down afterwards: the clean miss replaced the entry.
	src.set(func() { delete(src.keys, HashAPIKey("qk_live_acme")) })
	cc.InvalidateCluster(k.Cluster.ID)
	if _, err := cc.APIKey(ctx, "qk_live_acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked key: err = %v", err)
	}
	src.set(func() { src.down = true })
	if _, err := cc.APIKey(ctx, "qk_live_acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked key must stay refused: err = %v", err)
	}
}

func TestCacheNegativeKeysAreBounded(t *testing.T) {
	cc, src, clock := newTestCache(t)
	ctx := context.Background()
	for _, k := range []string{"qk_a", "qk_b", "qk_c", "qk_d"} {
		_, _ = cc.APIKey(ctx, k)
	}
	if _, _, neg := cc.Sizes(); neg != 3 {
		t.Fatalf("negatives = %d, want cap 3", neg)
	}
	before := src.lookups.Load()
	_, _ = cc.APIKey(ctx, "qk_d") // not cached: looked up again
	if src.lookups.Load() != before+1 {
		t.Fatal("a miss over the cap must not be cached")
	}
	clock.Advance(6 * time.Second)
	_, _ = cc.APIKey(ctx, "qk_e") // prunes the expired ones
	if _, _, neg := cc.Sizes(); neg != 1 {
		t.Fatalf("negatives after prune = %d, want 1", neg)
	}
}

func TestCacheInvalidateCluster(t *testing.T) {
	cc, src, _ := newTestCache(t)
	ctx := context.Background()
	acme, _ := cc.ClusterBySlug(ctx, "acme")
	if _, err := cc.ClusterByID(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	_, _ = cc.ClusterBySlug(ctx, "beta")
	_, _ = cc.APIKey(ctx, "qk_live_acme")
	src.set(func() { src.clusters["acme"].Status = StatusSuspended })
	cc.InvalidateCluster(acme.ID)
	if clusters, keys, _ := cc.Sizes(); clusters != 1 || keys != 0 {
		t.Fatalf("after invalidation: clusters=%d keys=%d, want 1 and 0", clusters, keys)
	}
	c, _ := cc.ClusterBySlug(ctx, "acme")
	if c.Status != StatusSuspended {
		t.Fatalf("status = %v, want suspended after invalidation", c.Status)
	}
}

func TestCacheLookupStartedBeforeInvalidationIsNotStored(t *testing.T) {
	cc, src, _ := newTestCache(t)
	gate := make(chan struct{})
	src.set(func() { src.gate = gate })
	done := make(chan *Cluster)
	go func() {
		c, _ := cc.ClusterBySlug(context.Background(), "acme")
		done <- c
	}()
	eventually(t, func() bool { return src.lookups.Load() == 1 })
	cc.InvalidateCluster("11111111-1111-1111-1111-111111111111")
	src.set(func() { src.gate = nil })
	close(gate)
	<-done
	if clusters, _, _ := cc.Sizes(); clusters != 0 {
		t.Fatal("a lookup that raced an invalidation must not be cached")
	}
}

func TestCacheRequestContextCancelled(t *testing.T) {
	cc, src, _ := newTestCache(t)
	gate := make(chan struct{})
	defer close(gate)
	src.set(func() { src.gate = gate })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := cc.ClusterBySlug(ctx, "acme"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestHashAPIKey(t *testing.T) {
	// The dev seed's documented key and hash.
	got := HashAPIKey("qk_dev_devdevdevdevdevdevdevdevdevdevdevdevdev")
	if got != "a492a78dbb0a44288f1ff363823b58f4e6fad1367018104e07f7dc118eee781b" {
		t.Fatalf("HashAPIKey = %s", got)
	}
}

func TestCacheCountsHitsAndMisses(t *testing.T) {
	cc, _, _ := newTestCache(t)
	ctx := context.Background()
	for range 3 {
		if _, err := cc.ClusterBySlug(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = cc.APIKey(ctx, "qk_live_nope")
	_, _ = cc.APIKey(ctx, "qk_live_nope")
	got := cc.Counters()
	if got.ClusterMisses != 1 || got.ClusterHits != 2 || got.KeyMisses != 1 || got.KeyHits != 1 {
		t.Fatalf("counters %+v, want 1 cluster miss, 2 hits, 1 key miss (then a cached unknown key), 1 key hit", got)
	}
}

// TestHashAPIKeyOfAnyLength holds the hash to SHA-256 in lower-case hex,
// for keys of any length, with at most one allocation for keys of
// ordinary length.
func TestHashAPIKeyOfAnyLength(t *testing.T) {
	for _, key := range []string{"", "qk_live_short", strings.Repeat("k", 128), strings.Repeat("k", 129), strings.Repeat("x", 4096)} {
		sum := sha256.Sum256([]byte(key))
		if got, want := HashAPIKey(key), hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("HashAPIKey(%d bytes) = %s, want %s", len(key), got, want)
		}
	}
	key := "qk_live_" + strings.Repeat("a", 43)
	if n := testing.AllocsPerRun(100, func() { _ = HashAPIKey(key) }); n > 1 {
		t.Fatalf("HashAPIKey allocates %v times, want at most 1", n)
	}
}
