package limits

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testStart is the origin of every manual clock in these tests.
var testStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// reqLimits is an Effective with only the request bucket set.
func reqLimits(rate, burst Cap) Effective {
	e := AllUnlimited()
	e.MaxReqPerSec, e.ReqBurst = rate, burst
	return e
}

// msgLimits is an Effective with only the message bucket set.
func msgLimits(rate, burst Cap) Effective {
	e := AllUnlimited()
	e.MaxMsgsPerSec, e.MsgsBurst = rate, burst
	return e
}

func newTestBuckets() (*Buckets, *ManualClock) {
	c := NewManualClock(testStart)
	return NewBuckets(c.Now), c
}

// drainReq takes request tokens until a refusal and returns how many were
// allowed (failing past limit).
func drainReq(t *testing.T, b *Buckets, id string, lim Effective, limit int) int {
	t.Helper()
	for i := 0; i <= limit; i++ {
		if d := b.CheckRequest(id, lim); !d.Allowed {
			return i
		}
	}
	t.Fatalf("more than %d requests allowed", limit)
	return -1
}

func TestBucketStartsFullRefillsAndCaps(t *testing.T) {
	// capacity 10 / rate 5: full at start, drain 10, +5 after 1 s, capped
	// at 10 after 3 s.
	b, clk := newTestBuckets()
	lim := reqLimits(5, 10)
	if got := drainReq(t, b, "c1", lim, 20); got != 10 {
		t.Fatalf("new bucket allowed %d, want 10 (starts full)", got)
	}
	clk.Advance(time.Second)
	if got := drainReq(t, b, "c1", lim, 20); got != 5 {
		t.Fatalf("after 1 s allowed %d, want 5", got)
	}
	clk.Advance(3 * time.Second)
	if got := drainReq(t, b, "c1", lim, 20); got != 10 {
		t.Fatalf("after 3 s allowed %d, want 10 (capped at capacity)", got)
	}
}

func TestBucketBurstThreeRateOne(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(1, 3)
	for i := 0; i < 3; i++ {
		if d := b.CheckRequest("c", lim); !d.Allowed {
			t.Fatalf("request %d refused", i)
		}
	}
	d := b.CheckRequest("c", lim)
	if d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("4th request = %+v, want refused with RetryAfter 1", d)
	}
	clk.Advance(time.Second)
	if d := b.CheckRequest("c", lim); !d.Allowed {
		t.Fatalf("after 1 s refused: %+v", d)
	}
	if d := b.CheckRequest("c", lim); d.Allowed {
		t.Fatalf("second request after 1 s allowed")
	}
}

func TestBucketCapacityDefaultsToTwiceRate(t *testing.T) {
	b, _ := newTestBuckets()
	if got := drainReq(t, b, "c", reqLimits(5, Unlimited), 20); got != 10 {
		t.Fatalf("allowed %d, want 2 × rate = 10", got)
	}
	if d := b.CheckMessages("c", msgLimits(20, Unlimited), 40); !d.Allowed || d.Limit != 40 {
		t.Fatalf("msgs 40 on rate 20 = %+v, want allowed with limit 40", d)
	}
}

func TestBucketExactFractionalRefill(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(5, 5)
	drainReq(t, b, "c", lim, 10)
	// 200 ms at 5/s is exactly one token.
	clk.Advance(200 * time.Millisecond)
	if d := b.CheckRequest("c", lim); !d.Allowed {
		t.Fatalf("after 200 ms at 5/s refused: %+v", d)
	}
	// 199 ms is not.
	clk.Advance(199 * time.Millisecond)
	if d := b.CheckRequest("c", lim); d.Allowed {
		t.Fatalf("after 199 ms at 5/s allowed")
	}
	clk.Advance(time.Millisecond)
	if d := b.CheckRequest("c", lim); !d.Allowed {
		t.Fatalf("after 199+1 ms refused: %+v", d)
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name       string
		rate, cap  Cap
		take       int64         // taken first (allowed)
		wait       time.Duration // then waited
		ask        int64
		retryAfter int
	}{
		{"sub-second deficit floors to 1", 5, 5, 5, 0, 2, 1},
		{"deficit over rate rounds up", 10, 100, 100, 0, 35, 4},
		{"exact multiple", 10, 100, 100, 0, 30, 3},
		{"partial tokens count", 5, 10, 10, 100 * time.Millisecond, 1, 1},
		{"partial tokens shorten the wait", 1, 10, 10, 1500 * time.Millisecond, 3, 2},
		{"clamped to 60", 1, 100, 100, 0, 100, 60},
		{"just under the clamp", 1, 100, 100, 0, 59, 59},
		{"batch larger than capacity never fits", 10, 5, 0, 0, 999, 60},
		{"batch one over a full capacity", 10, 5, 0, 0, 6, 60},
		{"rate zero", 0, 10, 10, 0, 1, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, clk := newTestBuckets()
			lim := msgLimits(tc.rate, tc.cap)
			if tc.take > 0 {
				if d := b.CheckMessages("c", lim, tc.take); !d.Allowed {
					t.Fatalf("setup take %d refused: %+v", tc.take, d)
				}
			}
			clk.Advance(tc.wait)
			d := b.CheckMessages("c", lim, tc.ask)
			if d.Allowed || d.RetryAfter != tc.retryAfter {
				t.Fatalf("ask %d = %+v, want refused with RetryAfter %d", tc.ask, d, tc.retryAfter)
			}
		})
	}
}

func TestMessageBucketTenPerSecondBurstFive(t *testing.T) {
	// msgs 10/s burst 5 asking 999 -> Retry-After 60, nothing taken.
	b, _ := newTestBuckets()
	lim := msgLimits(10, 5)
	d := b.CheckMessages("c", lim, 999)
	if d.Allowed || d.RetryAfter != 60 {
		t.Fatalf("999 on burst 5 = %+v, want refused with 60", d)
	}
	if d := b.CheckMessages("c", lim, 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("5 after the refused batch = %+v, want allowed (refusal took nothing)", d)
	}
}

func TestDenialNeverDebits(t *testing.T) {
	b, clk := newTestBuckets()
	lim := msgLimits(1, 10)
	if d := b.CheckMessages("c", lim, 7); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("take 7 = %+v", d)
	}
	for i := 0; i < 100; i++ {
		if d := b.CheckMessages("c", lim, 5); d.Allowed || d.Remaining != 3 || d.RetryAfter != 2 {
			t.Fatalf("refusal %d = %+v, want refused, 3 left, RetryAfter 2", i, d)
		}
	}
	if d := b.CheckMessages("c", lim, 3); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("take 3 after 100 refusals = %+v, want allowed", d)
	}
	// Request bucket: refusals while empty do not push the refill back.
	rl := reqLimits(1, 1)
	b.CheckRequest("r", rl)
	for i := 0; i < 10; i++ {
		clk.Advance(50 * time.Millisecond)
		if d := b.CheckRequest("r", rl); d.Allowed {
			t.Fatalf("allowed at %d×50 ms", i+1)
		}
	}
	clk.Advance(500 * time.Millisecond)
	if d := b.CheckRequest("r", rl); !d.Allowed {
		t.Fatalf("refused after a full second of refusals: %+v", d)
	}
}

func TestMessagesNonPositiveAlwaysAllowed(t *testing.T) {
	b, _ := newTestBuckets()
	lim := msgLimits(1, 2)
	for _, n := range []int64{0, -5} {
		if d := b.CheckMessages("fresh", lim, n); !d.Allowed || d.Unlimited {
			t.Fatalf("n=%d = %+v", n, d)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("n ≤ 0 created state: Len = %d", b.Len())
	}
	b.CheckMessages("c", lim, 2)
	d := b.CheckMessages("c", lim, 0)
	if !d.Allowed || d.RetryAfter != 0 || d.Remaining != 0 || d.Limit != 2 {
		t.Fatalf("n=0 on an empty bucket = %+v, want allowed, describing it", d)
	}
	b.DebitDeliveries("c", lim, 0)
	b.DebitDeliveries("c", lim, -3)
	if _, m := b.Peek("c", lim); m.Remaining != 0 || m.Allowed {
		t.Fatalf("after no-op debits = %+v", m)
	}
}

func TestUnlimitedTouchesNothing(t *testing.T) {
	b, _ := newTestBuckets()
	// No rate means unlimited, whatever the burst says.
	for _, lim := range []Effective{AllUnlimited(), reqLimits(Unlimited, 5), msgLimits(Unlimited, 5)} {
		if d := b.CheckRequest("c", lim); d != unlimitedDecision {
			t.Fatalf("CheckRequest = %+v, want unlimited", d)
		}
		if d := b.CheckMessages("c", lim, 1_000_000); d != unlimitedDecision {
			t.Fatalf("CheckMessages = %+v, want unlimited", d)
		}
		b.DebitDeliveries("c", lim, 1_000_000)
		if r, m := b.Peek("c", lim); r != unlimitedDecision || m != unlimitedDecision {
			t.Fatalf("Peek = %+v %+v", r, m)
		}
	}
	if n := b.Len(); n != 0 {
		t.Fatalf("unlimited calls created %d entries", n)
	}
	// A limited request bucket next to an unlimited message bucket.
	if d := b.CheckMessages("c", reqLimits(1, 1), 1_000_000); d != unlimitedDecision {
		t.Fatalf("messages under a request-only limit = %+v", d)
	}
}

func TestDeliveriesDriveNegative(t *testing.T) {
	// debit 50 on a 10/10 bucket -> tokens −40, next check of 1 denies.
	b, clk := newTestBuckets()
	lim := msgLimits(10, 10)
	b.DebitDeliveries("c", lim, 50)
	if got := b.shard("c").m["c"].msgs.tokens; got != -40 {
		t.Fatalf("tokens = %v, want -40", got)
	}
	d := b.CheckMessages("c", lim, 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 5 {
		t.Fatalf("check after debit = %+v, want refused, 0 left, RetryAfter ceil(41/10)=5", d)
	}
	if d.ResetSecs != 5 {
		t.Fatalf("ResetSecs = %d, want ceil(50/10)=5", d.ResetSecs)
	}
	clk.Advance(4 * time.Second)
	if d := b.CheckMessages("c", lim, 1); d.Allowed {
		t.Fatalf("allowed at 0 tokens")
	}
	clk.Advance(100 * time.Millisecond)
	if d := b.CheckMessages("c", lim, 1); !d.Allowed {
		t.Fatalf("refused at 1 token: %+v", d)
	}
	// Deliveries never touch the request bucket.
	if r, _ := b.Peek("c", lim); !r.Unlimited {
		t.Fatalf("request bucket = %+v", r)
	}
}

func TestConfigChangeClampsDownNeverRefills(t *testing.T) {
	b, clk := newTestBuckets()
	// Downgrade: a full 10 is clamped to 4.
	if d := b.CheckRequest("c", reqLimits(5, 10)); d.Remaining != 9 {
		t.Fatalf("first = %+v", d)
	}
	d := b.CheckRequest("c", reqLimits(5, 4))
	if !d.Allowed || d.Remaining != 3 || d.Limit != 4 {
		t.Fatalf("after downgrade = %+v, want 3 left of 4", d)
	}
	// Drain, then upgrade: no free tokens.
	drainReq(t, b, "c", reqLimits(5, 4), 10)
	d = b.CheckRequest("c", reqLimits(500, 1000))
	if d.Allowed || d.Remaining != 0 || d.Limit != 1000 {
		t.Fatalf("after upgrade = %+v, want still empty", d)
	}
	// An unchanged configuration (a reload) keeps the level too.
	if d := b.CheckRequest("c", reqLimits(500, 1000)); d.Allowed {
		t.Fatalf("reload refilled the bucket: %+v", d)
	}
	// The new rate applies from now: 10 ms at 500/s is 5 tokens.
	clk.Advance(10 * time.Millisecond)
	if d := b.CheckRequest("c", reqLimits(500, 1000)); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("after 10 ms at 500/s = %+v, want 4 left", d)
	}
}

func TestRateChangeAppliesFromNow(t *testing.T) {
	b, clk := newTestBuckets()
	slow := reqLimits(1, 10)
	fast := reqLimits(100, 10)
	drainReq(t, b, "c", slow, 20)
	// Two seconds pass under the old rate: 2 tokens, not 200.
	clk.Advance(2 * time.Second)
	d := b.CheckRequest("c", fast)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("first call under the new rate = %+v, want 1 left (2 earned at the old rate)", d)
	}
	// From now on the new rate: 10 ms at 100/s is one token.
	clk.Advance(10 * time.Millisecond)
	if d := b.CheckRequest("c", fast); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("10 ms later = %+v, want 1 left", d)
	}
	// And back to a rate of zero: nothing more is earned.
	zero := reqLimits(0, 10)
	b.CheckRequest("c", zero)
	clk.Advance(time.Hour)
	r, _ := b.Peek("c", zero)
	if r.Remaining != 0 || r.Allowed || r.RetryAfter != 60 || r.ResetSecs != -1 || r.Window != 0 {
		t.Fatalf("rate 0 after an hour = %+v, want empty, Retry-After 60, never resets, no window", r)
	}
}

func TestRateZero(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(0, 3)
	if got := drainReq(t, b, "c", lim, 10); got != 3 {
		t.Fatalf("allowed %d, want the burst of 3", got)
	}
	clk.Advance(time.Hour)
	d := b.CheckRequest("c", lim)
	if d.Allowed || d.RetryAfter != 60 {
		t.Fatalf("rate 0 = %+v, want refused with 60", d)
	}
	// Rate 0 without a burst has capacity 0: nothing ever passes.
	d = b.CheckRequest("z", reqLimits(0, Unlimited))
	if d.Allowed || d.RetryAfter != 60 || d.Limit != 0 {
		t.Fatalf("rate 0 no burst = %+v", d)
	}
	// Burst 0 with a rate: capacity 0, a request can never fit.
	d = b.CheckRequest("b", reqLimits(10, 0))
	if d.Allowed || d.RetryAfter != 60 {
		t.Fatalf("burst 0 = %+v", d)
	}
}

func TestDecisionFields(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(5, 25)
	d := b.CheckRequest("c", lim)
	want := Decision{Allowed: true, Limit: 25, Remaining: 24, ResetSecs: 1, Window: 5}
	if d != want {
		t.Fatalf("first = %+v, want %+v", d, want)
	}
	for i := 0; i < 12; i++ {
		b.CheckRequest("c", lim)
	}
	// 11 left of 25: 14 missing at 5/s = 2.8 s -> 3.
	d = b.CheckRequest("c", lim)
	want = Decision{Allowed: true, Limit: 25, Remaining: 11, ResetSecs: 3, Window: 5}
	if d != want {
		t.Fatalf("after 14 = %+v, want %+v", d, want)
	}
	clk.Advance(300 * time.Millisecond) // +1.5
	r, _ := b.Peek("c", lim)
	want = Decision{Allowed: true, Limit: 25, Remaining: 12, ResetSecs: 3, Window: 5}
	if r != want {
		t.Fatalf("peek = %+v, want %+v", r, want)
	}
	// A window below one second is reported as 1.
	if d := b.CheckRequest("w", reqLimits(100, 10)); d.Window != 1 {
		t.Fatalf("window = %d, want 1", d.Window)
	}
}

func TestPeek(t *testing.T) {
	b, _ := newTestBuckets()
	lim := reqLimits(5, 10)
	lim.MaxMsgsPerSec, lim.MsgsBurst = 20, 100
	r, m := b.Peek("new", lim)
	if !r.Allowed || r.Remaining != 10 || r.ResetSecs != 0 || !m.Allowed || m.Remaining != 100 {
		t.Fatalf("peek of a new cluster = %+v %+v, want both full", r, m)
	}
	if b.Len() != 0 {
		t.Fatalf("peek created an entry")
	}
	for i := 0; i < 3; i++ {
		b.Peek("new", lim)
	}
	drainReq(t, b, "new", lim, 20)
	r, m = b.Peek("new", lim)
	if r.Allowed || r.Remaining != 0 || r.RetryAfter != 1 || r.ResetSecs != 2 {
		t.Fatalf("peek of a drained request bucket = %+v", r)
	}
	if !m.Allowed || m.Remaining != 100 {
		t.Fatalf("peek of the untouched message bucket = %+v", m)
	}
	// Peek under a smaller capacity reports the clamp without storing it.
	b.CheckMessages("new", lim, 10) // 90 left
	small := lim
	small.MsgsBurst = 50
	if _, m := b.Peek("new", small); m.Remaining != 50 || m.Limit != 50 {
		t.Fatalf("peek under burst 50 = %+v", m)
	}
	if _, m := b.Peek("new", lim); m.Remaining != 90 {
		t.Fatalf("peek wrote the clamp: %+v", m)
	}
}

func TestClockSteppingBackNeverRefunds(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(1, 5)
	drainReq(t, b, "c", lim, 10)
	clk.Advance(-10 * time.Second)
	if d := b.CheckRequest("c", lim); d.Allowed {
		t.Fatalf("clock stepping back refilled")
	}
	// Back to the original instant + 1 s: exactly one token, the 10 s of
	// negative time are neither earned nor owed twice.
	clk.Advance(11 * time.Second)
	if d := b.CheckRequest("c", lim); !d.Allowed {
		t.Fatalf("refused 1 s after the drain point: %+v", d)
	}
	if d := b.CheckRequest("c", lim); d.Allowed {
		t.Fatalf("more than one token earned")
	}
}

func TestCollectIdle(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(1, 5)
	drainReq(t, b, "old", lim, 10)
	clk.Advance(5 * time.Minute)
	b.DebitDeliveries("recent", msgLimits(1, 5), 1)
	clk.Advance(5*time.Minute + time.Second)
	if n := b.CollectIdle(10 * time.Minute); n != 1 {
		t.Fatalf("collected %d, want 1", n)
	}
	if b.Len() != 1 || b.shard("recent").m["recent"] == nil {
		t.Fatalf("the recent entry was collected")
	}
	// A collected cluster comes back full.
	if got := drainReq(t, b, "old", lim, 10); got != 5 {
		t.Fatalf("collected cluster allowed %d, want 5", got)
	}
	// Peek does not keep an entry alive.
	clk.Advance(11 * time.Minute)
	b.Peek("old", lim)
	if n := b.CollectIdle(10 * time.Minute); n != 2 {
		t.Fatalf("collected %d, want 2", n)
	}
}

func TestMaybeCollectIdle(t *testing.T) {
	b, clk := newTestBuckets()
	lim := reqLimits(1, 5)
	b.CheckRequest("c", lim)
	if _, ran := b.MaybeCollectIdle(10*time.Minute, 120*time.Second); !ran {
		t.Fatalf("first call did not sweep")
	}
	clk.Advance(11 * time.Minute)
	b.CheckRequest("d", lim)
	n, ran := b.MaybeCollectIdle(10*time.Minute, 120*time.Second)
	if !ran || n != 1 {
		t.Fatalf("due sweep = %d %v, want 1 true", n, ran)
	}
	clk.Advance(119 * time.Second)
	if _, ran := b.MaybeCollectIdle(time.Nanosecond, 120*time.Second); ran {
		t.Fatalf("swept again within 120 s")
	}
	clk.Advance(time.Second)
	if n, ran := b.MaybeCollectIdle(time.Nanosecond, 120*time.Second); !ran || n != 1 {
		t.Fatalf("sweep after 120 s = %d %v", n, ran)
	}
}

// idsInShards returns one cluster id for each of two different shards.
func idsInShards(seed maphash.Seed) (a, b string) {
	a = "cluster-0"
	sa := maphash.String(seed, a) % bucketShardCount
	for i := 1; ; i++ {
		b = fmt.Sprintf("cluster-%d", i)
		if maphash.String(seed, b)%bucketShardCount != sa {
			return a, b
		}
	}
}

func TestShardIndependence(t *testing.T) {
	b, _ := newTestBuckets()
	lim := reqLimits(1, 2)
	a, c := idsInShards(b.seed)
	// State is per cluster.
	drainReq(t, b, a, lim, 5)
	if d := b.CheckRequest(c, lim); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("other cluster = %+v, want its own full bucket", d)
	}
	// A held shard lock does not block a cluster of another shard.
	sa := b.shard(a)
	sa.mu.Lock()
	done := make(chan Decision, 1)
	go func() { done <- b.CheckRequest(c, lim) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		sa.mu.Unlock()
		t.Fatalf("check on another shard blocked by a held lock")
	}
	sa.mu.Unlock()
	// Cluster ids spread over every shard.
	used := map[*bucketShard]bool{}
	for i := 0; i < 1000; i++ {
		used[b.shard(fmt.Sprintf("%08x-0000-4000-8000-000000000000", i))] = true
	}
	if len(used) != bucketShardCount {
		t.Fatalf("1000 ids used %d shards", len(used))
	}
}

func TestBucketsConcurrent(t *testing.T) {
	// rate 0, burst 500: exactly 500 of 8×200 concurrent requests pass, while
	// other clusters, debits, peeks and sweeps run alongside.
	b := NewBuckets(nil)
	hot := reqLimits(0, 500)
	other := reqLimits(1_000_000, 1_000_000)
	other.MaxMsgsPerSec, other.MsgsBurst = 1_000_000, 1_000_000
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if b.CheckRequest("hot", hot).Allowed {
					allowed.Add(1)
				}
			}
		}()
		go func(g int) {
			defer wg.Done()
			id := fmt.Sprintf("other-%d", g%3)
			for i := 0; i < 200; i++ {
				b.CheckRequest(id, other)
				b.CheckMessages(id, other, 3)
				b.DebitDeliveries(id, other, 2)
				b.Peek(id, other)
				if i%50 == 0 {
					b.CollectIdle(time.Hour)
					b.MaybeCollectIdle(time.Hour, time.Millisecond)
					b.Len()
				}
			}
		}(g)
	}
	wg.Wait()
	if got := allowed.Load(); got != 500 {
		t.Fatalf("allowed %d, want exactly 500", got)
	}
}

func TestBucketsRealClock(t *testing.T) {
	b := NewBuckets(nil)
	lim := reqLimits(1, 1)
	if !b.CheckRequest("c", lim).Allowed || b.CheckRequest("c", lim).Allowed {
		t.Fatalf("burst 1 on the real clock")
	}
}

func BenchmarkCheckRequest(b *testing.B) {
	lim := reqLimits(1_000_000_000, 1_000_000_000)
	const hot = "0b4a2f5e-6c1d-4e8a-9f3b-7d2c1a0e5f64"
	b.Run("hot", func(b *testing.B) {
		bk := NewBuckets(nil)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			bk.CheckRequest(hot, lim)
		}
	})
	b.Run("hot-parallel", func(b *testing.B) {
		bk := NewBuckets(nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bk.CheckRequest(hot, lim)
			}
		})
	})
	b.Run("spread-parallel", func(b *testing.B) {
		bk := NewBuckets(nil)
		ids := make([]string, 256)
		for i := range ids {
			ids[i] = fmt.Sprintf("%08x-6c1d-4e8a-9f3b-7d2c1a0e5f64", i)
			bk.CheckRequest(ids[i], lim)
		}
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(97))
			for pb.Next() {
				bk.CheckRequest(ids[i&255], lim)
				i++
			}
		})
	})
	b.Run("refused", func(b *testing.B) {
		bk := NewBuckets(nil)
		zero := reqLimits(0, 0)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			bk.CheckRequest(hot, zero)
		}
	})
}

func BenchmarkCheckMessages(b *testing.B) {
	lim := msgLimits(1_000_000_000, 1_000_000_000)
	bk := NewBuckets(nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		bk.CheckMessages("0b4a2f5e-6c1d-4e8a-9f3b-7d2c1a0e5f64", lim, 100)
	}
}

func BenchmarkPeek(b *testing.B) {
	lim := reqLimits(1000, 1000)
	lim.MaxMsgsPerSec, lim.MsgsBurst = 1000, 1000
	bk := NewBuckets(nil)
	bk.CheckRequest("c", lim)
	bk.CheckMessages("c", lim, 1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		bk.Peek("c", lim)
	}
}

func TestHugeLimitsStayExact(t *testing.T) {
	b, _ := newTestBuckets()
	huge := Cap(1 << 62)
	d := b.CheckRequest("c", reqLimits(huge, Unlimited))
	if !d.Allowed || d.Limit != 2e15 || d.Remaining != 2e15-1 || d.Window != 2 {
		t.Fatalf("huge limits = %+v", d)
	}
}
