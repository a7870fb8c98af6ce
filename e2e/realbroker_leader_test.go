//go:build realbroker

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/realbroker"
	"github.com/queengate/queengate/meter"
)

// loopbackClient dials 127.0.0.1 on the port of each request's URL,
// whatever its host, so that cluster hostnames need no DNS.
func loopbackClient() *http.Client {
	d := &net.Dialer{Timeout: time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
	}}
}

// TestRealBrokerLeaderGroupSIGKILL: two gateway processes of one leader
// group in front of the real broker, under steady push load sent to both
// (the standby refuses until it leads). The leader is SIGKILLed, the
// standby takes over, the killed one is started again on its spool (it
// replays its journal) and both stop cleanly. usage_minutes then books what
// the broker stored, less at most what docs/metering.md says a crash may
// lose: the successful pushes of the last meter.DefaultCheckpointEvery (plus
// one journal write) of the leader's running time before the kill, and
// those in flight at it; never more than the broker stored.
func TestRealBrokerLeaderGroupSIGKILL(t *testing.T) {
	started := time.Now()
	caddyBinary(t) // built once per run; first, so that the timings below are the test's own
	t.Logf("gateway binary ready after %v", time.Since(started).Round(time.Millisecond))
	broker := realbroker.Start(t)
	dbURL := pgtest.NewDatabase(t)
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("lg-real"), "lg-real", cp.cell("lg-real-cell", broker.URL, ""))
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, $2::jsonb)`, cl.id, unlimited)
	_, key := cp.key(cl.id)

	homeA := t.TempDir()
	portA, portB := freePort(t), freePort(t)
	a := startGroupGatewayIn(t, "gw-a", portA, dbURL, homeA)
	a.awaitReady(http.StatusOK)
	b := startGroupGateway(t, "gw-b", portB, dbURL)
	eventually(t, 30*time.Second, func() error {
		if status, body := b.ready(); status != http.StatusServiceUnavailable || !strings.Contains(body, "leader: gw-a") {
			return fmt.Errorf("standby /readyz %d %s", status, body)
		}
		return nil
	})

	url := func(port int) string { return fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", cl.slug, port) }
	load := startPushLoad(loopbackClient(), []string{url(portA), url(portB)}, []string{key}, 4, 10*time.Millisecond)
	time.Sleep(3*time.Second + time.Duration(time.Now().UnixNano()%int64(time.Second))) // any phase of the journal tick
	kill := time.Now()
	a.signal(syscall.SIGKILL)
	<-a.done
	window := meter.DefaultCheckpointEvery + checkpointWriteAllowance
	stalled, inWindow, inFlight := load.exposure(kill, window)
	storedAtKill := broker.CountMessages(t, "crash")
	spool := filepath.Join(homeA, "spool")
	if left, _ := filepath.Glob(filepath.Join(spool, "meter-*.journal")); len(left) == 0 {
		t.Fatalf("the killed leader left no journal in %s (it flushes every 15 s, so it holds what was counted)", spool)
	}

	b.awaitReady(http.StatusOK)
	t.Logf("the standby leads %v after the kill", time.Since(kill).Round(time.Millisecond))
	time.Sleep(time.Second)
	load.halt()
	// The killed leader comes back on its spool and replays its journal
	// (as a standby: gw-b leads now); then both stop cleanly.
	again := startGroupGatewayIn(t, "gw-a", portA, dbURL, homeA)
	again.awaitReady(http.StatusServiceUnavailable)
	eventually(t, 30*time.Second, func() error { // replayed once it has reached the database
		if left, _ := filepath.Glob(filepath.Join(spool, "meter-*")); len(left) != 0 {
			return fmt.Errorf("the killed leader's spool still holds %v", left)
		}
		return nil
	})
	for _, g := range []*groupGateway{again, b} {
		g.signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("gateway %s did not stop within 30 s of SIGTERM", g.name)
		}
	}

	stored := int64(broker.CountMessages(t, "crash"))
	_, booked := cp.usageOf(cl.id, "push")
	loss := stored - booked
	t.Logf("SIGKILL of the leader; the broker stored %d (%d at the kill); usage_minutes books %d: lost %d; "+
		"bound %d (%d successful pushes in the last %v of running time, %v of stall added, + %d in flight)",
		stored, storedAtKill, booked, loss, inWindow+inFlight, inWindow, window, stalled.Round(time.Millisecond), inFlight)
	if stored == 0 || int64(storedAtKill) == stored {
		t.Fatalf("the load did not reach the broker through both gateways (%d stored, %d at the kill)", stored, storedAtKill)
	}
	if loss < 0 {
		t.Fatalf("usage_minutes books %d push messages, more than the %d the broker stored", booked, stored)
	}
	if loss > inWindow+inFlight {
		t.Fatalf("the SIGKILL lost %d push messages, more than the documented bound of %d", loss, inWindow+inFlight)
	}
}
