package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// The fault suite. Together with TestGatewayDuringDatabaseOutage
// (database outage: known clusters served, unknown ones refused, recovery)
// and TestMeteringSurvivesDatabaseOutageAndRestart (database outage under
// load with a gateway restart in the middle: usage spooled, then replayed,
// nothing lost or doubled), these are the faults docs/benchmarks.md lists.

// TestFaultBrokerOutage stops the cell's broker under a running gateway and
// starts it again on the same address: while it is down every request,
// parked long-polls included, gets 502 bad_gateway in the JSON envelope at
// once (no hang) and gives its parked slot back; once it is up the gateway
// serves again without a restart.
func TestFaultBrokerOutage(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	b1 := fakebroker.New(fakebroker.Options{Name: "fault-outage-cell", RequireTenant: true})
	brokerURL, err := b1.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b1.Close() })
	addr := strings.TrimPrefix(brokerURL, "http://")
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("fault-outage-cell", brokerURL, "")
	cl := cp.cluster(cp.tenant("fault-outage"), "fault-outage", cell)
	// One parked pop at a time: a slot that leaked would show as a 429.
	// No request bucket: the retries below must not drain it.
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_parked_pops": 1, "max_req_per_sec": null}')`, cl.id)
	_, key := cp.key(cl.id)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", "dial_timeout 1s"))
	c := client(port)
	url := func(path string) string { return fmt.Sprintf("http://fault-outage.eu1.example.test:%d%s", port, path) }
	push := func() response {
		return do(t, c, "POST", url("/api/v1/push"), key, `{"items":[{"queue":"outage","payload":{"n":1}}]}`)
	}
	if r := push(); r.status != 200 {
		t.Fatalf("before the outage: %d %s", r.status, r.body)
	}

	// A pop parked at the broker when it goes away is answered, not left
	// hanging, and its slot is free again. (Goroutines read with
	// readResponse: do may call t.Fatal.)
	longPoll := func(queue string) chan response {
		out := make(chan response, 1)
		req, _ := http.NewRequest("GET", url("/api/v1/pop/queue/"+queue+"?wait=true&timeout=20000"), nil)
		req.Header.Set("Authorization", "Bearer "+key)
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				out <- response{status: -1, body: []byte(err.Error())}
				return
			}
			out <- readResponse(resp)
		}()
		return out
	}
	parked := longPoll("idle")
	eventually(t, 5*time.Second, func() error {
		if b1.Parked() != 1 {
			return fmt.Errorf("%d parked at the broker", b1.Parked())
		}
		return nil
	})
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-parked:
		// The broker may end the parked pop itself as it closes (an empty
		// 200) or drop the connection (502 from the gateway).
		if r.status == http.StatusBadGateway {
			assertRefusal(t, r, 502, "bad_gateway")
		} else if r.status != 200 {
			t.Fatalf("parked pop when the broker went away: %d %s", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked pop was left hanging when the broker went away")
	}

	for range 3 {
		start := time.Now()
		assertRefusal(t, push(), 502, "bad_gateway")
		assertRefusal(t, do(t, c, "GET", url("/api/v1/pop/queue/outage?wait=true&timeout=5000"), key, ""), 502, "bad_gateway")
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("refusals during the outage took %v", took)
		}
	}

	// The broker comes back on the same address: no gateway restart.
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	b2 := fakebroker.New(fakebroker.Options{Name: "fault-outage-cell", RequireTenant: true})
	t.Cleanup(func() { _ = b2.Close() })
	eventually(t, 5*time.Second, func() error {
		_, err := b2.Listen(addr)
		return err
	})
	took := eventually(t, 10*time.Second, func() error {
		if r := push(); r.status != 200 {
			return fmt.Errorf("push: %d %s", r.status, r.body)
		}
		return nil
	})
	t.Logf("served again %v after the broker came back", took)
	if fw := forwarded(b2); len(fw) == 0 || fw[len(fw)-1].Tenant() != cl.brokerTenant {
		t.Fatalf("the new broker did not get the push with the cluster's tenant: %+v", fw)
	}
	// The parked slot is free: a long-poll parks at the new broker and is
	// woken by a push.
	woken := longPoll("wake")
	eventually(t, 5*time.Second, func() error {
		if b2.Parked() != 1 {
			return fmt.Errorf("%d parked at the new broker", b2.Parked())
		}
		return nil
	})
	if r := do(t, c, "POST", url("/api/v1/push"), key, `{"items":[{"queue":"wake","payload":{"n":2}}]}`); r.status != 200 {
		t.Fatalf("push after recovery: %d %s", r.status, r.body)
	}
	select {
	case r := <-woken:
		if r.status != 200 || !strings.Contains(string(r.body), `"n":2`) {
			t.Fatalf("long-poll after recovery: %d %s", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long-poll after recovery was not woken by the push")
	}
}

// reloadableCaddyfile is the test gateway with Caddy's admin endpoint on
// adminPort, so that it can be reloaded the way `caddy reload` does it: a
// POST of the configuration to /load.
func reloadableCaddyfile(port, adminPort int, dbURL, gatewayOptions string) string {
	return strings.Replace(gatewayCaddyfile(port, dbURL, "", gatewayOptions),
		"admin off", fmt.Sprintf("admin 127.0.0.1:%d", adminPort), 1)
}

// caddyReload posts a Caddyfile to the admin endpoint's /load, as `caddy
// reload --adapter caddyfile` does, and returns when Caddy has switched.
func caddyReload(t *testing.T, adminPort int, caddyfile string) {
	t.Helper()
	req, err := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/load", adminPort), strings.NewReader(caddyfile))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	r := readResponse(resp)
	if r.status != 200 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
}

// TestFaultReloadUnderLoad reloads the gateway (through the admin API, as
// `caddy reload` does) five times while clients push and pop without a
// pause on keep-alive connections, and a cluster whose request bucket is
// empty (rate 0, so it never refills by itself) stays throttled across
// every reload.
//
// No request is answered with an error and no pop fails. What a reload
// can do is what any graceful HTTP/1.1 shutdown does (Go's
// http.Server.Shutdown, which Caddy uses for the old configuration's
// servers): close the keep-alive connections that are idle at that
// instant, and a request the client was just writing on one of them fails
// with a reset or EOF before any answer. Go's client retries that
// transparently for GET, not for POST; the test checks that such a push
// never reached the broker, so a client may retry it safely, and that at
// most one request per connection and reload is affected.
func TestFaultReloadUnderLoad(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "fault-reload-cell", RequireTenant: true, RequestLogSize: 200000})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("fault-reload-cell", broker.URL(), "")
	tn := cp.tenant("fault-reload")
	busy := cp.cluster(tn, "fault-busy", cell)
	capped := cp.cluster(tn, "fault-capped", cell)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": null, "max_msgs_per_sec": null}')`, busy.id)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 0, "req_burst": 5}')`, capped.id)
	_, busyKey := cp.key(busy.id)
	_, cappedKey := cp.key(capped.id)

	port, adminPort := freePort(t), freePort(t)
	startGateway(t, reloadableCaddyfile(port, adminPort, pgtest.URL(t), ""))
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}

	// Empty the capped cluster's bucket: five pass, then 429 for good.
	c := client(port)
	passed := 0
	for range 8 {
		r := do(t, c, "GET", url(capped.slug, "/api/v1/resources/queues"), cappedKey, "")
		switch r.status {
		case 200:
			passed++
		case 429:
			assertRefusal(t, r, 429, "rate_limited")
		default:
			t.Fatalf("capped cluster: %d %s", r.status, r.body)
		}
	}
	if passed != 5 {
		t.Fatalf("%d requests of the capped cluster passed, want its burst of 5", passed)
	}

	const workers, reloads = 4, 5
	var sent, failed, pushed atomic.Int64
	var failures sync.Map // what failed -> method
	var dropped sync.Map  // transaction id of a push whose connection failed -> error
	var droppedN atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			wc := client(port)
			queue := fmt.Sprintf("reload-%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var req *http.Request
				txn := fmt.Sprintf("reload-%d-%d", w, i)
				if i%2 == 0 {
					req, _ = http.NewRequest("POST", url(busy.slug, "/api/v1/push"),
						strings.NewReader(fmt.Sprintf(`{"items":[{"queue":%q,"transactionId":%q,"payload":{"i":%d}}]}`, queue, txn, i)))
				} else {
					req, _ = http.NewRequest("GET", url(busy.slug, "/api/v1/pop/queue/"+queue+"?batch=1&autoAck=true"), nil)
				}
				req.Header.Set("Authorization", "Bearer "+busyKey)
				sent.Add(1)
				resp, err := wc.Do(req)
				if err != nil {
					if req.Method == "POST" {
						dropped.Store(txn, err.Error())
						droppedN.Add(1)
						continue
					}
					failed.Add(1)
					failures.LoadOrStore(err.Error(), req.Method)
					continue
				}
				r := readResponse(resp)
				if r.status != 200 && r.status != 201 {
					failed.Add(1)
					failures.LoadOrStore(fmt.Sprintf("%d %s", r.status, r.body), req.Method)
				} else if req.Method == "POST" {
					pushed.Add(1)
				}
			}
		})
	}

	time.Sleep(300 * time.Millisecond)
	for i := range reloads {
		before := sent.Load()
		caddyReload(t, adminPort, reloadableCaddyfile(port, adminPort, pgtest.URL(t), fmt.Sprintf("upstream_timeout %ds", 20+i)))
		// The bucket was not refilled by the reload.
		assertRefusal(t, do(t, c, "GET", url(capped.slug, "/api/v1/resources/queues"), cappedKey, ""), 429, "rate_limited")
		time.Sleep(300 * time.Millisecond)
		if sent.Load() == before {
			t.Fatalf("no request went out around reload %d", i+1)
		}
	}
	close(stop)
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Errorf("%v request failed: %v", v, k)
		return true
	})
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed across %d reloads", failed.Load(), sent.Load(), reloads)
	}
	// Pushes whose connection was closed under them were never processed.
	stored := 0
	for _, r := range forwarded(broker) {
		if r.Method != "POST" || r.Path != "/api/v1/push" {
			continue
		}
		stored++
		dropped.Range(func(txn, err any) bool {
			if strings.Contains(string(r.Body), fmt.Sprintf("%q", txn)) {
				t.Errorf("push %s failed at the client (%v) but reached the broker: a retry would duplicate it", txn, err)
			}
			return true
		})
	}
	if int64(stored) != pushed.Load() {
		t.Errorf("the broker got %d pushes, clients were answered for %d", stored, pushed.Load())
	}
	if n := droppedN.Load(); n > workers*reloads {
		t.Errorf("%d pushes failed at the connection, more than one per connection and reload", n)
	}
	t.Logf("%d requests across %d reloads: none answered with an error; %d pushes in flight on a keep-alive connection the old server closed (never processed, safe to retry)",
		sent.Load(), reloads, droppedN.Load())
}

// slowCaddyfile is the test gateway with short server timeouts, the way an
// operator bounds slow clients: read_header bounds the request head,
// read_body the whole request.
func slowCaddyfile(port int, dbURL string) string {
	return strings.Replace(gatewayCaddyfile(port, dbURL, "", ""), "\tqueen {",
		"\tservers {\n\t\ttimeouts {\n\t\t\tread_header 500ms\n\t\t\tread_body 1s\n\t\t}\n\t}\n\tqueen {", 1)
}

// TestFaultSlowClients holds connections open the slowloris way (a request
// head that never ends, a header line every 100 ms) and the slow-body way
// (a push whose body trickles in a byte at a time): Caddy's server timeouts
// end both, nothing reaches the broker, normal clients are served
// meanwhile, and every goroutine they held is given back.
func TestFaultSlowClients(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "fault-slow-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("fault-slow-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("fault-slow"), "fault-slow", cell)
	_, key := cp.key(cl.id)

	port := freePort(t)
	startGateway(t, slowCaddyfile(port, pgtest.URL(t)))
	c := client(port)
	url := fmt.Sprintf("http://fault-slow.eu1.example.test:%d/api/v1/push", port)
	if r := do(t, c, "POST", url, key, `{"items":[{"queue":"slow","payload":1}]}`); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	c.CloseIdleConnections()
	settle := func() int {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	baseline := settle()
	broker.ResetRequests()

	const conns = 20
	type outcome struct {
		kind   string
		took   time.Duration
		status string // the status line the gateway sent, if any
	}
	outcomes := make(chan outcome, 2*conns)
	slow := func(kind, head, drip string) {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			outcomes <- outcome{kind: kind, status: "dial: " + err.Error()}
			return
		}
		defer conn.Close()
		start := time.Now()
		closed := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(conn).ReadString('\n')
			_, _ = io.Copy(io.Discard, conn) // until the gateway closes the connection
			closed <- strings.TrimSpace(line)
		}()
		if _, err := io.WriteString(conn, head); err != nil {
			outcomes <- outcome{kind: kind, status: "write: " + err.Error()}
			return
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case status := <-closed:
				outcomes <- outcome{kind: kind, took: time.Since(start), status: status}
				return
			case <-tick.C:
				_, _ = io.WriteString(conn, drip) // errors once the gateway hung up: keep waiting for the close
			case <-time.After(10 * time.Second):
				outcomes <- outcome{kind: kind, took: time.Since(start), status: "still open after 10s"}
				return
			}
		}
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			slow("slowloris head", fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: fault-slow.eu1.example.test\r\nAuthorization: Bearer %s\r\n", key),
				fmt.Sprintf("X-Drip-%d: a\r\n", i))
		})
		wg.Go(func() {
			slow("slow body", fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: fault-slow.eu1.example.test\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{", key),
				" ")
		})
	}
	// Normal clients are served while the slow ones hold their connections.
	time.Sleep(200 * time.Millisecond)
	if r := do(t, c, "POST", url, key, `{"items":[{"queue":"slow","payload":2}]}`); r.status != 200 {
		t.Fatalf("a normal client during the slow ones: %d %s", r.status, r.body)
	}
	wg.Wait()
	close(outcomes)
	statuses := map[string]int{}
	longest := map[string]time.Duration{}
	for o := range outcomes {
		if o.status == "" {
			o.status = "connection closed"
		}
		statuses[o.kind+": "+o.status]++
		longest[o.kind] = max(longest[o.kind], o.took)
		if o.took == 0 || o.took > 3*time.Second {
			t.Errorf("a slow client was not cut off in time: %+v", o)
		}
	}
	t.Logf("slow clients cut off within %v; what they got: %v", longest, statuses)
	for _, r := range forwarded(broker) {
		if r.Method == "POST" && r.Path == "/api/v1/push" && strings.Contains(string(r.Body), `"payload":2`) {
			continue
		}
		t.Errorf("a slow client's request reached the broker: %s %s %q", r.Method, r.Path, r.Body)
	}

	c.CloseIdleConnections()
	eventually(t, 10*time.Second, func() error {
		if n := settle(); n > baseline+5 {
			return fmt.Errorf("%d goroutines, %d before the slow clients", n, baseline)
		}
		return nil
	})
}
