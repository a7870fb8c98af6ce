//go:build realbroker

package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/caddymodule"
	"github.com/queengate/queengate/internal/realbroker"
)

// TestRealBrokerKeepAliveIdleTimeout measures how long the real broker
// 0.15.1 keeps an idle keep-alive connection open after an answer, and
// checks that the gateway gives up its idle connections to a cell before
// (docs/configuration.md, "Connections to cells"): a request sent on a
// connection the broker is closing fails before it is read.
func TestRealBrokerKeepAliveIdleTimeout(t *testing.T) {
	broker := realbroker.Start(t)
	addr := strings.TrimPrefix(broker.URL, "http://")
	var measured []time.Duration
	for range 2 {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: cell\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatalf("the broker answered Connection: close; no keep-alive to measure")
		}
		idle := time.Now()
		_ = conn.SetReadDeadline(idle.Add(5 * time.Minute))
		_, err = rd.ReadByte()
		held := time.Since(idle)
		conn.Close()
		if err == nil {
			t.Fatal("the broker sent bytes on an idle connection")
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the broker kept an idle connection open for 5 minutes")
		}
		measured = append(measured, held)
	}
	shortest := min(measured[0], measured[1])
	t.Logf("the real broker closes an idle keep-alive connection after %v (measured %v)", shortest.Round(100*time.Millisecond), measured)
	if caddymodule.CellIdleTimeout >= shortest {
		t.Fatalf("the gateway keeps idle connections to cells for %v, not less than the broker's %v", caddymodule.CellIdleTimeout, shortest)
	}
}
