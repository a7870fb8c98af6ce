package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// startCellGateway runs the gateway binary as a gateway of its own against
// dbURL, with extra lines for the queen app and extra environment.
func startCellGateway(t *testing.T, name string, port int, dbURL, appOptions string, env ...string) *groupGateway {
	t.Helper()
	home := t.TempDir()
	cfg := gatewayCaddyfile(port, dbURL, "spool_dir "+filepath.Join(home, "spool")+"\n\t\t"+appOptions, "")
	cfgPath := filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBinary(t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(append(withoutDatabaseURL(os.Environ()), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home), env...)
	g := &groupGateway{t: t, name: name, port: port, cmd: cmd, logPath: filepath.Join(home, "caddy.log"), done: make(chan struct{})}
	logFile, err := os.Create(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); logFile.Close(); close(g.done) }()
	t.Cleanup(func() {
		g.signal(syscall.SIGKILL)
		<-g.done
		if t.Failed() {
			b, _ := os.ReadFile(g.logPath)
			t.Logf("gateway %s log:\n%s", name, b)
		}
	})
	return g
}

// TestBurstHoldsAcrossGatewaysOfTwoCells: two gateways, each fronting its
// own cell, on one control plane. A tenant that sends its cluster's traffic
// to both (its own DNS, --resolve) gets its burst once in total: the
// gateway of the other cell refuses every request 421 before any bucket,
// and forwards nothing. A cluster moved to the other cell is refused by
// its old cell's gateway at once and served by the new one. A third
// gateway claiming a cell another fronts does not start.
func TestBurstHoldsAcrossGatewaysOfTwoCells(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	brokerA := startBroker(t, fakebroker.Options{Name: "cell-a", RequireTenant: true})
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	brokerB := startBroker(t, fakebroker.Options{Name: "cell-b", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cellA := cp.cell("cell-a", brokerA.URL(), "")
	cellB := cp.cell("cell-b", brokerB.URL(), "")
	cp.exec(`UPDATE queen_proxy.cells SET tenancy_stated = 'scoped'`)
	acme := cp.cluster(cp.tenant("acme"), "acme", cellA)
	bolt := cp.cluster(cp.tenant("bolt"), "bolt", cellB)
	_, acmeKey := cp.key(acme.id)
	_, boltKey := cp.key(bolt.id)
	const burst, msgBurst = 20, 100
	cp.exec(fmt.Sprintf(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 1, "req_burst": %d}')`, burst), acme.id)
	cp.exec(fmt.Sprintf(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_msgs_per_sec": 1, "msgs_burst": %d}')`, msgBurst), bolt.id)

	gwA := startCellGateway(t, "gw-a", freePort(t), dbURL, "gateway_name gw-a\n\t\tcells cell-a")
	// Names and cells from the environment at run time, as in a pod.
	gwB := startCellGateway(t, "gw-b", freePort(t), dbURL, "gateway_name {env.QG_NAME}\n\t\tcells {env.QG_CELL}",
		"QG_NAME=gw-b", "QG_CELL=cell-b")
	gwA.awaitReady(http.StatusOK)
	gwB.awaitReady(http.StatusOK)

	// Each gateway says which cells it fronts, and the database records
	// which group fronts which cell.
	if _, body := gwA.ready(); !strings.Contains(body, `"cells":"cell-a (group gw-a)"`) {
		t.Fatalf("gw-a /readyz: %s", body)
	}
	if got := cp.scalar(`SELECT string_agg(cell_slug || '=' || group_name || '/' || claimed_by, ',' ORDER BY cell_slug)
		FROM queen_proxy.gateway_group_cells`); got != "cell-a=gw-a/gw-a,cell-b=gw-b/gw-b" {
		t.Fatalf("gateway_group_cells: %s", got)
	}

	push := func(g *groupGateway, host, key string, items int) response {
		var b strings.Builder
		b.WriteString(`{"items":[`)
		for i := range items {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"queue":"orders","payload":{"n":%d}}`, i)
		}
		b.WriteString("]}")
		return do(t, client(g.port), "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", host, g.port), key, b.String())
	}

	// burstOverBoth sends n pushes of items messages each, alternating
	// between the two gateways, and returns how many were admitted, how
	// many limited (429) and how many refused 421 by the gateway that does
	// not front the cluster's cell (own), with the seconds it took.
	burstOverBoth := func(host, key string, own *groupGateway, n, items int) (admitted, limited, elsewhere int, took time.Duration) {
		start := time.Now()
		for i := range n {
			g := gwA
			if i%2 == 1 {
				g = gwB
			}
			r := push(g, host, key, items)
			switch {
			case r.status == http.StatusOK || r.status == http.StatusCreated:
				admitted++
			case r.status == http.StatusTooManyRequests:
				limited++
			case r.status == http.StatusMisdirectedRequest:
				if g == own {
					t.Fatalf("the cluster's own gateway answered 421: %s", r.body)
				}
				assertRefusal(t, r, http.StatusMisdirectedRequest, "cluster_unknown")
				if !strings.Contains(string(r.body), "does not front the cell of this cluster") {
					t.Fatalf("421 without the reason: %s", r.body)
				}
				elsewhere++
			default:
				t.Fatalf("push %d: %d %s", i, r.status, r.body)
			}
		}
		return admitted, limited, elsewhere, time.Since(start)
	}

	// Requests: twice the burst to each gateway.
	admitted, limited, elsewhere, took := burstOverBoth("acme", acmeKey, gwA, 4*burst, 1)
	refill := int(took.Seconds()) + 1
	t.Logf("%d requests over two gateways against a request burst of %d: %d admitted, %d limited (429), %d refused by the other cell's gateway (421), in %s",
		4*burst, burst, admitted, limited, elsewhere, took.Round(time.Millisecond))
	if elsewhere != 2*burst {
		t.Fatalf("the other cell's gateway refused %d of its %d requests, want all", elsewhere, 2*burst)
	}
	if admitted < burst || admitted > burst+refill {
		t.Fatalf("%d requests admitted in total against a burst of %d (+%d refilled)", admitted, burst, refill)
	}
	if n := len(forwarded(brokerA)); n != admitted {
		t.Fatalf("cell-a's broker saw %d pushes, the gateways admitted %d", n, admitted)
	}
	if n := len(forwarded(brokerB)); n != 0 {
		t.Fatalf("cell-b's broker saw %d requests", n)
	}

	// Messages: twice the message burst to each gateway, 10 per push.
	admitted, limited, elsewhere, took = burstOverBoth("bolt", boltKey, gwB, 4*msgBurst/10, 10)
	refill = int(took.Seconds()) + 1
	t.Logf("%d messages over two gateways against a message burst of %d: %d admitted, %d limited (429), %d refused by the other cell's gateway (421), in %s",
		4*msgBurst, msgBurst, 10*admitted, 10*limited, 10*elsewhere, took.Round(time.Millisecond))
	if elsewhere != 2*msgBurst/10 || 10*admitted < msgBurst || 10*admitted > msgBurst+10*refill {
		t.Fatalf("%d messages admitted in total against a message burst of %d (+%d/s refilled), %d refused elsewhere",
			10*admitted, msgBurst, refill, 10*elsewhere)
	}

	assertRefusal(t, push(gwA, "bolt", boltKey, 1), http.StatusMisdirectedRequest, "cluster_unknown")
	// Refused before authentication: no credential gets the 421 too.
	assertRefusal(t, push(gwA, "bolt", "", 1), http.StatusMisdirectedRequest, "cluster_unknown")

	// A move reaches both gateways through the invalidation channel: the
	// old cell's gateway refuses the cluster, the new one serves it.
	if _, err := controlplane.MoveCluster(context.Background(), cp.pool, "acme", "cell-b", nil); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 5*time.Second, func() error {
		if r := push(gwA, "acme", acmeKey, 1); r.status != http.StatusMisdirectedRequest {
			return fmt.Errorf("old cell's gateway after the move: %d %s", r.status, r.body)
		}
		return nil
	})
	t.Logf("the old cell's gateway refused the moved cluster %s after the move", took.Round(time.Millisecond))
	eventually(t, 5*time.Second, func() error {
		if r := push(gwB, "acme", acmeKey, 1); r.status != http.StatusOK && r.status != http.StatusCreated {
			return fmt.Errorf("new cell's gateway after the move: %d %s", r.status, r.body)
		}
		return nil
	})

	// A second group claiming cell-a fails its start, naming the holder.
	cfg := gatewayCaddyfile(freePort(t), dbURL, "gateway_name gw-x\n\t\tcells cell-a", "")
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	err = caddy.Load(adapted, true)
	if err == nil {
		_ = caddy.Stop()
		t.Fatal("a gateway claiming a cell another group fronts started")
	}
	if !strings.Contains(err.Error(), `cell "cell-a" is fronted by gateway group "gw-a"`) {
		t.Fatalf("conflicting claim: %v", err)
	}
	if got := cp.scalar(`SELECT group_name FROM queen_proxy.gateway_group_cells WHERE cell_slug = 'cell-a'`); got != "gw-a" {
		t.Fatalf("cell-a fronted by %s after the refused claim", got)
	}

	// Handing cell-a over: released with the CLI, the old gateway serves
	// its clusters until the new group claims it, then refuses them.
	q := cliFor(t)(dbURL)
	if out := q.ok(t, "cell", "release-gateway", "cell-a"); !strings.Contains(out, `cell "cell-a" is no longer recorded as fronted by gateway group "gw-a"`) {
		t.Fatalf("release-gateway: %q", out)
	}
	if out := q.ok(t, "cell", "release-gateway", "cell-a"); !strings.Contains(out, "nothing changed") {
		t.Fatalf("release-gateway again: %q", out)
	}
	cat := cp.cluster(cp.tenant("cat"), "cat", cellA)
	_, catKey := cp.key(cat.id)
	if r := push(gwA, "cat", catKey, 1); r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("cat through the old group's gateway before the new claim: %d %s", r.status, r.body)
	}
	xPort := freePort(t)
	startGateway(t, gatewayCaddyfile(xPort, dbURL, "gateway_name gw-x\n\t\tcells cell-a", ""))
	eventually(t, 5*time.Second, func() error {
		if r := push(gwA, "cat", catKey, 1); r.status != http.StatusMisdirectedRequest {
			return fmt.Errorf("the old group's gateway after the new claim: %d %s", r.status, r.body)
		}
		return nil
	})
	gwX := &groupGateway{t: t, name: "gw-x", port: xPort}
	if r := push(gwX, "cat", catKey, 1); r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("cat through the new group's gateway: %d %s", r.status, r.body)
	}
}
