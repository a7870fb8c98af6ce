package e2e

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/internal/pgtest"
)

// closedByServer reports whether the server closed c within d (a read
// returns, with EOF or a reset, rather than timing out).
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestUnauthenticatedConnectionsAreCappedPerAddress: one address holds at
// most preauth_conns connections on which nothing authenticated for more
// than the grace; a new one makes room by closing the oldest of them,
// while a connection that authenticated goes on being served and never
// counts.
func TestUnauthenticatedConnectionsAreCappedPerAddress(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "conn-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("conns"), "conns", cp.cell("conn-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, dbURL, "", "preauth_conns 8"))
	waitServing(t, port)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url := fmt.Sprintf("http://conns.eu1.example.test:%d/api/v1/resources/queues", port)

	// One client authenticates first, on a connection it keeps.
	keeper := client(port)
	if r := do(t, keeper, "GET", url, key, ""); r.status != http.StatusOK {
		t.Fatalf("authenticated request %d %s", r.status, r.body)
	}
	var idle []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 8 {
		idle = append(idle, dial())
	}
	for i, c := range idle {
		if closedByServer(c, 200*time.Millisecond) {
			t.Fatalf("connection %d of the cap was closed", i+1)
		}
	}
	// They count once they have been open a grace without authenticating.
	time.Sleep(harden.PreauthGrace + 300*time.Millisecond)
	var fresh []net.Conn
	for range 5 {
		fresh = append(fresh, dial())
	}
	// Once the new ones are past the grace too, the next connection makes
	// the address hold the cap: the oldest go.
	time.Sleep(harden.PreauthGrace + 300*time.Millisecond)
	fresh = append(fresh, dial())
	time.Sleep(200 * time.Millisecond)
	var open []int
	for i, c := range append(idle, fresh...) {
		if !closedByServer(c, 100*time.Millisecond) {
			open = append(open, i)
		}
	}
	t.Logf("8 connections that have not authenticated, then 6 more from the same address: open now %v (0-7 the first)", open)
	if len(open) != 8 || open[0] != 6 {
		t.Fatalf("open %v, want the 8 newest, 6 to 13", open)
	}
	// The authenticated connection is served on.
	if r := do(t, keeper, "GET", url, key, ""); r.status != http.StatusOK {
		t.Fatalf("the authenticated connection: %d %s", r.status, r.body)
	}
}
