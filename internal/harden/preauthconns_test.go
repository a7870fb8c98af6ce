package harden

import (
	"net"
	"testing"
	"time"
)

// dialPair opens n loopback connections and returns the server ends.
func dialPair(t *testing.T, ln net.Listener, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

func TestPreauthConnsCapPerAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := NewPreauthConns(3)
	clock := time.Unix(1_800_000_000, 0)
	p.now = func() time.Time { return clock }
	conns := dialPair(t, ln, 8)
	var handles []*PreauthConn
	for i, c := range conns[:3] {
		h, ok := p.Admit(c)
		if !ok || h == nil {
			t.Fatalf("connection %d of the cap refused", i+1)
		}
		handles = append(handles, h)
		clock = clock.Add(time.Millisecond)
	}
	// Within the grace, a crowd reconnecting at once is not cut.
	if _, ok := p.Admit(conns[3]); !ok {
		t.Fatal("a connection was refused while the others were within the grace")
	}
	clock = clock.Add(PreauthGrace)
	// Past the grace, the four hold more than the cap: the oldest past it
	// (the first) is closed, and a new one is refused.
	if _, ok := p.Admit(conns[4]); ok {
		t.Fatal("a connection past the cap was admitted")
	}
	if n := p.Open(); n != 3 {
		t.Fatalf("open %d, want the cap 3 after the oldest was closed", n)
	}
	if handles[0].raw.Control(func(uintptr) {}) == nil {
		t.Fatal("the oldest connection was not closed")
	}
	// A connection that authenticated no longer counts.
	handles[1].Authenticated()
	handles[1].Authenticated()
	if _, ok := p.Admit(conns[5]); !ok {
		t.Fatal("an authenticated connection still counted")
	}
	clock = clock.Add(PreauthGrace)
	// A closed one is noticed when the address reaches the cap.
	conns[2].Close()
	if _, ok := p.Admit(conns[6]); !ok {
		t.Fatal("a closed connection still counted")
	}
	if n := p.Open(); n != 3 {
		t.Fatalf("open %d, want 3", n)
	}
}
