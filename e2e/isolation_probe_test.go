package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/tenancy"
)

// mentionsProbe is an independent, deliberately plain reading of what a
// cell received: does any of it name the probe's reserved prefix?
func mentionsProbe(r fakebroker.Request) bool {
	all := strings.ToLower(r.Path + "?" + r.RawQuery + " " + string(r.Body))
	return strings.Contains(all, "isolation-probe") || strings.Contains(all, `\u`) || strings.Contains(all, "%")
}

// TestProbeNamesNeverReachTheCell: whatever spelling a tenant uses for a
// probe name (path, query, body; case, percent and \u escapes), the
// gateway answers 400 and the cell receives nothing, on a broker with
// tenancy and on one without.
func TestProbeNamesNeverReachTheCell(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts fakebroker.Options
	}{{"scoped", rustCell}, {"unscoped", fakebroker.Options{IgnoreTenant: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			s := newIsolationSetup(t, "iso6"+mode.name[:1], mode.opts)
			startGateway(t, s.caddyfile(t, ""))
			name := tenancy.ProbeQueuePrefix + "00112233445566778899aabbccddeeff"
			spellings := []struct{ method, path, body string }{
				{"DELETE", "/api/v1/resources/queues/" + name, ""},
				{"GET", "/api/v1/resources/queues/" + strings.ToUpper(name), ""},
				{"DELETE", "/api/v1/resources/queues/%71ueengate-isolation-probe-00112233445566778899aabbccddeeff", ""},
				{"DELETE", "/api/v1/resources/queues/queengate%2disolation%2Dprobe%2d1", ""},
				{"GET", "/api/v1/pop?namespace=" + tenancy.ProbeQueuePrefix + "ns-0011&autoAck=true", ""},
				{"GET", "/api/v1/messages?queue=%51UEENGATE-ISOLATION-PROBE-1", ""},
				{"POST", "/api/v1/configure", `{"queue":"` + name + `","options":{"leaseTime":30}}`},
				{"POST", "/api/v1/configure", `{"queue":"\u0071ueengate-isolation-probe-1","options":{"leaseTime":30}}`},
				{"POST", "/api/v1/configure", `{"queue":"orders","namespace":"QUEENGATE\u002DISOLATION\u002dPROBE\u002Dns","options":{}}`},
				{"POST", "/api/v1/push", `{"items":[{"queue":"` + jsonEscapeEvery(name) + `","payload":{"n":1}}]}`},
			}
			before := len(forwarded(s.broker))
			for _, sp := range spellings {
				for _, who := range []struct {
					cl  cluster
					key string
				}{{s.acme, s.acmeKey}, {s.globex, s.gKey}} {
					r := do(t, s.c, sp.method, s.url(who.cl, sp.path), who.key, sp.body)
					if mode.name == "unscoped" && who.cl == s.globex && r.status == http.StatusServiceUnavailable {
						continue // refused for isolation first; nothing reaches the cell either way
					}
					assertRefusal(t, r, http.StatusBadRequest, "bad_request")
					if !strings.Contains(string(r.body), "reserved for the gateway's isolation probe") {
						t.Fatalf("%s %s: the refusal does not say why: %s", sp.method, sp.path, r.body)
					}
				}
			}
			after := forwarded(s.broker)
			if len(after) != before {
				t.Fatalf("the refusals sent %d requests to the cell", len(after)-before)
			}
			for _, r := range after {
				if mentionsProbe(r) {
					t.Fatalf("the cell received a client request naming a probe name: %s %s?%s %s", r.Method, r.Path, r.RawQuery, r.Body)
				}
			}
			// An ordinary request still goes through.
			// (201 on a Rust broker, 200 on 0.15.1.)
			if r := do(t, s.c, "POST", s.url(s.acme, "/api/v1/push"), s.acmeKey, `{"items":[{"queue":"queengate-isolation","payload":1}]}`); r.status != http.StatusOK && r.status != http.StatusCreated {
				t.Fatalf("ordinary push: %d %s", r.status, r.body)
			}
		})
	}
}

func jsonEscapeEvery(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&b, `\u%04X`, c)
	}
	return b.String()
}

// slowProbeCell is the fake broker behind a proxy that holds each of the
// probe's own requests (no gateway request id, naming the probe prefix)
// for delay, so that the probe's queue stays in the namespace long enough
// for an attacker's listing to find it.
// probes counts the probes' configure requests.
func slowProbeCell(t *testing.T, b *fakebroker.Broker, delay time.Duration, probes *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hold := false
		if r.Header.Get("X-Queen-Request-Id") == "" && r.Method != http.MethodDelete {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			hold = strings.Contains(r.URL.Path+string(body), tenancy.ProbeQueuePrefix)
			if hold && r.URL.Path == "/api/v1/configure" {
				probes.Add(1)
			}
		}
		b.ServeHTTP(w, r)
		if hold {
			time.Sleep(delay) // after the broker acted: the queue stays meanwhile
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

var probeQueueName = regexp.MustCompile(`queengate-isolation-probe-[0-9a-f]{32}`)

// TestProbeRaceNeverFlipsAnUnscopedCell is the attack on the probe, end to
// end:
// on a broker without tenancy, the cell's keeper (a valid key, through
// the gateway) lists the probe's queue and tries to delete it in a tight
// loop while gateways start and probe; a second attacker deletes it
// directly on the broker, as a tenant that could name it would have. The
// verdict never becomes scoped, no second cluster is ever served, and no
// client request naming the probe reaches the cell.
func TestProbeRaceNeverFlipsAnUnscopedCell(t *testing.T) {
	s := newIsolationSetup(t, "iso7", fakebroker.Options{IgnoreTenant: true})
	var probes atomic.Int64
	s.cp.exec(`UPDATE queen_proxy.cells SET base_url = $2 WHERE id = $1::uuid`, s.cellID, slowProbeCell(t, s.broker, 60*time.Millisecond, &probes))

	var (
		stop                     = make(chan struct{})
		wg                       sync.WaitGroup
		seen, refused, leaked    atomic.Int64
		directDeletes, listings  atomic.Int64
		scopedSeen, globexServed atomic.Value
		leakedAnswer             atomic.Value
	)
	send := func(method, url, key, body string) (int, string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := s.c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	// The keeper, through the gateway.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running() {
			// Within the pro plan's 50 requests a second, so that the
			// listing keeps up with the probes.
			time.Sleep(25 * time.Millisecond)
			status, body := send("GET", s.url(s.acme, "/api/v1/resources/queues"), s.acmeKey, "")
			if status != http.StatusOK {
				time.Sleep(5 * time.Millisecond) // the gateway is restarting
				continue
			}
			listings.Add(1)
			for _, name := range probeQueueName.FindAllString(body, -1) {
				seen.Add(1)
				for _, try := range []struct{ method, path, body string }{
					{"DELETE", "/api/v1/resources/queues/" + name, ""},
					{"DELETE", "/api/v1/resources/queues/%71" + name[1:], ""},
					{"POST", "/api/v1/configure", `{"queue":"\u0071` + name[1:] + `","options":{"leaseTime":30}}`},
				} {
					// 429: the keeper's request bucket ran dry first; refused
					// before the body is read, and never forwarded either.
					if st, answer := send(try.method, s.url(s.acme, try.path), s.acmeKey, try.body); st == http.StatusBadRequest {
						refused.Add(1)
					} else if st != 0 && st != http.StatusTooManyRequests {
						leaked.Add(1)
						leakedAnswer.Store(fmt.Sprintf("%s %s: %d %s", try.method, try.path, st, answer))
					}
				}
			}
		}
	}()
	// A tenant that could reach the broker's namespace directly.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running() {
			resp, err := http.Get(s.broker.URL() + "/api/v1/resources/queues")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, name := range probeQueueName.FindAllString(string(b), -1) {
				if (name[len(name)-1]-'0')%2 == 1 {
					continue // leave half of them to the keeper's strikes
				}
				req, _ := http.NewRequest("DELETE", s.broker.URL()+"/api/v1/resources/queues/"+name, nil)
				if r, err := http.DefaultClient.Do(req); err == nil {
					r.Body.Close()
					directDeletes.Add(1)
				}
			}
		}
	}()
	// The watcher: the recorded verdict, and globex's requests.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running() {
			var v string
			if err := s.cp.pool.QueryRow(context.Background(), `SELECT tenant_scoping FROM queen_proxy.cells WHERE id = $1::uuid`, s.cellID).Scan(&v); err == nil && v == "scoped" {
				scopedSeen.Store("cells.tenant_scoping = scoped")
			}
			if st, body := send("GET", s.url(s.globex, "/api/v1/resources/queues"), s.gKey, ""); st == http.StatusOK {
				globexServed.Store(body)
			}
		}
	}()

	for i := 0; i < 5; i++ {
		// A changed setting is a new backend: a gateway start, which probes.
		before := probes.Load()
		startGateway(t, s.caddyfile(t, fmt.Sprintf("isolation_probe_interval %dms", 300+i)))
		// At least two probes of this gateway, however slow the machine.
		eventually(t, 30*time.Second, func() error {
			if n := probes.Load() - before; n < 2 {
				return fmt.Errorf("%d probes since start %d", n, i)
			}
			return nil
		})
		ready := do(t, s.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port), "", "")
		if strings.Contains(string(ready.body), "iso7-cell: scoped") {
			t.Fatalf("start %d: /readyz says scoped: %s", i, ready.body)
		}
	}
	// On a loaded machine the keeper's listings can miss every probe
	// queue's short life in those starts: the last gateway goes on
	// probing until the keeper has struck at one (checked below).
	for deadline := time.Now().Add(time.Minute); (seen.Load() == 0 || refused.Load() == 0) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	if v := scopedSeen.Load(); v != nil {
		t.Fatalf("the verdict became scoped on an unscoped broker: %v", v)
	}
	if v := globexServed.Load(); v != nil {
		t.Fatalf("a second cluster was served on an unscoped broker: %v", v)
	}
	if leaked.Load() != 0 {
		t.Fatalf("%d of the keeper's requests naming a probe queue were not refused, e.g. %v", leaked.Load(), leakedAnswer.Load())
	}
	if seen.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("the attack never found a probe queue to strike at (seen %d, refused %d; %d probes, %d listings ok)", seen.Load(), refused.Load(), probes.Load(), listings.Load())
	}
	for _, r := range forwarded(s.broker) {
		if strings.Contains(strings.ToLower(r.Path+r.RawQuery+string(r.Body)), "isolation-probe") {
			t.Fatalf("a client request naming a probe queue reached the cell: %s %s %s", r.Method, r.Path, r.Body)
		}
	}
	if v := s.verdict(); v == "scoped" {
		t.Fatalf("final verdict %q", v)
	}
	t.Logf("%d probes; keeper saw %d probe queues in %d listings, %d strikes refused; %d direct deletes on the broker", probes.Load(), seen.Load(), listings.Load(), refused.Load(), directDeletes.Load())
}
