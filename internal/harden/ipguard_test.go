package harden

import (
	"net/netip"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func addr(s string) netip.Addr           { return netip.MustParseAddr(s) }
func mustAllow(t *testing.T, g *FailureGuard, a string) {
	t.Helper()
	if ok, _ := g.Allow(addr(a)); !ok {
		t.Fatalf("%s refused", a)
	}
}

func TestFailureGuardBurstThenRefill(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := NewFailureGuard(FailureGuardConfig{Rate: 0.5, Burst: 3, Now: c.now})
	for range 3 {
		mustAllow(t, g, "203.0.113.7")
		g.Fail(addr("203.0.113.7"))
	}
	ok, retry := g.Allow(addr("203.0.113.7"))
	if ok || retry != 2 {
		t.Fatalf("after the burst: ok=%v retry=%d, want refused with Retry-After 2 (1 token at 0.5/s)", ok, retry)
	}
	mustAllow(t, g, "203.0.113.8") // other addresses are untouched
	c.advance(1999 * time.Millisecond)
	if ok, retry := g.Allow(addr("203.0.113.7")); ok || retry != 1 {
		t.Fatalf("just before a token: ok=%v retry=%d", ok, retry)
	}
	c.advance(time.Millisecond)
	mustAllow(t, g, "203.0.113.7")
	g.Fail(addr("203.0.113.7"))
	if ok, _ := g.Allow(addr("203.0.113.7")); ok {
		t.Fatal("the earned-back token was not spent")
	}
	c.advance(time.Hour)
	for range 3 {
		mustAllow(t, g, "203.0.113.7")
		g.Fail(addr("203.0.113.7"))
	}
	if ok, _ := g.Allow(addr("203.0.113.7")); ok {
		t.Fatal("refill exceeded the burst")
	}
}

func TestFailureGuardKeysIPv6By64AndUnmaps(t *testing.T) {
	g := NewFailureGuard(FailureGuardConfig{Rate: 0.001, Burst: 1})
	g.Fail(addr("2001:db8:1:2::1"))
	if ok, _ := g.Allow(addr("2001:db8:1:2:ffff::9")); ok {
		t.Fatal("another address of the same /64 was not counted together")
	}
	mustAllow(t, g, "2001:db8:1:3::1")
	g.Fail(addr("::ffff:192.0.2.1"))
	if ok, _ := g.Allow(addr("192.0.2.1")); ok {
		t.Fatal("an IPv4-mapped address was counted apart from its IPv4 form")
	}
	if ok, _ := g.Allow(netip.Addr{}); !ok {
		t.Fatal("a request without a peer address was refused")
	}
	g.Fail(netip.Addr{}) // must not panic or track
	if n := g.Tracked(); n != 2 {
		t.Fatalf("tracked = %d, want 2", n)
	}
}

func TestFailureGuardStaysBounded(t *testing.T) {
	g := NewFailureGuard(FailureGuardConfig{Rate: 0.001, Burst: 5, MaxTracked: 160})
	for i := range 5000 {
		g.Fail(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	if n := g.Tracked(); n > 160 {
		t.Fatalf("tracked %d addresses, cap 160", n)
	}
}

func BenchmarkFailureGuardAllow(b *testing.B) {
	g := NewFailureGuard(FailureGuardConfig{})
	a := addr("198.51.100.20")
	g.Fail(a)
	b.ReportAllocs()
	for b.Loop() {
		g.Allow(a)
	}
}

// While no address has failed within a token's refill time, Allow answers
// without touching the shards (every shard is held locked here).
func TestFailureGuardAllowSkipsTheShardsWhenNothingFailedLately(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := NewFailureGuard(FailureGuardConfig{Rate: 1, Burst: 1, Now: c.now})
	answersWithoutShards := func() bool {
		for i := range g.shards {
			g.shards[i].mu.Lock()
		}
		done := make(chan bool, 1)
		go func() { ok, _ := g.Allow(addr("203.0.113.9")); done <- ok }()
		answered := false
		select {
		case <-done:
			answered = true
		case <-time.After(100 * time.Millisecond): // it waits for a shard
		}
		for i := range g.shards {
			g.shards[i].mu.Unlock()
		}
		if !answered {
			<-done
		}
		return answered
	}
	if !answersWithoutShards() {
		t.Fatal("no failure yet, but Allow went to the shards")
	}
	g.Fail(addr("198.51.100.1"))
	if answersWithoutShards() {
		t.Fatal("a failure just now, but Allow answered without looking")
	}
	c.advance(time.Second)
	if !answersWithoutShards() {
		t.Fatal("a token's refill time after the last failure, Allow still went to the shards")
	}
}
