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

// TestUnauthenticatedConnectionsAreCappedPerAddress: one address may hold
// only preauth_conns connections on which nothing authenticated for more
// than the grace; more are closed as they are accepted, while a connection
// that authenticated goes on being served and no longer counts.
func TestUnauthenticatedConnectionsAreCappedPerAddress(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
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
	refused := 0
	for range 5 {
		if closedByServer(dial(), 2*time.Second) {
			refused++
		}
	}
	t.Logf("with 8 connections open that have not authenticated, %d of 5 more from the same address were closed at once", refused)
	if refused != 5 {
		t.Fatalf("%d of 5 connections past the cap were closed, want 5", refused)
	}
	// The authenticated connection is served on.
	if r := do(t, keeper, "GET", url, key, ""); r.status != http.StatusOK {
		t.Fatalf("the authenticated connection: %d %s", r.status, r.body)
	}
	// Closing idle connections makes room again.
	for _, c := range idle[:3] {
		c.Close()
	}
	eventually(t, 5*time.Second, func() error {
		if closedByServer(dial(), 300*time.Millisecond) {
			return fmt.Errorf("a connection after three closed was still refused")
		}
		return nil
	})
}
