package harden

import (
	"net"
	"testing"
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
	conns := dialPair(t, ln, 5)
	var handles []*PreauthConn
	for i, c := range conns[:3] {
		h, ok := p.Admit(c)
		if !ok || h == nil {
			t.Fatalf("connection %d of the cap refused", i+1)
		}
		handles = append(handles, h)
	}
	if _, ok := p.Admit(conns[3]); ok {
		t.Fatal("a fourth connection from the address was admitted")
	}
	// A connection that authenticated no longer counts.
	handles[0].Authenticated()
	handles[0].Authenticated()
	if _, ok := p.Admit(conns[3]); !ok {
		t.Fatal("an authenticated connection still counted")
	}
	// A closed one is noticed when the address reaches the cap.
	conns[1].Close()
	if _, ok := p.Admit(conns[4]); !ok {
		t.Fatal("a closed connection still counted")
	}
	if n := p.Open(); n != 3 {
		t.Fatalf("open %d, want 3", n)
	}
}
