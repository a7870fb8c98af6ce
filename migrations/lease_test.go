package migrations

import (
	"context"
	"testing"
	"time"
)

// TestGatewayLease holds the lease functions to their contract: the first
// caller takes the lease, another cannot while it lives, the holder renews
// it, a released or expired lease goes to the next caller with a new epoch,
// and a caller that may not take only renews.
func TestGatewayLease(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	group := uniq("grp")
	type lease struct {
		holder string
		epoch  int64
		taken  bool
	}
	acquire := func(holder string, ttlMs int, mayTake bool) lease {
		t.Helper()
		var l lease
		var exp time.Time
		if err := pool.QueryRow(ctx, `SELECT holder, epoch, expires_at, taken_over FROM queen_proxy.acquire_gateway_lease($1, $2, $3, $4)`,
			group, holder, ttlMs, mayTake).Scan(&l.holder, &l.epoch, &exp, &l.taken); err != nil {
			t.Fatalf("acquire %s: %v", holder, err)
		}
		return l
	}
	if l := acquire("a", 5000, false); l.holder != "" && l.holder != "a" {
		t.Fatalf("a caller that may not take got %+v", l)
	}
	if l := acquire("a", 5000, true); l != (lease{"a", 1, true}) {
		t.Fatalf("first acquire: %+v", l)
	}
	if l := acquire("b", 5000, true); l != (lease{"a", 1, false}) {
		t.Fatalf("b took a live lease: %+v", l)
	}
	if l := acquire("a", 200, true); l != (lease{"a", 1, false}) {
		t.Fatalf("renewal: %+v", l)
	}
	time.Sleep(300 * time.Millisecond)
	if l := acquire("b", 5000, false); l.holder != "a" {
		t.Fatalf("b renewed a lease it does not hold: %+v", l)
	}
	if l := acquire("b", 5000, true); l != (lease{"b", 2, true}) {
		t.Fatalf("takeover of an expired lease: %+v", l)
	}
	var released bool
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.release_gateway_lease($1, 'a')`, group).Scan(&released); err != nil || released {
		t.Fatalf("a released a lease it does not hold: %v %v", released, err)
	}
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.release_gateway_lease($1, 'b')`, group).Scan(&released); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	if l := acquire("a", 5000, true); l != (lease{"a", 3, true}) {
		t.Fatalf("acquire after release: %+v", l)
	}
	if _, err := pool.Exec(ctx, `SELECT * FROM queen_proxy.acquire_gateway_lease($1, 'a', 10)`, group); err == nil {
		t.Fatal("a ttl under 100 ms was accepted")
	}
}

// TestGatewayLeaseAttempt holds gateway_lease_attempt to its contract: a
// renewal never takes, a take needs an expired lease at the epoch the
// caller saw, the holder's peer address follows the holder, and the
// functions of 015 clear it when they change the holder or release.
func TestGatewayLeaseAttempt(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	group := uniq("grp")
	type lease struct {
		holder, peer   string
		epoch          int64
		expired, taken bool
	}
	attempt := func(holder string, ttlMs int, peer string, take *int64) lease {
		t.Helper()
		var l lease
		if err := pool.QueryRow(ctx, `SELECT holder, epoch, holder_peer_url, expired, taken_over
			FROM queen_proxy.gateway_lease_attempt($1, $2, $3, $4, $5)`, group, holder, ttlMs, peer, take).
			Scan(&l.holder, &l.epoch, &l.peer, &l.expired, &l.taken); err != nil {
			t.Fatalf("attempt %s: %v", holder, err)
		}
		return l
	}
	epoch := func(n int64) *int64 { return &n }
	if l := attempt("a", 5000, "http://a", nil); l != (lease{"", "", 0, true, false}) {
		t.Fatalf("a renewal took a lease that does not exist: %+v", l)
	}
	if l := attempt("a", 5000, "http://a", epoch(1)); l.holder != "" {
		t.Fatalf("a take at the wrong epoch created the lease: %+v", l)
	}
	if l := attempt("a", 200, "http://a", epoch(0)); l != (lease{"a", "http://a", 1, false, true}) {
		t.Fatalf("first take: %+v", l)
	}
	if l := attempt("b", 5000, "http://b", epoch(1)); l != (lease{"a", "http://a", 1, false, false}) {
		t.Fatalf("b took a live lease: %+v", l)
	}
	time.Sleep(300 * time.Millisecond)
	if l := attempt("b", 5000, "http://b", nil); l != (lease{"a", "http://a", 1, true, false}) {
		t.Fatalf("b's renewal of a's expired lease: %+v", l)
	}
	if l := attempt("b", 5000, "http://b", epoch(0)); l.holder != "a" {
		t.Fatalf("b took at an epoch it did not see: %+v", l)
	}
	// The holder renews an expired lease nobody took, keeping its epoch.
	if l := attempt("a", 200, "http://a2", nil); l != (lease{"a", "http://a2", 1, false, false}) {
		t.Fatalf("a's renewal of its expired lease: %+v", l)
	}
	time.Sleep(300 * time.Millisecond)
	if l := attempt("b", 5000, "http://b", epoch(1)); l != (lease{"b", "http://b", 2, false, true}) {
		t.Fatalf("b's takeover: %+v", l)
	}
	if l := attempt("a", 5000, "http://a", nil); l != (lease{"b", "http://b", 2, false, false}) {
		t.Fatalf("a renewed b's lease: %+v", l)
	}
	var released bool
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.release_gateway_lease($1, 'b')`, group).Scan(&released); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	if l := attempt("a", 5000, "http://a", nil); l != (lease{"b", "", 2, true, false}) {
		t.Fatalf("a released lease keeps its peer address: %+v", l)
	}
	// A gateway of the previous release takes over through the function of
	// 015: the previous holder's address goes with it.
	var holder string
	if err := pool.QueryRow(ctx, `SELECT holder FROM queen_proxy.acquire_gateway_lease($1, 'c', 5000, true)`, group).Scan(&holder); err != nil || holder != "c" {
		t.Fatalf("old acquire: %q %v", holder, err)
	}
	if l := attempt("a", 5000, "http://a", nil); l != (lease{"c", "", 3, false, false}) {
		t.Fatalf("after an old gateway's takeover: %+v", l)
	}
	if _, err := pool.Exec(ctx, `SELECT * FROM queen_proxy.gateway_lease_attempt($1, 'a', 10, '', NULL)`, group); err == nil {
		t.Fatal("a ttl under 100 ms was accepted")
	}
}
