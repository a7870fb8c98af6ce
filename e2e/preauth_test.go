package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/buildversion"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// Before authentication, through a real Caddy: no body is read for a
// caller the gateway does not know, and what it reads for one it does
// (the carve-out, the failure guard, readiness detail) is bounded.

// zeroChunk is what every large body is written from: one shared buffer,
// so that the clients allocate nothing per connection or per byte.
var zeroChunk = make([]byte, 64<<10)

// rawExchange sends a request head, then up to bodyBytes of body while it
// reads the answer, over its own TCP connection: the answer is read
// whatever happens to the body (the gateway may answer and close before
// taking it). It returns the status and how many body bytes the
// connection accepted before the answer had been read.
func rawExchange(t *testing.T, port int, head string, bodyBytes int64) (status int, sent int64) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	go func() {
		for written.Load() < bodyBytes {
			n := min(int64(len(zeroChunk)), bodyBytes-written.Load())
			m, err := conn.Write(zeroChunk[:n])
			written.Add(int64(m))
			if err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	sent = written.Load()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, sent
}

// heapAllocated is every byte the process has allocated on the heap
// since it started (the gateway runs in this process).
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestUnauthenticatedBodiesAreNeverRead sends, for every route class, 12
// concurrent 15 MiB bodies without a valid credential (none, or an
// unknown key) and checks that the gateway read none of them.
//
// The measure is the bytes the process allocated on the heap meanwhile
// (runtime/metrics /gc/heap/allocs:bytes, cumulative): a gateway that read
// even one of these bodies would allocate at least its 15 MiB, while
// every allocation of answering 156 refusals is a few megabytes. Unlike
// RSS or the live heap, a cumulative count does not depend on when the
// garbage collector ran or how the machine's other work delayed this
// process, so it is the same on a loaded 2-core machine as on an idle
// one; the clients write from one shared buffer, so they add nothing per
// byte sent. How many bytes each connection accepted before its answer is
// logged: the kernel's socket buffers take some, the gateway's server
// discards at most 256 KiB before closing the connection.
func TestUnauthenticatedBodiesAreNeverRead(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "preauth-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("preauth-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("preauth"), "preauth", cell)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	broker.ResetRequests()

	const perClass, bodyBytes = 12, 15 << 20
	routes := []struct{ class, method, path string }{
		{"produce", "POST", "/api/v1/push"},
		{"produce (transaction)", "POST", "/api/v1/transaction"},
		{"consume", "POST", "/api/v1/ack"},
		{"queue admin", "POST", "/api/v1/configure"},
		{"queue admin (DLQ replay)", "POST", "/api/v1/dlq/7/replay"},
		{"gated mixed (KV batch, the carve-out)", "POST", "/api/v1/kv"},
		{"gated grow (KV put)", "PUT", "/api/v1/kv/ns/k"},
		{"gated mixed (streams cycle)", "POST", "/streams/v1/cycle"},
		{"gated grow (ephemeral push)", "POST", "/api/v1/ephemeral/push"},
		{"gated (traces)", "POST", "/api/v1/traces"},
		{"read", "GET", "/api/v1/resources/queues"},
		{"operator", "POST", "/api/v1/system/maintenance"},
		{"blocked", "POST", "/api/v1/locks"},
	}
	var (
		mu       sync.Mutex
		maxSent  int64
		statuses = map[int]int{}
	)
	before := heapAllocated()
	for _, rt := range routes {
		var wg sync.WaitGroup
		for i := range perClass {
			wg.Add(1)
			go func() {
				defer wg.Done()
				auth := ""
				if i%2 == 1 {
					auth = fmt.Sprintf("Authorization: Bearer qk_test_unknownkey%d\r\n", i)
				}
				head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s.eu1.example.test\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					rt.method, rt.path, cl.slug, auth, bodyBytes)
				status, sent := rawExchange(t, port, head, bodyBytes)
				mu.Lock()
				defer mu.Unlock()
				statuses[status]++
				maxSent = max(maxSent, sent)
				if status != 401 && status != 429 && status != 404 {
					t.Errorf("%s without a valid credential: %d", rt.class, status)
				}
			}()
		}
		wg.Wait()
	}
	grew := heapAllocated() - before
	total := int64(len(routes)) * perClass * bodyBytes
	t.Logf("%d requests, %d MiB of bodies offered; answers %v; the heap allocated %.1f MiB meanwhile; "+
		"at most %.1f MiB accepted by one connection before its answer",
		len(routes)*perClass, total>>20, statuses, float64(grew)/(1<<20), float64(maxSent)/(1<<20))
	if grew >= bodyBytes {
		t.Fatalf("the process allocated %d bytes while refusing anonymous bodies: at least one %d-byte body was read", grew, bodyBytes)
	}
	if got := forwarded(broker); len(got) != 0 {
		t.Fatalf("%d anonymous requests reached the cell", len(got))
	}
}

// kvCell is a fake broker (the Rust tenancy model) whose POST /api/v1/kv
// answers {"results":[]} whatever the tenant's grants, logging it like
// every other request: these tests are about the gateway's bounds, not the
// broker's grant (TestCarveOutNeedsTheBrokersGrant is).
func kvCell(t *testing.T, name string) (*fakebroker.Broker, string) {
	t.Helper()
	b := fakebroker.New(fakebroker.Options{Name: name, Tenancy: fakebroker.TenancyRust})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/kv" {
			b.ServeHTTP(w, r)
			return
		}
		b.ServeHTTP(httptest.NewRecorder(), r) // logs it
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[]}`)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = b.Close() })
	return b, srv.URL
}

// TestCarveOutBoundedMeteredAndFraming: the reserved key spaces are
// bounded and billed; malformed chunked framing is 400.
func TestCarveOutBoundedMeteredAndFraming(t *testing.T) {
	broker, cellURL := kvCell(t, "carve-cell")
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("carve-cell", cellURL, "")
	cl := cp.cluster(cp.tenant("carve"), "carve", cell)
	_, key := cp.key(cl.id)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_batch_items": 4, "max_payload_bytes": 32}')`, cl.id)
	port := freePort(t)
	startMeteredGateway(t, port)
	c := client(port)
	kv := func(body string) response {
		return do(t, c, "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/kv", cl.slug, port), key, body)
	}
	ops := func(n int, value string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"ns":"queen-kafka","op":"put","key":"qk:g/t/%d","value":%s}`, i, value)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	cellGot(broker)

	ok := ops(3, `{"offset":7}`)
	if r := kv(ok); r.status != 200 {
		t.Fatalf("a carve-out batch within the bounds: %d %s", r.status, r.body)
	}
	reachedCell(t, broker, "/api/v1/kv", ok)
	refusedUnseen(t, broker, kv(ops(5, "1")), 413, "payload_too_large", "batch of 5 operations exceeds max_batch_items (4)")
	refusedUnseen(t, broker, kv(ops(1, `"`+strings.Repeat("x", 40)+`"`)), 413, "payload_too_large",
		"operation 0: value 42 bytes exceeds max_payload_bytes (32)")
	big := `[{"ns":"queen-kafka","op":"getMany","keys":["qk:` + strings.Repeat("k", 1<<20) + `"]}]`
	refusedUnseen(t, broker, kv(big), 413, "payload_too_large",
		fmt.Sprintf("a reserved key space batch of %d bytes exceeds its cap of %d bytes", len(big), 1<<20))

	// Malformed chunked framing, with a valid credential: 400, unseen.
	for _, framing := range []string{"zz\r\n{}\r\n0\r\n\r\n", "5\r\n{\"a\":1}\r\n0\r\n\r\n", "2\r\n{}"} {
		head := fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: %s.eu1.example.test\r\nAuthorization: Bearer %s\r\n"+
			"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%s", cl.slug, key, framing)
		status := func() int {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, head)
			if framing == "2\r\n{}" {
				_ = conn.(*net.TCPConn).CloseWrite() // cut short
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("framing %q: %v", framing, err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}()
		if status != 400 {
			t.Fatalf("malformed chunked framing %q: %d, want 400", framing, status)
		}
		if got := cellGot(broker); len(got) != 0 {
			t.Fatalf("malformed framing reached the cell: %v", got)
		}
	}

	// Billed as read, one message per operation of what the cell took.
	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "read"); reqs != 1 || msgs != 3 {
		t.Fatalf("usage_minutes read: %d requests, %d messages; want 1 and 3", reqs, msgs)
	}
}

// TestFailureGuardAndReadinessDetail: one tenant's bad keys from an
// address do not lock another tenant's valid key out of it; /readyz shows
// its detail only to loopback and on the probe listener.
func TestFailureGuardAndReadinessDetail(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "guard-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("guard-cell", broker.URL(), "")
	good := cp.cluster(cp.tenant("guard-good"), "guard-good", cell)
	_, goodKey := cp.key(good.id)
	bad := cp.cluster(cp.tenant("guard-bad"), "guard-bad", cell)
	port, probePort := freePort(t), freePort(t)
	startGateway(t, fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	servers {
		trusted_proxies static 127.0.0.1/32
	}
	log {
		level ERROR
	}
	queen {
		database_url %s
		base_domain eu1.example.test
	}
}
http:// {
	queen_gateway {
		auth_failures 0.001 3
	}
}
http://:%d {
	queen_gateway {
		probes
	}
}
`, port, pgtest.URL(t), probePort))
	c := client(port)
	url := func(slug string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port)
	}
	if r := do(t, c, "GET", url(good.slug), goodKey, ""); r.status != 200 {
		t.Fatalf("the valid key: %d %s", r.status, r.body)
	}
	cellGot(broker)

	t.Run("the failure guard never refuses a valid key", func(t *testing.T) {
		for i := range 3 {
			assertRefusal(t, do(t, c, "GET", url(bad.slug), fmt.Sprintf("qk_test_guess%d", i), ""), 401, "unauthorized")
		}
		assertRefusal(t, do(t, c, "GET", url(bad.slug), "qk_test_guess3", ""), 429, "rate_limited")
		for range 3 {
			if r := do(t, c, "GET", url(good.slug), goodKey, ""); r.status != 200 {
				t.Fatalf("another tenant's valid key from the spent address: %d %s", r.status, r.body)
			}
		}
		assertRefusal(t, do(t, c, "GET", url(bad.slug), "qk_test_guess4", ""), 429, "rate_limited")
		if got := cellGot(broker); len(got) != 3 {
			t.Fatalf("the cell got %v, want the valid key's 3 requests only", got)
		}
	})

	t.Run("readyz detail only to loopback and on the probe listener", func(t *testing.T) {
		readyz := func(p int, forwardedFor string) (int, map[string]any) {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s.eu1.example.test:%d/readyz", good.slug, p), nil)
			if forwardedFor != "" {
				req.Header.Set("X-Forwarded-For", forwardedFor)
			}
			resp, err := client(p).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, response{body: b}.json(t)
		}
		if status, body := readyz(port, ""); status != 200 || body["database"] != "ok" || body["status"] != "ready" ||
			body["version"] != buildversion.Read().String() {
			t.Fatalf("loopback /readyz: %d %v (want version %q)", status, body, buildversion.Read())
		}
		for range 5 {
			if status, body := readyz(port, "203.0.113.5"); status != 200 || len(body) != 1 || body["status"] != "ready" {
				t.Fatalf("remote /readyz on a cluster host: %d %v, want the verdict alone", status, body)
			}
		}
		if status, body := readyz(probePort, "203.0.113.5"); status != 200 || body["database"] != "ok" || body["cell_isolation"] == nil ||
			body["version"] != buildversion.Read().String() {
			t.Fatalf("remote /readyz on the probe listener: %d %v", status, body)
		}
		if got := cellGot(broker); len(got) != 0 {
			t.Fatalf("/readyz reached the cell: %v", got)
		}
	})
}

// TestUnauthenticatedRefusalWaitsForNoBody: a request without a valid
// credential that announces a body and never sends it is answered 401 at
// once, and its connection is closed without the body being read; one
// that announces a small body it does send is answered at once too.
func TestUnauthenticatedRefusalWaitsForNoBody(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "nobody-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cl := cp.cluster(cp.tenant("nobody"), "nobody", cp.cell("nobody-cell", broker.URL(), ""))
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	for _, tc := range []struct{ name, auth string }{
		{"no credential", ""},
		{"unknown key", "Authorization: Bearer qk_test_unknownkey\r\n"},
	} {
		for _, length := range []int{100, 100 << 10, 10 << 20} {
			t.Run(fmt.Sprintf("%s, %d bytes announced", tc.name, length), func(t *testing.T) {
				conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				start := time.Now()
				// Generous: an answer that waits for the body never comes.
				_ = conn.SetDeadline(start.Add(20 * time.Second))
				if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: %s.eu1.example.test\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					cl.slug, tc.auth, length); err != nil {
					t.Fatal(err)
				}
				rd := bufio.NewReader(conn)
				resp, err := http.ReadResponse(rd, nil)
				if err != nil {
					t.Fatalf("no answer while the body is withheld (%v): %v", time.Since(start), err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401", resp.StatusCode)
				}
				if _, err := rd.ReadByte(); err != io.EOF {
					t.Fatalf("after the refusal the connection gave %v, want it closed (EOF)", err)
				}
				t.Logf("answered 401 after %v and closed", time.Since(start).Round(time.Millisecond))
			})
		}
	}
	if got := forwarded(broker); len(got) != 0 {
		t.Fatalf("%d anonymous requests reached the cell", len(got))
	}
}
