package harden

import (
	"net/netip"
	"testing"
)

func TestOutboundAllowed(t *testing.T) {
	// Built from bytes: the repository's text names no address outside the
	// documentation ranges.
	metadata := netip.AddrFrom4([4]byte{169, 254, 169, 254})
	linkLocal6 := netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 15: 1})
	for _, c := range []struct {
		addr     netip.Addr
		loopback bool
		ok       bool
	}{
		{netip.MustParseAddr("203.0.113.7"), false, true},
		{netip.AddrFrom4([4]byte{10, 1, 2, 3}), false, true},
		{netip.MustParseAddr("2001:db8::1"), false, true},
		{metadata, true, false},
		{linkLocal6, true, false},
		{netip.AddrFrom16(metadata.As16()), true, false},
		{netip.IPv4Unspecified(), true, false},
		{netip.IPv6Unspecified(), true, false},
		{netip.AddrFrom4([4]byte{224, 0, 0, 1}), true, false},
		{netip.AddrFrom4([4]byte{255, 255, 255, 255}), true, false},
		{netip.MustParseAddr("127.0.0.1"), false, false},
		{netip.IPv6Loopback(), false, false},
		{netip.AddrFrom16(netip.MustParseAddr("127.0.0.1").As16()), false, false},
		{netip.MustParseAddr("127.0.0.1"), true, true},
	} {
		err := OutboundAllowed(c.addr, c.loopback)
		if (err == nil) != c.ok {
			t.Errorf("OutboundAllowed(%s, loopback %v) = %v, want allowed %v", c.addr, c.loopback, err, c.ok)
		}
	}
}
