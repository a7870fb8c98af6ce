package tenancy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnavailable wraps every lookup failure in which the database did not
// answer (or answered with something that could not be decoded), as opposed
// to ErrNotFound, where it answered "no such row".
var ErrUnavailable = errors.New("control-plane database unavailable")

// swrCache is a read-through cache with the semantics the gateway needs for
// control-plane rows: fresh entries for ttl; after that, stale entries served
// for up to grace while one background refresh runs; one lookup in flight
// per key; "no such row" always fails closed; a database that does not
// answer keeps known-good entries alive for the grace window.
type swrCache[V any] struct {
	load           func(ctx context.Context, key string) (V, error)
	ttl            time.Duration
	negativeTTL    time.Duration // 0: misses are never cached
	maxNegatives   int
	grace          time.Duration
	refreshBackoff time.Duration
	lookupTimeout  time.Duration
	now            func() time.Time
	onStale        func(key string, err error)

	mu        sync.Mutex
	entries   map[string]*cacheEntry[V]
	flights   map[string]*flight[V]
	negatives int
	// generation is bumped by every invalidation; a lookup that started
	// before one does not store what it read, because it may predate the
	// change that caused the invalidation.
	generation uint64

	// hits are answers from the cache (fresh, or stale while one refresh
	// runs); misses waited for a database lookup.
	hits, misses atomic.Uint64
}

type cacheEntry[V any] struct {
	value        V
	found        bool
	expires      time.Time
	refreshAfter time.Time
}

type flight[V any] struct {
	done  chan struct{}
	value V
	err   error
}

// ErrNotAdmitted is returned by a lookup that would have gone to the
// database but that its caller's admit function refused: nothing was
// looked up.
var ErrNotAdmitted = errors.New("lookup not admitted")

func (c *swrCache[V]) get(ctx context.Context, key string) (V, error) {
	return c.getAdmit(ctx, key, nil)
}

// getAdmit is get, but a lookup that would go to the database (no entry to
// serve, and none in flight for key) runs only if admit, when not nil,
// says so; otherwise it returns ErrNotAdmitted. admit runs under c.mu and
// must not call back into the cache.
func (c *swrCache[V]) getAdmit(ctx context.Context, key string, admit func() bool) (V, error) {
	var zero V
	now := c.now()
	c.mu.Lock()
	if e := c.entries[key]; e != nil {
		if now.Before(e.expires) {
			c.mu.Unlock()
			c.hits.Add(1)
			if e.found {
				return e.value, nil
			}
			return zero, ErrNotFound
		}
		if e.found && now.Before(e.expires.Add(c.grace)) {
			if !now.Before(e.refreshAfter) {
				e.refreshAfter = now.Add(c.refreshBackoff)
				if c.flights[key] == nil {
					c.startLookupLocked(key)
				}
			}
			c.mu.Unlock()
			c.hits.Add(1)
			return e.value, nil
		}
	}
	f := c.flights[key]
	if f == nil {
		if admit != nil && !admit() {
			c.mu.Unlock()
			return zero, ErrNotAdmitted
		}
		f = c.startLookupLocked(key)
	}
	c.misses.Add(1)
	c.mu.Unlock()

	select {
	case <-f.done:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	if f.err != nil {
		return zero, f.err
	}
	return f.value, nil
}

// holds reports whether key has a found entry that get would serve without
// waiting (fresh, or stale within the grace), without looking anything up.
func (c *swrCache[V]) holds(key string) (V, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil && e.found && now.Before(e.expires.Add(c.grace)) {
		return e.value, true
	}
	var zero V
	return zero, false
}

// startLookupLocked runs the lookup for key in its own goroutine, detached
// from any one request, and stores its outcome itself. c.mu must be held.
func (c *swrCache[V]) startLookupLocked(key string) *flight[V] {
	f := &flight[V]{done: make(chan struct{})}
	c.flights[key] = f
	gen := c.generation
	go func() {
		defer func() {
			if r := recover(); r != nil {
				f.err = fmt.Errorf("%w: lookup panicked: %v", ErrUnavailable, r)
			}
			c.finish(key, f, gen)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), c.lookupTimeout)
		defer cancel()
		v, err := c.load(ctx, key)
		switch {
		case err == nil:
			f.value = v
		case errors.Is(err, ErrNotFound):
			f.err = ErrNotFound
		default:
			f.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}()
	return f
}

func (c *swrCache[V]) finish(key string, f *flight[V], gen uint64) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(f.done)
	delete(c.flights, key)
	switch {
	case f.err == nil:
		if gen == c.generation {
			c.putLocked(key, &cacheEntry[V]{value: f.value, found: true, expires: now.Add(c.ttl), refreshAfter: now.Add(c.ttl)})
		}
	case errors.Is(f.err, ErrNotFound):
		// A clean miss always replaces what was there, so a revoked key or
		// a deleted cluster can never be resurrected by the grace window.
		c.deleteLocked(key)
		// A miss read before an invalidation is not kept: the row may have
		// been created since (the invalidation may be its creation).
		if c.negativeTTL > 0 && gen == c.generation && c.roomForNegativeLocked(now) {
			c.putLocked(key, &cacheEntry[V]{expires: now.Add(c.negativeTTL)})
		}
	default:
		// Requests that waited here had no entry within grace (get serves
		// those without waiting), so they get the error; a known entry only
		// backs off its next refresh.
		if e := c.entries[key]; e != nil && e.found {
			e.refreshAfter = now.Add(c.refreshBackoff)
		}
		if c.onStale != nil {
			c.onStale(key, f.err)
		}
	}
}

func (c *swrCache[V]) putLocked(key string, e *cacheEntry[V]) {
	c.deleteLocked(key)
	c.entries[key] = e
	if !e.found {
		c.negatives++
	}
}

func (c *swrCache[V]) deleteLocked(key string) {
	if old := c.entries[key]; old != nil {
		if !old.found {
			c.negatives--
		}
		delete(c.entries, key)
	}
}

// roomForNegativeLocked keeps the number of cached misses bounded: at the
// cap, expired misses are pruned; if the cap is still reached, the new miss
// is simply not cached.
func (c *swrCache[V]) roomForNegativeLocked(now time.Time) bool {
	if c.negatives < c.maxNegatives {
		return true
	}
	for k, e := range c.entries {
		if !e.found && !now.Before(e.expires) {
			c.deleteLocked(k)
		}
	}
	return c.negatives < c.maxNegatives
}

// invalidate drops every positive entry whose value matches, and every
// cached miss when misses is set (a miss names no row to match: the change
// may be the row's creation).
func (c *swrCache[V]) invalidate(match func(V) bool, misses bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.generation++
	for k, e := range c.entries {
		if (e.found && match(e.value)) || (!e.found && misses) {
			c.deleteLocked(k)
		}
	}
}

func (c *swrCache[V]) len() (positives, negatives int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries) - c.negatives, c.negatives
}
