package limits

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Decision is one token-bucket verdict. The bucket functions always return
// the true verdict; whether a refusal is enforced (429) or only logged
// (shadow mode) is the caller's business.
type Decision struct {
	// Allowed reports whether the tokens were available (and, for a check,
	// taken).
	Allowed bool
	// RetryAfter is set on a refusal: whole seconds until the request would
	// fit, ceil(deficit / rate) clamped to [1, 60]; 60 when the bucket has
	// no refill (rate 0) or the request is larger than the whole capacity
	// and can never fit.
	RetryAfter int
	// Limit is the bucket capacity, for the RateLimit-Policy header; 0 when
	// unlimited.
	Limit int64
	// Remaining is the whole number of tokens left after this decision
	// (floored, never below 0 even when the bucket is in debt).
	Remaining int64
	// ResetSecs is the number of seconds until the bucket is full again
	// (rounded up); 0 when it is full, -1 when it never refills (rate 0).
	ResetSecs int
	// Window is the policy window in seconds for the RateLimit-Policy
	// header: ceil(capacity / rate), at least 1; 0 when the bucket never
	// refills (rate 0), in which case the header carries no window.
	Window int
	// Unlimited reports that no limit is configured: nothing was checked,
	// nothing was recorded, and Allowed is true.
	Unlimited bool
}

// unlimitedDecision is what every call returns for a cluster without a rate.
var unlimitedDecision = Decision{Allowed: true, Unlimited: true}

// retryAfterMax is the clamp of Retry-After, and the answer for a request
// that can never fit.
const retryAfterMax = 60

// tokenEpsilon absorbs float rounding in token comparisons, so that a bucket
// refilled by 0.2 s × 5/s compares equal to 1 token. It is far below the
// smallest token any caller asks for.
const tokenEpsilon = 1e-9

// tokenBucket is one bucket. Tokens are float64 so fractional refills are
// kept exactly enough; updated is nanoseconds on the owning Buckets' epoch.
type tokenBucket struct {
	tokens   float64
	capacity float64
	rate     float64
	updated  int64
	window   int // Decision.Window, recomputed only when the parameters change
	init     bool
}

// bucketParams derives (capacity, rate) from a limit pair. A rate of
// Unlimited means the bucket does not apply (burst alone without a rate is
// unlimited). Capacity is the burst, or 2 × rate when the burst is
// Unlimited. Negative values cannot reach here as numbers (every negative
// Cap is Unlimited), but the arithmetic is clamped at 0 regardless, and at
// maxTokens above so that every figure converts back to int64 exactly.
func bucketParams(rate, burst Cap) (capacity, refill float64, limited bool) {
	if rate.IsUnlimited() {
		return 0, 0, false
	}
	refill = min(max(0, float64(rate)), maxTokens)
	if burst.IsUnlimited() {
		capacity = 2 * refill
	} else {
		capacity = min(max(0, float64(burst)), maxTokens)
	}
	return capacity, refill, true
}

// maxTokens bounds rates and capacities: far beyond any plan (the
// benchmark plan has 4,000,000), and exact as a float64.
const maxTokens = 1e15

// refill adds the tokens earned since the last update at the bucket's
// current rate, up to its current capacity. Elapsed time saturates at 0: a
// clock that steps back earns nothing and does not move updated back.
func (t *tokenBucket) refill(now int64) {
	el := now - t.updated
	if el <= 0 {
		return
	}
	if t.tokens < t.capacity {
		t.tokens = min(t.capacity, t.tokens+float64(el)*t.rate/1e9)
	}
	t.updated = now
}

// configure brings the bucket up to now and applies (capacity, rate). A new
// bucket starts full. Afterwards, time already elapsed is refilled at the
// OLD rate and capacity, and the new parameters apply from now on; tokens are
// only ever clamped down to a smaller capacity, so a configuration change
// (a plan upgrade, an override, a reload) never hands out tokens.
func (t *tokenBucket) configure(capacity, rate float64, now int64) {
	if !t.init {
		*t = tokenBucket{tokens: capacity, capacity: capacity, rate: rate, updated: now, init: true}
		t.window = windowSeconds(capacity, rate)
		return
	}
	t.refill(now)
	if capacity != t.capacity || rate != t.rate {
		t.capacity = capacity
		t.rate = rate
		t.window = windowSeconds(capacity, rate)
	}
	if t.tokens > capacity {
		t.tokens = capacity
	}
}

// windowSeconds is the policy window: the time an empty bucket takes to
// fill, at least 1 s; 0 when it never refills.
func windowSeconds(capacity, rate float64) int {
	if rate <= 0 {
		return 0
	}
	return max(1, ceilSeconds(capacity/rate))
}

// take tries to remove n tokens. A refusal leaves the bucket untouched, so
// shadow-mode refusals never skew later decisions.
func (t *tokenBucket) take(n float64) Decision {
	if t.tokens+tokenEpsilon >= n {
		t.tokens -= n
		return t.state(true, 0)
	}
	return t.state(false, t.retryAfter(n))
}

// retryAfter is the Retry-After for a request of n tokens that does not fit
// now.
func (t *tokenBucket) retryAfter(n float64) int {
	if t.rate <= 0 || n > t.capacity+tokenEpsilon {
		return retryAfterMax
	}
	return min(max(1, ceilSeconds((n-t.tokens)/t.rate)), retryAfterMax)
}

// state describes the bucket as it stands.
func (t *tokenBucket) state(allowed bool, retryAfter int) Decision {
	d := Decision{
		Allowed:    allowed,
		RetryAfter: retryAfter,
		Limit:      int64(t.capacity),
		Window:     t.window,
	}
	if t.tokens > 0 {
		// Truncation is the floor for a positive number.
		d.Remaining = int64(t.tokens + tokenEpsilon)
	}
	switch {
	case t.tokens+tokenEpsilon >= t.capacity:
		d.ResetSecs = 0
	case t.rate <= 0:
		d.ResetSecs = -1
	default:
		d.ResetSecs = ceilSeconds((t.capacity - t.tokens) / t.rate)
	}
	return d
}

// ceilSeconds rounds a non-negative number of seconds up to an int,
// tolerating float noise and saturating instead of overflowing.
func ceilSeconds(s float64) int {
	s -= tokenEpsilon
	if s <= 0 {
		return 0
	}
	if s >= math.MaxInt32 {
		return math.MaxInt32
	}
	c := int(s)
	if float64(c) < s {
		c++
	}
	return c
}

// bucketEntry is one cluster's pair of buckets.
type bucketEntry struct {
	req, msgs tokenBucket
	lastSeen  int64
}

// bucketShardCount is the number of independently locked shards.
const bucketShardCount = 16

type bucketShard struct {
	mu sync.Mutex
	m  map[string]*bucketEntry
	_  [48]byte // keeps neighbouring shards' locks off one cache line
}

// Buckets holds every cluster's request bucket and message bucket, in 16
// shards chosen by a hash of the cluster id, each behind its own mutex, so
// clusters in different shards never contend.
//
// A Buckets keeps no configuration of its own: every call passes the
// cluster's current Effective limits and the bucket is (re)configured from
// them. One Buckets can therefore outlive any number of configuration
// reloads and plan changes, keeping the levels.
type Buckets struct {
	clock  epoch
	seed   maphash.Seed
	shards [bucketShardCount]bucketShard
	nextGC atomic.Int64 // epoch nanos before which MaybeCollectIdle skips
}

// NewBuckets returns an empty set of buckets reading now (time.Now when
// nil).
func NewBuckets(now Clock) *Buckets {
	b := &Buckets{clock: newEpoch(now), seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = make(map[string]*bucketEntry)
	}
	return b
}

func (b *Buckets) shard(clusterID string) *bucketShard {
	return &b.shards[maphash.String(b.seed, clusterID)%bucketShardCount]
}

// entry returns the cluster's entry, creating it; the shard must be locked.
func (s *bucketShard) entry(clusterID string) *bucketEntry {
	e := s.m[clusterID]
	if e == nil {
		e = &bucketEntry{}
		// Clone so the map never pins a larger buffer the id was cut from.
		s.m[strings.Clone(clusterID)] = e
	}
	return e
}

// CheckRequest takes one token from the cluster's request bucket: capacity
// ReqBurst (2 × MaxReqPerSec when the burst is unlimited), refill
// MaxReqPerSec per second. With MaxReqPerSec unlimited it returns an
// Unlimited decision without touching any state.
func (b *Buckets) CheckRequest(clusterID string, lim Effective) Decision {
	capacity, rate, ok := bucketParams(lim.MaxReqPerSec, lim.ReqBurst)
	if !ok {
		return unlimitedDecision
	}
	now := b.clock.nanos()
	s := b.shard(clusterID)
	s.mu.Lock()
	e := s.entry(clusterID)
	e.lastSeen = now
	e.req.configure(capacity, rate, now)
	d := e.req.take(1)
	s.mu.Unlock()
	return d
}

// CheckMessages takes n tokens from the cluster's message bucket (capacity
// MsgsBurst or 2 × MaxMsgsPerSec, refill MaxMsgsPerSec). A batch larger
// than the capacity can never pass and is refused with RetryAfter 60. n ≤ 0
// is always allowed and changes nothing (the decision then describes the
// bucket as Peek would). With MaxMsgsPerSec unlimited it returns an
// Unlimited decision.
func (b *Buckets) CheckMessages(clusterID string, lim Effective, n int64) Decision {
	capacity, rate, ok := bucketParams(lim.MaxMsgsPerSec, lim.MsgsBurst)
	if !ok {
		return unlimitedDecision
	}
	if n <= 0 {
		_, m := b.snapshot(clusterID)
		d := peekBucket(m, capacity, rate, b.clock.nanos())
		d.Allowed, d.RetryAfter = true, 0
		return d
	}
	now := b.clock.nanos()
	s := b.shard(clusterID)
	s.mu.Lock()
	e := s.entry(clusterID)
	e.lastSeen = now
	e.msgs.configure(capacity, rate, now)
	d := e.msgs.take(float64(n))
	s.mu.Unlock()
	return d
}

// DebitDeliveries removes n tokens from the cluster's message bucket without
// a check, after a pop has delivered n messages (first deliveries only: see
// Redeliveries). The bucket may go negative, which throttles the cluster's
// later pushes until it has refilled. n ≤ 0 and unlimited clusters are
// no-ops. The debt is not bounded: a 1,000-message pop on a 20/s plan holds
// pushes back for about 50 s, as in the reference.
func (b *Buckets) DebitDeliveries(clusterID string, lim Effective, n int64) {
	if n <= 0 {
		return
	}
	capacity, rate, ok := bucketParams(lim.MaxMsgsPerSec, lim.MsgsBurst)
	if !ok {
		return
	}
	now := b.clock.nanos()
	s := b.shard(clusterID)
	s.mu.Lock()
	e := s.entry(clusterID)
	e.lastSeen = now
	e.msgs.configure(capacity, rate, now)
	e.msgs.tokens -= float64(n)
	s.mu.Unlock()
}

// Peek describes both of the cluster's buckets as they stand now, under the
// given limits, without taking, recording or creating anything (a cluster
// without an entry is described as a new, full bucket). Allowed and
// RetryAfter answer "would a 1-token request pass now". An unlimited bucket
// gives an Unlimited decision.
func (b *Buckets) Peek(clusterID string, lim Effective) (req, msgs Decision) {
	req, msgs = unlimitedDecision, unlimitedDecision
	rc, rr, rok := bucketParams(lim.MaxReqPerSec, lim.ReqBurst)
	mc, mr, mok := bucketParams(lim.MaxMsgsPerSec, lim.MsgsBurst)
	if !rok && !mok {
		return req, msgs
	}
	rb, mb := b.snapshot(clusterID)
	now := b.clock.nanos()
	if rok {
		req = peekBucket(rb, rc, rr, now)
	}
	if mok {
		msgs = peekBucket(mb, mc, mr, now)
	}
	return req, msgs
}

// snapshot copies a cluster's buckets (zero, i.e. new, when it has none).
func (b *Buckets) snapshot(clusterID string) (req, msgs tokenBucket) {
	s := b.shard(clusterID)
	s.mu.Lock()
	if e := s.m[clusterID]; e != nil {
		req, msgs = e.req, e.msgs
	}
	s.mu.Unlock()
	return req, msgs
}

// peekBucket describes a copy of a bucket under (capacity, rate) at now,
// answering for a 1-token request.
func peekBucket(t tokenBucket, capacity, rate float64, now int64) Decision {
	t.configure(capacity, rate, now)
	if t.tokens+tokenEpsilon >= 1 {
		return t.state(true, 0)
	}
	return t.state(false, t.retryAfter(1))
}

// CollectIdle removes the entries of clusters not checked or debited for
// longer than idle and returns how many it removed. A removed cluster comes
// back as a new, full bucket, which is harmless after an idle period at
// least as long as the time to refill (10 minutes covers every plan).
func (b *Buckets) CollectIdle(idle time.Duration) int {
	cutoff := b.clock.nanos() - int64(idle)
	removed := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		for id, e := range s.m {
			if e.lastSeen < cutoff {
				delete(s.m, id)
				removed++
			}
		}
		s.mu.Unlock()
	}
	return removed
}

// MaybeCollectIdle runs CollectIdle(idle) at most once per every, and can
// be called on the request path: a call that is not due, or that loses the
// race to a concurrent one, returns at once with ran false. The first call
// sweeps.
func (b *Buckets) MaybeCollectIdle(idle, every time.Duration) (removed int, ran bool) {
	now := b.clock.nanos()
	next := b.nextGC.Load()
	if now < next || !b.nextGC.CompareAndSwap(next, now+int64(every)) {
		return 0, false
	}
	return b.CollectIdle(idle), true
}

// Len returns the number of clusters that have bucket state.
func (b *Buckets) Len() int {
	n := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
