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
