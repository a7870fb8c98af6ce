package harden

import (
	"net/netip"
	"testing"
	"time"
)

type stepClock struct{ t time.Time }

func (c *stepClock) now() time.Time { return c.t }

func TestHostLookupsBoundEachAddressAndTheGateway(t *testing.T) {
	clock := &stepClock{t: time.Unix(1_800_000_000, 0)}
	h := NewHostLookups(HostLookupsConfig{PerAddress: 2, PerAddressBurst: 3, Gateway: 4, GatewayBurst: 5, Now: clock.now})
	a := netip.MustParseAddr("192.0.2.1")
	for i := range 3 {
		if ok, _ := h.Take(a); !ok {
			t.Fatalf("lookup %d of the burst refused", i+1)
		}
	}
	ok, wait := h.Take(a)
	if ok || wait != 1 {
		t.Fatalf("past the address's burst: ok=%v retry after %d, want refused, 1", ok, wait)
	}
	// Another address has its own budget, within the gateway's.
	b := netip.MustParseAddr("192.0.2.2")
	for i := range 2 {
		if ok, _ := h.Take(b); !ok {
			t.Fatalf("second address, lookup %d refused", i+1)
		}
	}
	if ok, _ := h.Take(b); ok {
		t.Fatal("past the gateway's burst of 5, a lookup was admitted")
	}
	// A refusal by the gateway's budget takes nothing from the address's.
	clock.t = clock.t.Add(250 * time.Millisecond) // the gateway earns one back
	if ok, _ := h.Take(b); !ok {
		t.Fatal("the gateway's budget earned a token back, yet the address was refused")
	}
	// A lookup that found a cluster gives its tokens back.
	h.Refund(b)
	if ok, _ := h.Take(b); !ok {
		t.Fatal("a refunded lookup did not give its token back")
	}
	// IPv6 counts per /64.
	c1, c2 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	clock.t = clock.t.Add(10 * time.Second)
	for range 3 {
		h.Take(c1)
	}
	if ok, _ := h.Take(c2); ok {
		t.Fatal("a second address of the same /64 had a budget of its own")
	}
}

func TestHostLookupsTrackBoundedAddresses(t *testing.T) {
	h := NewHostLookups(HostLookupsConfig{MaxTracked: 32, Gateway: 1e9, GatewayBurst: 1 << 30})
	for i := range 1000 {
		h.Take(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	if n := h.Tracked(); n > 32 {
		t.Fatalf("tracked %d addresses, want at most 32", n)
	}
}
