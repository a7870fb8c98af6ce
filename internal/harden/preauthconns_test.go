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

// closed reports whether the server end h was closed by the counter.
func closed(h *PreauthConn) bool { return h.raw.Control(func(uintptr) {}) != nil }

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
	var h []*PreauthConn
	admit := func(c net.Conn) {
		t.Helper()
		pc := p.Admit(c)
		if pc == nil {
			t.Fatal("a TCP connection was not counted")
		}
		h = append(h, pc)
		clock = clock.Add(time.Millisecond)
	}
	for _, c := range conns[:4] {
		admit(c)
	}
	// Within the grace, a crowd reconnecting at once is not cut.
	for i := range 4 {
		if closed(h[i]) {
			t.Fatalf("connection %d was closed within the grace", i+1)
		}
	}
	clock = clock.Add(PreauthGrace)
	// Past the grace, a new connection makes room: the two oldest go, so
	// that with it the address holds the cap.
	admit(conns[4])
	if !closed(h[0]) || !closed(h[1]) || closed(h[2]) || closed(h[3]) || closed(h[4]) {
		t.Fatalf("closed: %v %v %v %v %v; want the two oldest only", closed(h[0]), closed(h[1]), closed(h[2]), closed(h[3]), closed(h[4]))
	}
	if n := p.Open(); n != 3 {
		t.Fatalf("open %d, want the cap 3", n)
	}
	// A connection that authenticated no longer counts, and is never
	// closed by the counter.
	h[2].Authenticated()
	h[2].Authenticated()
	clock = clock.Add(PreauthGrace)
	admit(conns[5])
	if closed(h[2]) || closed(h[3]) {
		t.Fatal("a connection was closed though the address held less than the cap")
	}
	// A connection closed by the server is forgotten, and makes room.
	conns[3].Close()
	clock = clock.Add(PreauthGrace)
	admit(conns[6])
	if closed(h[4]) || closed(h[5]) {
		t.Fatal("a live connection was closed though a closed one made room")
	}
	if n := p.Open(); n != 3 {
		t.Fatalf("open %d, want 3", n)
	}
}
