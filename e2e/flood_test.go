package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// randomLabel is a fresh cluster-shaped label that names no cluster.
func randomLabel() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "x" + hex.EncodeToString(b)
}

// committedTransactions is the database's committed transactions so far,
// as the statistics collector counts them (it lags a moment behind).
func committedTransactions(cp *controlPlane) int64 {
	v, err := strconv.ParseInt(cp.scalar(`SELECT xact_commit::text FROM pg_stat_database WHERE datname = current_database()`), 10, 64)
	if err != nil {
		cp.t.Fatal(err)
	}
	return v
}

// TestFloodOfUnknownHostsKeepsTheLeader floods the leader of a two-member
// group with requests and TLS handshakes for random cluster-shaped names,
// and checks that the leader keeps its lease (no lapse, no hand-over, no
// serving on grants), that the cluster it serves is served throughout, and
// that the database's transactions stay bounded whatever the flood's size.
func TestFloodOfUnknownHostsKeepsTheLeader(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "flood-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("ha"), "ha", cp.cell("flood-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)

	member := func(name string) (*groupGateway, int) {
		home := t.TempDir()
		httpsPort := freePort(t)
		globals := fmt.Sprintf("\thttps_port %d\n\tskip_install_trust\n\tstorage file_system %s\n\ton_demand_tls {\n\t\tpermission queen\n\t}",
			httpsPort, filepath.Join(home, "storage"))
		sites := "https:// {\n\ttls internal {\n\t\ton_demand\n\t}\n\tqueen_gateway\n}\n"
		return startGroupGatewayGlobals(t, name, freePort(t), dbURL, home, globals, "", sites), httpsPort
	}
	a, aTLS := member("gw-a")
	a.awaitReady(http.StatusOK)
	b, _ := member("gw-b")
	b.awaitReady(http.StatusServiceUnavailable)

	// A refused name answers the same whether the cache remembered it or
	// the budget held its lookup back: no cluster answers.
	r := do(t, client(a.port), "GET", fmt.Sprintf("http://%s.eu1.example.test/api/v1/resources/queues", randomLabel()), key, "")
	assertRefusal(t, r, http.StatusMisdirectedRequest, "cluster_unknown")

	// The served cluster's requests and the leader's readiness, all along.
	var served, servedFailed atomic.Int64
	var notReady atomic.Value
	watch := newLoadRun()
	go func() {
		defer close(watch.stopped)
		c := client(a.port)
		c.Timeout = 2 * time.Second
		for {
			select {
			case <-watch.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if status, body := a.ready(); status != http.StatusOK || strings.Contains(body, "grants") {
				notReady.CompareAndSwap(nil, fmt.Sprintf("/readyz %d %s", status, body))
			}
			req, _ := http.NewRequest("GET", "http://ha.eu1.example.test/api/v1/resources/queues", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				servedFailed.Add(1)
			} else {
				served.Add(1)
			}
			if resp != nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(watch.halt)

	// The database's own pace without a flood: the lease, the standby's
	// polls, the gateways' background work.
	time.Sleep(2 * time.Second)
	idleFrom, idleAt := committedTransactions(cp), time.Now()
	time.Sleep(3 * time.Second)
	idle := committedTransactions(cp) - idleFrom
	idleRate := float64(idle) / time.Since(idleAt).Seconds()

	const floodFor = 8 * time.Second
	const maxEach = 40000 // requests and handshakes each, at most
	var requests, handshakes, refused421, refused429, other atomic.Int64
	before := committedTransactions(cp)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			c := client(a.port)
			c.Timeout = 5 * time.Second
			for ctx.Err() == nil && requests.Add(1) <= maxEach {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+randomLabel()+".eu1.example.test/api/v1/resources/queues", nil)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				switch resp.StatusCode {
				case http.StatusMisdirectedRequest:
					refused421.Add(1)
				case http.StatusTooManyRequests:
					refused429.Add(1)
				default:
					other.Add(1)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
				Config: &tls.Config{InsecureSkipVerify: true}}
			for ctx.Err() == nil && handshakes.Add(1) <= maxEach {
				d.Config.ServerName = randomLabel() + ".eu1.example.test"
				conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", aTLS))
				if err == nil {
					conn.Close()
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	flooded := time.Since(start)
	// The statistics collector reports a backend's transactions within a
	// second of them.
	time.Sleep(1500 * time.Millisecond)
	during := committedTransactions(cp) - before
	watch.halt()

	nRequests, nHandshakes := min(requests.Load(), maxEach), min(handshakes.Load(), maxEach)
	budget := int64(idleRate*(flooded.Seconds()+1.5)) + 20 + int64(5*flooded.Seconds())
	t.Logf("flood of %v: %d requests (%d answered 421, %d answered 429) and %d TLS handshakes for random cluster-shaped names",
		flooded.Round(time.Millisecond), nRequests, refused421.Load(), refused429.Load(), nHandshakes)
	t.Logf("database: %d transactions committed during the flood and 1.5 s after (idle pace %.1f/s, %d in 3 s); "+
		"the budget of unknown-host lookups alone allows %d", during, idleRate, idle, 20+int64(5*flooded.Seconds()))
	t.Logf("served cluster during the flood: %d served, %d failed", served.Load(), servedFailed.Load())

	if other.Load() != 0 {
		t.Errorf("%d random names were answered with something other than 421 or 429, or got a certificate", other.Load())
	}
	if refused429.Load() == 0 {
		t.Errorf("no request was held back by the lookup budget")
	}
	if v := notReady.Load(); v != nil {
		t.Errorf("the leader stopped serving on its own lease during the flood: %v", v)
	}
	if servedFailed.Load() != 0 || served.Load() < 50 {
		t.Errorf("the served cluster: %d served, %d failed during the flood; want no failure", served.Load(), servedFailed.Load())
	}
	if lease := cp.scalar(`SELECT epoch::text || ' ' || holder FROM queen_proxy.gateway_leases WHERE group_name = 'cell-a'`); lease != "1 gw-a" {
		t.Errorf("lease epoch and holder %q after the flood, want 1 gw-a (no hand-over)", lease)
	}
	// Generous: twice the idle pace, plus twice what the budget admits.
	if limit := 2 * budget; during > limit {
		t.Errorf("%d transactions for a flood of %d requests and %d handshakes, want at most %d", during, nRequests, nHandshakes, limit)
	}
	if status, body := b.ready(); status != http.StatusServiceUnavailable || !strings.Contains(body, "leader: gw-a") {
		t.Errorf("standby after the flood: /readyz %d %s", status, body)
	}

	// Whoever reaches a peer address without the group's secret learns
	// nothing of the member there.
	for _, g := range []*groupGateway{a, b} {
		r := do(t, client(g.peerPort), "GET", fmt.Sprintf("http://127.0.0.1:%d/queengate/peer/v2/lease?nonce=%032x&from=gw-b&at=%d&proof=%064x",
			g.peerPort, 1, time.Now().UnixMilli(), 2), "", "")
		if r.status != http.StatusUnauthorized || strings.Contains(string(r.body), "leading") || strings.Contains(string(r.body), "epoch") {
			t.Errorf("%s's peer address, asked without the secret: %d %s", g.name, r.status, r.body)
		}
	}
}

// TestClusterCreatedAfterItsNameWasRefusedIsServedAtOnce: the gateway
// remembers for a while that a name is no cluster, and forgets it as soon
// as the cluster's creation is notified.
func TestClusterCreatedAfterItsNameWasRefusedIsServedAtOnce(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "new-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cell := cp.cell("new-cell", broker.URL(), "")
	tenant := cp.tenant("late")
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, dbURL, "", ""))
	url := fmt.Sprintf("http://late.eu1.example.test:%d/api/v1/resources/queues", port)

	r := do(t, client(port), "GET", url, "", "")
	assertRefusal(t, r, http.StatusMisdirectedRequest, "cluster_unknown")
	cl := cp.cluster(tenant, "late", cell)
	_, key := cp.key(cl.id)
	took := eventually(t, 3*time.Second, func() error {
		if r := do(t, client(port), "GET", url, key, ""); r.status != http.StatusOK {
			return fmt.Errorf("status %d %s", r.status, r.body)
		}
		return nil
	})
	t.Logf("served %v after its creation (a refused name is otherwise remembered for 5 s)", took.Round(time.Millisecond))
	if took >= 4*time.Second {
		t.Fatalf("served only after %v: the name's refusal was not forgotten at its creation", took)
	}
}
