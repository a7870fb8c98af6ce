package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/internal/pgtest"
)

// acceptedItems counts the items of a push answer the broker stored.
func acceptedItems(r response) int64 {
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		return 0
	}
	var items []struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(r.body, &items) != nil {
		return 0
	}
	var n int64
	for _, it := range items {
		if it.Status == "queued" || it.Status == "buffered" {
			n++
		}
	}
	return n
}

// usageOf sums a cluster's usage_minutes for one op class.
func (cp *controlPlane) usageOf(clusterID, op string) (reqs, msgs int64) {
	cp.t.Helper()
	row := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text || ' ' || coalesce(sum(msgs), 0)::text
		FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid AND op_class = $2`, clusterID, op)
	if _, err := fmt.Sscan(row, &reqs, &msgs); err != nil {
		cp.t.Fatal(err)
	}
	return reqs, msgs
}

// TestMeteringBooksWhatTheBrokerStored pushes (with duplicates the broker
// refuses to store twice), pops and reads on two clusters, then stops the
// gateway: usage_minutes holds exactly the billable messages per cluster.
// meteringRuns numbers the runs of TestMeteringBooksWhatTheBrokerStored:
// its per-cluster counter is process-wide, so a second run (-count=N) names
// its clusters apart.
var meteringRuns atomic.Int64

func TestMeteringBooksWhatTheBrokerStored(t *testing.T) {
	run := meteringRuns.Add(1)
	broker := startBroker(t, fakebroker.Options{Name: "meter-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("meter-cell", broker.URL(), "")
	tn := cp.tenant("meter")
	a, b := cp.cluster(tn, fmt.Sprintf("meter-a%d", run), cell), cp.cluster(tn, fmt.Sprintf("meter-b%d", run), cell)
	_, aKey := cp.key(a.id)
	_, bKey := cp.key(b.id)

	port := freePort(t)
	metricsPort := freePort(t)
	cfg := gatewayCaddyfile(port, pgtest.URL(t), "meter_flush_interval 1s\n\t\tmetrics_per_cluster\n\t\tspool_dir "+t.TempDir(), "") +
		fmt.Sprintf("http://127.0.0.1:%d {\n\tmetrics\n}\n", metricsPort)
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}
	stored := map[string]int64{}
	for i := range 10 {
		for _, cl := range []struct {
			cluster
			key string
		}{{a, aKey}, {b, bKey}} {
			// Every third push repeats the previous transaction id: the
			// broker answers "duplicate" and it is not billed.
			tx := fmt.Sprintf("tx-%d", i-i%3)
			r := do(t, c, "POST", url(cl.slug, "/api/v1/push"), cl.key,
				fmt.Sprintf(`{"items":[{"queue":"orders","payload":{"i":%d},"transactionId":%q},{"queue":"orders","payload":2}]}`, i, tx))
			stored[cl.id] += acceptedItems(r)
		}
	}
	pop := do(t, c, "GET", url(a.slug, "/api/v1/pop/queue/orders?batch=5"), aKey, "")
	var popped struct{ Messages []json.RawMessage }
	if err := json.Unmarshal(pop.body, &popped); err != nil || len(popped.Messages) != 5 {
		t.Fatalf("pop: %d %s", pop.status, pop.body)
	}
	if r := do(t, c, "GET", url(b.slug, "/api/v1/resources/queues"), bKey, ""); r.status != 200 {
		t.Fatalf("read: %d", r.status)
	}
	if stored[a.id] == 0 || stored[a.id] == 20 {
		t.Fatalf("stored %d of 20 items: the duplicates did not happen", stored[a.id])
	}
	assertRefusal(t, do(t, c, "GET", url(a.slug, "/api/v1/resources/queues"), "qk_test_unknown", ""), 401, "unauthorized")
	scrape := do(t, http.DefaultClient, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), "", "")
	for _, want := range []string{
		// Counters are process-wide (they survive reloads), so other
		// tests' requests count too; the per-cluster one is this test's.
		`queengate_requests_total{class="produce",outcome="forwarded"}`,
		`queengate_requests_total{class="consume",outcome="forwarded"}`,
		`queengate_refusals_total{code="unauthorized"}`,
		fmt.Sprintf(`queengate_cluster_requests_total{cluster=%q} 11`, a.slug),
		`queengate_cache_lookups_total{kind="api_key",result="hit"}`,
		`queengate_meter_flushes_total{result="ok"}`,
		`queengate_db_pool_connections{state="max"} 16`,
		`queengate_parked_pops 0`,
	} {
		if !strings.Contains(string(scrape.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}

	for _, cl := range []cluster{a, b} {
		reqs, msgs := cp.usageOf(cl.id, "push")
		if reqs != 10 || msgs != stored[cl.id] {
			t.Errorf("%s push usage: %d requests, %d messages; want 10 and %d", cl.slug, reqs, msgs, stored[cl.id])
		}
	}
	if reqs, msgs := cp.usageOf(a.id, "delivery"); reqs != 1 || msgs != 5 {
		t.Errorf("delivery usage %d/%d, want 1 request, 5 messages", reqs, msgs)
	}
	if reqs, msgs := cp.usageOf(b.id, "read"); reqs != 1 || msgs != 0 {
		t.Errorf("read usage %d/%d, want 1 request, 0 messages", reqs, msgs)
	}
}

// TestMeteringSurvivesDatabaseOutageAndRestart is the database fault test:
// steady load through real Caddy, PostgreSQL stopped for two minutes, the
// gateway restarted once during the outage, PostgreSQL back. After the
// spool drains, usage_minutes holds exactly what the broker accepted per
// cluster: no row lost, none doubled. QUEENGATE_FAULT_OUTAGE shortens the
// outage for local runs (e.g. 20s).
func TestMeteringSurvivesDatabaseOutageAndRestart(t *testing.T) {
	outage := 2 * time.Minute
	if v := os.Getenv("QUEENGATE_FAULT_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("QUEENGATE_FAULT_OUTAGE: %v", err)
		}
		outage = d
	}
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.CreateDatabase(ctx, "fault"); err != nil {
		t.Fatal(err)
	}
	dbURL := srv.URL("fault")
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "fault-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cell := cp.cell("fault-cell", broker.URL(), "")
	tn := cp.tenant("fault")
	clusters := []cluster{cp.cluster(tn, "fault-a", cell), cp.cluster(tn, "fault-b", cell)}
	keys := make([]string, len(clusters))
	for i, cl := range clusters {
		_, keys[i] = cp.key(cl.id)
	}
	cp.pool.Close()

	port := freePort(t)
	spool := t.TempDir()
	cfg := gatewayCaddyfile(port, dbURL, "meter_flush_interval 1s\n\t\tdatabase_timeout 1s\n\t\tspool_dir "+spool, "")
	load := func() {
		t.Helper()
		adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Load(adapted, true); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	load()
	t.Cleanup(func() { _ = caddy.Stop() })

	// Steady load: each cluster pushes one item at a time; the broker's
	// own answers say what it stored.
	c := client(port)
	var accepted [2]atomic.Int64
	var sent, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, cl := range clusters {
		wg.Go(func() {
			url := fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", cl.slug, port)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				req, _ := http.NewRequest("POST", url, stringsReader(`{"items":[{"queue":"steady","payload":{"n":`+strconv.Itoa(n)+`}}]}`))
				req.Header.Set("Authorization", "Bearer "+keys[i])
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				r := readResponse(resp)
				sent.Add(1)
				if got := acceptedItems(r); got > 0 {
					accepted[i].Add(got)
				} else {
					refused.Add(1)
				}
			}
		})
	}

	time.Sleep(5 * time.Second)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("database stopped; %d sent so far", sent.Load())
	time.Sleep(outage / 2)
	// Restart the gateway during the outage: the old one spools what it
	// could not write; the new one starts without the database.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	load()
	t.Logf("gateway restarted during the outage; %d sent, %d refused", sent.Load(), refused.Load())
	time.Sleep(outage / 2)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Log("database back")
	// Load until the new gateway serves again, and a little longer.
	before := accepted[0].Load() + accepted[1].Load()
	eventually(t, 60*time.Second, func() error {
		if now := accepted[0].Load() + accepted[1].Load(); now <= before {
			return fmt.Errorf("nothing accepted since the database came back")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	// The spool drains into the database while the gateway runs.
	took := eventually(t, 60*time.Second, func() error {
		files, err := filepath.Glob(filepath.Join(spool, "*.jsonl"))
		if err != nil || len(files) > 0 {
			return fmt.Errorf("spool files left: %v %v", files, err)
		}
		return nil
	})
	t.Logf("spool drained %v after the load stopped", took)
	if err := caddy.Stop(); err != nil { // drain the open minute
		t.Fatal(err)
	}

	cp = newControlPlane(t, dbURL)
	for i, cl := range clusters {
		_, msgs := cp.usageOf(cl.id, "push")
		if msgs != accepted[i].Load() {
			t.Errorf("%s: usage_minutes has %d push messages, the broker accepted %d", cl.slug, msgs, accepted[i].Load())
		}
	}
	t.Logf("%d requests sent, %d refused while the gateway could not confirm clusters; accepted %d + %d",
		sent.Load(), refused.Load(), accepted[0].Load(), accepted[1].Load())
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// readResponse reads a whole response, for goroutines that cannot fail the
// test themselves.
func readResponse(resp *http.Response) response {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
