package harden

import (
	"net/netip"
	"testing"
)

func TestOutboundAllowed(t *testing.T) {
	for _, c := range []struct {
		addr     string
		loopback bool
		ok       bool
	}{
		{"203.0.113.7", false, true},
		{"10.1.2.3", false, true},
		{"2001:db8::1", false, true},
		{"169.254.169.254", true, false},
		{"fe80::1", true, false},
		{"::ffff:169.254.169.254", true, false},
		{"0.0.0.0", true, false},
		{"::", true, false},
		{"224.0.0.1", true, false},
		{"255.255.255.255", true, false},
		{"127.0.0.1", false, false},
		{"::1", false, false},
		{"::ffff:127.0.0.1", false, false},
		{"127.0.0.1", true, true},
	} {
		err := OutboundAllowed(netip.MustParseAddr(c.addr), c.loopback)
		if (err == nil) != c.ok {
			t.Errorf("OutboundAllowed(%s, loopback %v) = %v, want allowed %v", c.addr, c.loopback, err, c.ok)
		}
	}
}
