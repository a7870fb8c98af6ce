package harden

import (
	"fmt"
	"testing"
	"time"
)

func TestKnownValidCredentials(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := NewFailureGuard(FailureGuardConfig{Rate: 0.001, Burst: 1, Remember: time.Hour, Now: c.now})
	generated := DigestCredential("qk_live_secret", addr("203.0.113.7"), false)
	handMade := DigestCredential("dev-key", addr("203.0.113.7"), true)
	if g.Known(generated) || g.Known(handMade) {
		t.Fatal("known before it authenticated")
	}
	g.Succeed(generated)
	g.Succeed(handMade)
	if !g.Known(generated) || !g.Known(handMade) {
		t.Fatal("not remembered")
	}
	// A generated key's digest is the same from every address; a
	// hand-made key's is its address's own (the /64 for IPv6).
	if DigestCredential("qk_live_secret", addr("198.51.100.1"), false) != generated {
		t.Fatal("a generated key's digest depends on the address")
	}
	if g.Known(DigestCredential("dev-key", addr("198.51.100.1"), true)) {
		t.Fatal("a hand-made key is known from an address it never authenticated from")
	}
	if !g.Known(DigestCredential("dev-key", addr("203.0.113.7"), true)) {
		t.Fatal("the same key from the same address is not recognised")
	}
	v6 := DigestCredential("dev-key", addr("2001:db8:1:2::1"), true)
	if v6 != DigestCredential("dev-key", addr("2001:db8:1:2:ffff::9"), true) || v6 == DigestCredential("dev-key", addr("2001:db8:1:3::1"), true) {
		t.Fatal("a hand-made key's address unit is not the /64")
	}
	if DigestCredential("dev-key", addr("203.0.113.7"), true) == DigestCredential("dev-key", addr("203.0.113.7"), false) {
		t.Fatal("the two kinds of digest collide")
	}
	// Remembered for Remember after the last success, then forgotten.
	c.advance(20 * time.Minute)
	g.Succeed(generated) // less than half the hour since: kept as it was
	c.advance(41 * time.Minute)
	if g.Known(generated) {
		t.Fatal("a success within half the keep renewed the memory (the write it saves was made)")
	}
	g.Succeed(generated)
	c.advance(59 * time.Minute)
	if !g.Known(generated) {
		t.Fatal("forgotten before the keep")
	}
	c.advance(2 * time.Minute)
	if g.Known(generated) || g.Known(handMade) {
		t.Fatal("remembered past the keep")
	}
}

func TestKnownValidIsBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := NewFailureGuard(FailureGuardConfig{MaxTracked: 32, Remember: time.Hour, Now: c.now})
	for i := range 1000 {
		g.Succeed(DigestCredential(fmt.Sprint("key-", i), addr("203.0.113.7"), false))
	}
	n := 0
	for i := range g.valid.shards {
		n += len(g.valid.shards[i].expires)
	}
	if n > 32 {
		t.Fatalf("%d digests kept, cap 32", n)
	}
	// Expired digests make room before live ones.
	c.advance(2 * time.Hour)
	fresh := DigestCredential("fresh", addr("203.0.113.7"), false)
	g.Succeed(fresh)
	if !g.Known(fresh) {
		t.Fatal("a new digest was not kept")
	}
}
