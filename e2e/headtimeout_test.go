package e2e

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/queengate/queengate/caddymodule"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestTricklingHeadIsCutAtTheHeaderTimeout: a connection that sends its
// request head a byte a second, never finishing it, is closed by the
// gateway's default read_header timeout, not held for Caddy's minute.
func TestTricklingHeadIsCutAtTheHeaderTimeout(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, dbURL, "", ""))
	waitServing(t, port)

	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /api/v1/resources/queues HTTP/1.1\r\nHost: acme.eu1.example.test\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // returns when the gateway closes the connection
		closed <- time.Since(start)
	}()
	limit := caddymodule.DefaultHeaderReadTimeout + 15*time.Second
	for deadline := time.After(limit); ; {
		select {
		case held := <-closed:
			t.Logf("a head trickled a byte a second was cut after %v (read_header default %v)", held.Round(time.Millisecond), caddymodule.DefaultHeaderReadTimeout)
			if held < caddymodule.DefaultHeaderReadTimeout-time.Second {
				t.Fatalf("cut after %v, before the header timeout", held)
			}
			return
		case <-deadline:
			t.Fatalf("the connection was still open after %v of a trickled head", limit)
		case <-time.After(time.Second):
			_, _ = conn.Write([]byte("x"))
		}
	}
}
