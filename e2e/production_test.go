package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

// TestProductionBackupAndRestore runs docs/production.md's backup and
// restore of the control-plane database as written there: pg_dump of the
// queen_proxy schema, a fresh database with pgcrypto, pg_restore, caddy
// queen migrate; then a gateway on the restored database serves the
// cluster and key provisioned before the dump, and usage booked before the
// dump is still there.
func TestProductionBackupAndRestore(t *testing.T) {
	bin, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "backup-cell", RequireTenant: true})
	source := pgtest.NewDatabase(t)
	cp := newControlPlane(t, source)
	cl := cp.cluster(cp.tenant("backup"), "backup", cp.cell("backup-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)
	cp.exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, reqs, msgs, bytes_in, bytes_out)
		VALUES ($1::uuid, date_trunc('minute', now()), 'push', 3, 7, 100, 0)`, cl.id)
	counts := `SELECT (SELECT count(*) FROM queen_proxy.clusters)::text || ' clusters, ' ||
		(SELECT count(*) FROM queen_proxy.api_keys)::text || ' keys, ' ||
		(SELECT coalesce(sum(msgs), 0) FROM queen_proxy.usage_minutes)::text || ' messages'`
	before := cp.scalar(counts)

	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, name), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	dump := filepath.Join(t.TempDir(), "queen_proxy.dump")
	// The runbook's commands, with the test's URLs for $QUEENGATE_DATABASE_URL
	// and $NEW_DATABASE_URL.
	run("pg_dump", "--dbname="+source, "--schema=queen_proxy", "--format=custom", "--file="+dump)
	restored := pgtest.NewDatabase(t)
	run("psql", "--dbname="+restored, "-v", "ON_ERROR_STOP=1", "-c", "CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public")
	run("pg_restore", "--dbname="+restored, "--no-owner", "--exit-on-error", dump)
	r := cliFor(t)("").run(t, []string{"QUEENGATE_DATABASE_URL=" + restored}, "", "migrate")
	names := migrations.Names()
	if want := fmt.Sprintf("database is up to date (%d migrations, latest %s)\n", len(names), names[len(names)-1]); r.code != 0 || r.stdout != want {
		t.Fatalf("caddy queen migrate on the restored database: exit %d, stderr %q, stdout %q; want %q", r.code, r.stderr, r.stdout, want)
	}
	if after := newControlPlane(t, restored).scalar(counts); after != before {
		t.Fatalf("restored database has %s, the original %s", after, before)
	}

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, restored, "spool_dir "+t.TempDir(), ""))
	url := fmt.Sprintf("http://backup.eu1.example.test:%d/api/v1/push", port)
	seen := len(forwarded(broker))
	if r := do(t, client(port), "POST", url, key, `{"items":[{"queue":"q","payload":1}]}`); r.status != http.StatusOK {
		t.Fatalf("push through a gateway on the restored database: %d %s", r.status, r.body)
	}
	if n := len(forwarded(broker)) - seen; n != 1 {
		t.Fatalf("the cell received %d requests, want the push", n)
	}
	assertRefusal(t, do(t, client(port), "POST", url, "qk_test_unknown", `{"items":[{"queue":"q","payload":1}]}`), http.StatusUnauthorized, "unauthorized")
}

// TestProductionLeaderGroupUpgrade upgrades a leader group one member at a
// time as docs/production.md says, under a read every 5 ms sent to
// whichever member serves: the standby is stopped and started on the new
// configuration first, then the leader is stopped gracefully (the upgraded
// standby takes over) and started on the new configuration, and comes back
// as the standby. The group is never without a serving member for more
// than the handover, and both members run the new configuration at the end.
func TestProductionLeaderGroupUpgrade(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "upgrade-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("upgrade"), "upgrade", cp.cell("upgrade-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)

	homeA, homeB := t.TempDir(), t.TempDir()
	a := startGroupGatewayIn(t, "gw-a", freePort(t), dbURL, homeA)
	a.awaitReady(http.StatusOK)
	b := startGroupGatewayIn(t, "gw-b", freePort(t), dbURL, homeB)
	b.awaitReady(http.StatusServiceUnavailable)
	url := func(g *groupGateway) string {
		return fmt.Sprintf("http://127.0.0.1:%d/api/v1/resources/queues", g.port)
	}
	load := runSteadyLoad(t, map[string]string{"gw-a": url(a), "gw-b": url(b)}, "upgrade.eu1.example.test", key)
	time.Sleep(500 * time.Millisecond)

	// The new configuration: the per-cluster metric and a metrics listener.
	metricsA, metricsB := freePort(t), freePort(t)
	newConfig := func(metricsPort int) (string, string) {
		return "metrics_per_cluster", fmt.Sprintf("http://127.0.0.1:%d {\n\thandle /metrics {\n\t\tmetrics\n\t}\n}\n", metricsPort)
	}

	// 1. The standby: stop, start on the new configuration, wait until it
	// is a standby again. The leader serves throughout.
	standbyStopped := time.Now()
	b.signal(syscall.SIGTERM)
	<-b.done
	opts, sites := newConfig(metricsB)
	b2 := startGroupGatewayWith(t, "gw-b", b.port, dbURL, homeB, opts, sites)
	b2.awaitReady(http.StatusServiceUnavailable)
	eventually(t, 5*time.Second, func() error {
		if _, body := b2.ready(); !containsAll(body, "standby of group cell-a as gw-b", "leader: gw-a") {
			return fmt.Errorf("upgraded standby /readyz: %s", body)
		}
		return nil
	})
	if gap, _ := load.gapAfter(standbyStopped); gap > 500*time.Millisecond {
		t.Fatalf("restarting the standby left the group %v without serving", gap)
	}
	// A standby takes a free lease only once it has reached the database
	// for leader_lease_ttl/2 without a break.
	time.Sleep(1500 * time.Millisecond)

	// 2. The leader: a graceful stop hands the lease over at once.
	leaderStopped := time.Now()
	a.signal(syscall.SIGTERM)
	<-a.done
	eventually(t, 10*time.Second, func() error {
		if status, body := b2.ready(); status != http.StatusOK {
			return fmt.Errorf("gw-b not leading yet: %s", body)
		}
		return nil
	})
	opts, sites = newConfig(metricsA)
	a2 := startGroupGatewayWith(t, "gw-a", a.port, dbURL, homeA, opts, sites)
	a2.awaitReady(http.StatusServiceUnavailable)
	eventually(t, 5*time.Second, func() error {
		if _, body := a2.ready(); !containsAll(body, "standby of group cell-a as gw-a", "leader: gw-b") {
			return fmt.Errorf("upgraded old leader /readyz: %s", body)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	load.halt()
	gap, _ := load.gapAfter(leaderStopped)
	t.Logf("upgrade handover: longest gap without a served request %v", gap.Round(time.Millisecond))
	if gap > time.Second {
		t.Fatalf("the handover left the group %v without serving, want under 1s (the lease is released)", gap)
	}
	if holder := cp.scalar(`SELECT holder FROM queen_proxy.gateway_leases WHERE group_name = 'cell-a'`); holder != "gw-b" {
		t.Fatalf("lease holder %q, want gw-b", holder)
	}

	// Both members run the new configuration; the leader counts the
	// cluster's requests per cluster.
	for _, m := range []struct {
		name string
		port int
		want string
	}{{"gw-b", metricsB, `queengate_cluster_requests_total{cluster="upgrade"}`}, {"gw-a", metricsA, `queengate_gateway_role{gateway="gw-a",group="cell-a",role="standby"} 1`}} {
		r := do(t, http.DefaultClient, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", m.port), "", "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), m.want) {
			t.Errorf("%s's metrics listener (the new configuration): %d, want %s", m.name, r.status, m.want)
		}
	}
	if _, err := os.Stat(filepath.Join(homeA, "spool")); err != nil {
		t.Errorf("the old leader's spool directory: %v", err)
	}
}

// TestProductionSpoolMovesToAnotherMember replaces a machine as
// docs/production.md's usage spool section says: the leader is killed
// before its usage reached the database and leaves journal files; the
// standby takes over; the files are copied next to its spool_dir and moved
// into it, and the running member replays them at its next flush; when the
// old member comes back on its own copy of the same files, nothing is
// added twice.
func TestProductionSpoolMovesToAnotherMember(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "spool-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("spool"), "spool", cp.cell("spool-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)
	booked := func() string {
		return cp.scalar(`SELECT coalesce(sum(msgs), 0)::text FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid AND op_class = 'push'`, cl.id)
	}

	homeA, homeB := t.TempDir(), t.TempDir()
	a := startGroupGatewayIn(t, "gw-a", freePort(t), dbURL, homeA)
	a.awaitReady(http.StatusOK)
	// The surviving member flushes (and so replays) every second instead
	// of every 15 s, to keep the test short.
	b := startGroupGatewayWith(t, "gw-b", freePort(t), dbURL, homeB, "meter_flush_interval 1s", "")
	b.awaitReady(http.StatusServiceUnavailable)
	const pushes = 12
	for i := range pushes {
		r := do(t, client(a.port), "POST", fmt.Sprintf("http://spool.eu1.example.test:%d/api/v1/push", a.port), key,
			fmt.Sprintf(`{"items":[{"queue":"q","payload":%d}]}`, i))
		if r.status != http.StatusOK {
			t.Fatalf("push %d: %d %s", i, r.status, r.body)
		}
	}
	// The journal is written every second; the flush to the database only
	// every 15 s: after 1.5 s the pushes are on disk and nowhere else.
	time.Sleep(1500 * time.Millisecond)
	a.signal(syscall.SIGKILL)
	<-a.done
	if got := booked(); got != "0" {
		t.Fatalf("%s messages booked before the kill, want 0 (the test needs them in the spool only)", got)
	}
	left, _ := filepath.Glob(filepath.Join(homeA, "spool", "meter-*"))
	if len(left) == 0 {
		t.Fatal("the killed member left no spool files")
	}
	b.awaitReady(http.StatusOK)

	// The runbook's copy: the files into a directory beside the running
	// member's spool_dir (the same file system), then moved into it, so
	// that its replay never reads a file half copied.
	incoming := filepath.Join(homeB, "incoming")
	if err := os.MkdirAll(incoming, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range left {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(incoming, filepath.Base(f)), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(incoming, filepath.Base(f)), filepath.Join(homeB, "spool", filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprint(pushes)
	eventually(t, 15*time.Second, func() error {
		if got := booked(); got != want {
			return fmt.Errorf("%s messages booked after the running member replayed the copy, want %s", got, want)
		}
		return nil
	})

	// The old member back on its own copy: replayed, recognised, not added.
	startGroupGatewayIn(t, "gw-a", a.port, dbURL, homeA)
	eventually(t, 20*time.Second, func() error {
		if rest, _ := filepath.Glob(filepath.Join(homeA, "spool", "meter-*")); len(rest) != 0 {
			return fmt.Errorf("the old member's spool still holds %v", rest)
		}
		return nil
	})
	if got := booked(); got != want {
		t.Fatalf("%s messages booked after both replays, want %s (nothing twice)", got, want)
	}
}
