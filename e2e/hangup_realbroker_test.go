//go:build realbroker

package e2e

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/realbroker"
)

// TestHangUpBilledAsTheRealBrokerStored, against the real broker 0.15.1: five pushes of 1,000 items through the gateway,
// each client closing its connection (with a reset) 2 to 50 ms after it
// sent the request. Whatever the broker committed, usage_minutes bills the
// same, as its queen.messages shows, and the monthly quota counts it.
func TestHangUpBilledAsTheRealBrokerStored(t *testing.T) {
	g := startMeteredRealGateway(t, "hangup-real", "10s")
	broker, cp, cl, key, port, host := g.broker, g.cp, g.cl, g.key, g.port, g.host

	const queue = "hangup-orders"
	// One push that waits for its answer: the route works end to end.
	if r := do(t, client(port), "POST", "http://"+host+"/api/v1/push", key, hangupPushBody(queue, 1000)); acceptedItems(r) != 1000 {
		t.Fatalf("a push that waits: %d %.300s", r.status, r.body)
	}
	for i, after := range []time.Duration{2, 10, 20, 35, 50} {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		head, body := h1Request(host, "/api/v1/push", key, hangupPushBody(queue, 1000))
		if _, err := conn.Write([]byte(head + body)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		time.Sleep(after * time.Millisecond)
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	}
	// The gateway finishes each exchange without its client: wait until
	// the broker's count stops moving.
	var stored int
	last := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		stored = broker.CountMessages(t, queue)
		if stored == last {
			break
		}
		last = stored
	}
	if stored <= 1000 {
		t.Fatalf("the broker stored %d messages: no push that hung up reached it, the test shows nothing", stored)
	}
	time.Sleep(time.Second)
	g.stop(t)
	_, msgs, unanswered := cp.usageDetail(cl.id, "push")
	t.Logf("the broker stored %d messages; usage_minutes bills %d (%d unanswered)", stored, msgs, unanswered)
	if msgs != int64(stored) {
		t.Fatalf("usage_minutes bills %d messages, the broker stored %d", msgs, stored)
	}
	month := time.Now().UTC().Format("2006-01") + "-01"
	if q := cp.scalar(`SELECT queen_proxy.cluster_month_billable_msgs($1::uuid, $2::date)::text`, cl.id, month); q != fmt.Sprint(stored) {
		t.Fatalf("the monthly quota counts %s messages, the broker stored %d", q, stored)
	}
}

// meteredRealGateway is an in-process gateway metering one cluster (no
// message rate limit) on a cell of the real broker, flushing every second.
type meteredRealGateway struct {
	broker  *realbroker.Broker
	cp      *controlPlane
	cl      cluster
	key     string
	port    int
	host    string
	stopped bool
}

func startMeteredRealGateway(t *testing.T, name, upstreamTimeout string) *meteredRealGateway {
	t.Helper()
	g := &meteredRealGateway{broker: realbroker.Start(t)}
	dbURL := pgtest.NewDatabase(t)
	g.cp = newControlPlane(t, dbURL)
	cell := g.cp.cell(name, g.broker.URL, "")
	g.cl = g.cp.cluster(g.cp.tenant(name), name, cell)
	g.cp.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"max_msgs_per_sec": null, "msgs_burst": null}'
		WHERE id = $1::uuid`, g.cl.id)
	_, g.key = g.cp.key(g.cl.id)

	g.port = freePort(t)
	cfg := gatewayCaddyfile(g.port, dbURL, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), "upstream_timeout "+upstreamTimeout)
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !g.stopped {
			_ = caddy.Stop()
		}
	})
	// The gateway serves the cell once it has judged its isolation (one
	// cluster: served either way).
	g.host = fmt.Sprintf("%s.eu1.example.test:%d", g.cl.slug, g.port)
	eventually(t, 30*time.Second, func() error {
		r := do(t, client(g.port), "GET", "http://"+g.host+"/api/v1/resources/queues", g.key, "")
		if r.status != 200 {
			return fmt.Errorf("queues: %d %s", r.status, r.body)
		}
		return nil
	})
	return g
}

// stop stops the gateway, which drains its open minute.
func (g *meteredRealGateway) stop(t *testing.T) {
	t.Helper()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	g.stopped = true
}
