package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// processRSS is this process's resident set (the gateway runs in it), in
// bytes.
func processRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// connectionsTo counts the established TCP connections whose far end is
// port: the gateway's connections to a cell listening there.
func connectionsTo(t *testing.T, port int) int {
	t.Helper()
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatalf("reading the kernel's socket table: %v", err)
		}
		remote := fmt.Sprintf(":%04X", port)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// f[2] is the remote address, f[3] the state; 01 is ESTABLISHED.
			if len(f) > 3 && strings.HasSuffix(f[2], remote) && f[3] == "01" {
				n++
			}
		}
	}
	return n
}

// TestProduceInFlightIsBounded is the red team's load: pushes sent all at
// once to a cell that answers after 3 s, each client hanging up when no
// answer came before the cell's. The pushes in flight stay within the
// cluster's share of the budget (cluster_produce_max_bytes 64MiB,
// cluster_produce_max_exchanges 128 by default); every other push is
// refused 503 exchange_capacity with Retry-After, at once, and reaches
// nothing and bills nothing. It prints the gateway's peak RSS growth and
// its peak connections to the cell.
func TestProduceInFlightIsBounded(t *testing.T) {
	// The cell: the fake broker, but for pushes, which it reads whole,
	// keeps nothing of (so that the process's RSS is the gateway's), and
	// answers after 3 s as queued.
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "inflight-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	var pushesIn, itemsIn atomic.Int64
	cell := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/push" {
			broker.ServeHTTP(w, r)
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || n != r.ContentLength {
			http.Error(w, "body cut short", http.StatusBadRequest)
			return
		}
		items, _ := strconv.Atoi(r.Header.Get("X-Test-Items"))
		pushesIn.Add(1)
		itemsIn.Add(int64(items))
		time.Sleep(3 * time.Second)
		w.Header().Set("Content-Type", "application/json")
		var b strings.Builder
		b.WriteByte('[')
		for i := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"index":%d,"message_id":"01a22ac0-cdd3-7%03x-910d-254e7a04a860","partition_id":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","queueName":"bulk","status":"queued","trace_id":null,"transaction_id":"01a22ac0-cdd0-739c-987b-5766b13d%04x"}`, i, i, i)
		}
		b.WriteByte(']')
		_, _ = io.WriteString(w, b.String())
	}))
	t.Cleanup(cell.Close)
	dbURL := pgtest.NewDatabase(t)
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("inflight-cell", cell.URL, "")
	tenant := cp.tenant("inflight")
	port := freePort(t)
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(
		[]byte(gatewayCaddyfile(port, dbURL, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), "upstream_timeout 10s")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = caddy.Stop()
		}
	})
	cellPort, err := strconv.Atoi(cell.URL[strings.LastIndexByte(cell.URL, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		slug   string
		billed int64
	}
	var outcomes []outcome

	for _, load := range []struct {
		name         string
		pushes       int
		items        int
		payload      int
		maxForwarded int // the share's bound: 64 MiB of bodies, or 128 exchanges
	}{
		{"45 pushes of 7.6 MiB", 45, 8, 1000000, 8},
		{"150 pushes of 0.9 MB", 150, 1, 900000, 74},
	} {
		t.Run(load.name, func(t *testing.T) {
			slug := fmt.Sprintf("inflight-%d", load.pushes)
			cl := cp.cluster(tenant, slug, cellID)
			cp.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"max_msgs_per_sec": null, "msgs_burst": null, "max_req_per_sec": null, "req_burst": null}'
				WHERE id = $1::uuid`, cl.id)
			_, key := cp.key(cl.id)
			host := fmt.Sprintf("%s.eu1.example.test", slug)
			text := strings.Repeat("x", load.payload)
			var b strings.Builder
			b.WriteString(`{"items":[`)
			for i := range load.items {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"queue":"bulk","payload":{"n":%d,"text":%q}}`, i, text)
			}
			b.WriteString(`]}`)
			body := b.String()
			request := []byte(fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nX-Test-Items: %d\r\nContent-Length: %d\r\n\r\n%s",
				host, key, load.items, len(body), body))
			// The isolation probes of a new cluster must not wait on the
			// slow answers.
			eventually(t, 30*time.Second, func() error {
				r := do(t, client(port), "GET", fmt.Sprintf("http://%s:%d/api/v1/resources/queues", host, port), key, "")
				if r.status != 200 {
					return fmt.Errorf("queues: %d %s", r.status, r.body)
				}
				return nil
			})
			pushesBefore, itemsBefore := pushesIn.Load(), itemsIn.Load()
			runtime.GC()
			baseRSS := processRSS(t)

			var peakRSS atomic.Int64
			var peakConns atomic.Int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					if rss := processRSS(t); rss > peakRSS.Load() {
						peakRSS.Store(rss)
					}
					if c := int64(connectionsTo(t, cellPort)); c > peakConns.Load() {
						peakConns.Store(c)
					}
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			var (
				wg              sync.WaitGroup
				mu              sync.Mutex
				refused, hungUp int
				slowest         time.Duration
				unexpected      []string
			)
			for range load.pushes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					defer func() {
						_ = conn.(*net.TCPConn).SetLinger(0)
						_ = conn.Close()
					}()
					start := time.Now()
					go func() { _, _ = conn.Write(request) }()
					// An answer before the cell's (3 s) is a refusal; none
					// is a push at the cell, which the client leaves.
					_ = conn.SetReadDeadline(time.Now().Add(2500 * time.Millisecond))
					resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						hungUp++
						return
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					slowest = max(slowest, time.Since(start))
					if resp.StatusCode != 503 || !strings.Contains(string(answer), `"code":"exchange_capacity"`) || resp.Header.Get("Retry-After") == "" {
						unexpected = append(unexpected, fmt.Sprintf("%d %s (Retry-After %q)", resp.StatusCode, answer, resp.Header.Get("Retry-After")))
						return
					}
					refused++
				}()
			}
			wg.Wait()
			// The hung-up pushes run on to the cell's answer.
			time.Sleep(3 * time.Second)
			close(stop)
			<-sampled
			reached := int(pushesIn.Load() - pushesBefore)
			t.Logf("%s: %d pushes reached the cell, %d were refused (the slowest refusal took %v); the gateway's RSS peaked %.0f MiB above its %.0f MiB start; at most %d connections to the cell",
				load.name, reached, refused, slowest.Round(time.Millisecond), float64(peakRSS.Load()-baseRSS)/(1<<20), float64(baseRSS)/(1<<20), peakConns.Load())
			if len(unexpected) > 0 {
				t.Fatalf("answers other than 503 exchange_capacity: %v", unexpected)
			}
			// A client whose body was still on its way when it hung up (a
			// loaded machine) reached nothing: reached ≤ hungUp.
			if reached > hungUp || hungUp+refused != load.pushes {
				t.Fatalf("%d pushes reached the cell, %d clients got no answer and hung up, %d were refused, of %d", reached, hungUp, refused, load.pushes)
			}
			if reached == 0 || reached > load.maxForwarded {
				t.Fatalf("%d pushes were in flight at once, want 1 to %d (the cluster's share)", reached, load.maxForwarded)
			}
			if got := itemsIn.Load() - itemsBefore; got != int64(reached*load.items) {
				t.Fatalf("the cell took %d messages, want %d", got, reached*load.items)
			}
			outcomes = append(outcomes, outcome{slug: slug, billed: int64(reached * load.items)})
		})
	}
	time.Sleep(time.Second)
	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}
	stopped = true
	// Only the pushes that reached the cell are billed: a refusal bills
	// nothing.
	for _, o := range outcomes {
		id := cp.scalar(`SELECT id::text FROM queen_proxy.clusters WHERE slug = $1`, o.slug)
		if _, msgs, _ := cp.usageDetail(id, "push"); msgs != o.billed {
			t.Errorf("%s: usage_minutes bills %d pushed messages, want the %d that reached the cell", o.slug, msgs, o.billed)
		}
	}
}
