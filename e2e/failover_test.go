package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// groupGateway is one real gateway process of a leader group.
type groupGateway struct {
	t        *testing.T
	name     string
	port     int
	peerPort int
	cmd      *exec.Cmd
	logPath  string
	done     chan struct{}
}

// groupPeerSecret is the peer secret of the test group.
const groupPeerSecret = "e2e-peer-secret-of-group-cell-a-0123456789"

// startGroupGateway runs the gateway binary as member name of group
// "cell-a" against dbURL, answering its peers on a port of its own.
func startGroupGateway(t *testing.T, name string, port int, dbURL string) *groupGateway {
	t.Helper()
	return startGroupGatewayIn(t, name, port, dbURL, t.TempDir())
}

// startGroupGatewayIn is startGroupGateway with its home (and so its spool
// directory) given, so that a gateway can be started again on what a killed
// one left.
func startGroupGatewayIn(t *testing.T, name string, port int, dbURL, home string) *groupGateway {
	t.Helper()
	return startGroupGatewayWith(t, name, port, dbURL, home, "", "")
}

// startGroupGatewayWith is startGroupGatewayIn with extra lines for the
// queen app and extra sites: a member restarted with a new configuration.
func startGroupGatewayWith(t *testing.T, name string, port int, dbURL, home, appOptions, sites string) *groupGateway {
	t.Helper()
	return startGroupGatewayGlobals(t, name, port, dbURL, home, "", appOptions, sites)
}

// startGroupGatewayGlobals is startGroupGatewayWith with extra global
// options (lines of Caddy's global block, outside the queen app).
func startGroupGatewayGlobals(t *testing.T, name string, port int, dbURL, home, globals, appOptions, sites string) *groupGateway {
	t.Helper()
	peerPort := freePort(t)
	cfg := gatewayCaddyfile(port, dbURL,
		"leader_group cell-a\n\t\tleader_group_members gw-a gw-b\n\t\tgateway_name "+name+"\n\t\tspool_dir "+filepath.Join(home, "spool")+"\n\t\tdatabase_timeout 1s"+
			fmt.Sprintf("\n\t\tpeer_listen 127.0.0.1:%d\n\t\tpeer_secret %s\n\t\t%s", peerPort, groupPeerSecret, appOptions), "") + sites
	cfg = strings.Replace(cfg, "\tqueen {\n", globals+"\n\tqueen {\n", 1)
	cfgPath := filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBinary(t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(withoutDatabaseURL(os.Environ()), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home)
	g := &groupGateway{t: t, name: name, port: port, peerPort: peerPort, cmd: cmd, logPath: filepath.Join(home, fmt.Sprintf("caddy-%d.log", time.Now().UnixNano())), done: make(chan struct{})}
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

func (g *groupGateway) signal(s os.Signal) {
	select {
	case <-g.done:
	default:
		_ = g.cmd.Process.Signal(s)
	}
}

// ready returns the gateway's /readyz status and role detail (0 when it
// does not answer).
func (g *groupGateway) ready() (int, string) {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", g.port))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (g *groupGateway) awaitReady(want int) {
	g.t.Helper()
	eventually(g.t, 30*time.Second, func() error {
		if status, body := g.ready(); status != want {
			return fmt.Errorf("gateway %s /readyz %d %s, want %d", g.name, status, body, want)
		}
		return nil
	})
}

// steadyLoad sends one read every 5 ms to whichever gateway answers,
// switching on any failure, as a load balancer with instant health checks
// would, and records when requests succeeded.
type steadyLoad struct {
	mu        sync.Mutex
	successes []time.Time
	failures  int
	served    map[string]int
	loadRun
}

// loadRun is the life of a test's request loop: stop asks it to end,
// stopped is closed once it has.
type loadRun struct {
	stop    chan struct{}
	stopped chan struct{}
}

func newLoadRun() loadRun { return loadRun{stop: make(chan struct{}), stopped: make(chan struct{})} }

// halt ends the loop and waits for it; calling it again is a no-op.
func (l *loadRun) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.stopped
}

func runSteadyLoad(t *testing.T, urls map[string]string, host, key string) *steadyLoad {
	l := &steadyLoad{served: map[string]int{}, loadRun: newLoadRun()}
	names := make([]string, 0, len(urls))
	for n := range urls {
		names = append(names, n)
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 4}}
	go func() {
		defer close(l.stopped)
		target := 0
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			name := names[target%len(names)]
			req, _ := http.NewRequest("GET", urls[name], nil)
			req.Host = host
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			l.mu.Lock()
			if ok {
				l.successes = append(l.successes, time.Now())
				l.served[name]++
			} else {
				l.failures++
				target++
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.halt)
	return l
}

// gapAfter is the longest time without a successful request from since
// on, and the failures counted after it.
func (l *steadyLoad) gapAfter(since time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	prev := since
	for _, s := range l.successes {
		if s.Before(since) {
			continue
		}
		longest = max(longest, s.Sub(prev))
		prev = s
	}
	return longest, l.failures
}

func (l *steadyLoad) snapshot() (successes, failures int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.successes), l.failures
}

// TestStandbyTakesOverUnderLoad: two gateway processes form a group; the
// standby refuses before anything else, takes over within 3 s of the
// leader's SIGKILL under steady load, and a graceful stop hands over at
// once.
func TestStandbyTakesOverUnderLoad(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "ha-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("ha"), "ha", cp.cell("ha-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)

	a := startGroupGateway(t, "gw-a", freePort(t), dbURL)
	a.awaitReady(http.StatusOK)
	b := startGroupGateway(t, "gw-b", freePort(t), dbURL)
	b.awaitReady(http.StatusServiceUnavailable)
	// The standby is not ready from its start; it names the leader once
	// its first attempt at the lease has seen it.
	eventually(t, 5*time.Second, func() error {
		if _, body := b.ready(); !containsAll(body, "standby of group cell-a as gw-b", "leader: gw-a") {
			return fmt.Errorf("standby /readyz: %s", body)
		}
		return nil
	})
	url := func(g *groupGateway) string {
		return fmt.Sprintf("http://127.0.0.1:%d/api/v1/resources/queues", g.port)
	}

	// The standby's /healthz is 200; a data-plane request gets 503
	// gateway_standby with Retry-After: 1 and reaches nothing.
	if r := do(t, client(b.port), "GET", fmt.Sprintf("http://127.0.0.1:%d/healthz", b.port), "", ""); r.status != http.StatusOK {
		t.Fatalf("standby /healthz %d", r.status)
	}
	before := len(forwarded(broker))
	r := do(t, client(b.port), "POST", fmt.Sprintf("http://ha.eu1.example.test:%d/api/v1/push", b.port), key, `{"items":[{"queue":"q","payload":1}]}`)
	assertRefusal(t, r, http.StatusServiceUnavailable, "gateway_standby")
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("standby Retry-After %q", r.header.Get("Retry-After"))
	}
	if len(forwarded(broker)) != before {
		t.Fatal("the standby forwarded a request")
	}

	urls := map[string]string{"gw-a": url(a), "gw-b": url(b)}
	load := runSteadyLoad(t, urls, "ha.eu1.example.test", key)
	time.Sleep(time.Second)
	okBefore, failedBefore := load.snapshot()
	if okBefore < 50 {
		t.Fatalf("only %d requests succeeded before the kill (%d failed)", okBefore, failedBefore)
	}

	// SIGKILL the leader: no lease release, no flush.
	killed := time.Now()
	a.signal(syscall.SIGKILL)
	<-a.done
	eventually(t, 10*time.Second, func() error {
		if status, _ := b.ready(); status != http.StatusOK {
			return fmt.Errorf("standby not leading yet")
		}
		return nil
	})
	time.Sleep(time.Second)
	gap, failed := load.gapAfter(killed)
	t.Logf("SIGKILL of the leader: longest gap without a served request %v, %d failed requests", gap.Round(time.Millisecond), failed-failedBefore)
	if gap > 3*time.Second {
		t.Fatalf("the group went %v without serving after the leader was killed, want at most 3s", gap)
	}

	// The killed gateway comes back as the standby; a graceful stop of the
	// leader hands over at once.
	a2 := startGroupGateway(t, "gw-a", a.port, dbURL)
	a2.awaitReady(http.StatusServiceUnavailable)
	// A standby takes a free lease only once it has reached the database
	// for leader_lease_ttl/2 without a break.
	time.Sleep(1500 * time.Millisecond)
	_, failedBefore = load.snapshot()
	stopped := time.Now()
	b.signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, func() error {
		if status, _ := a2.ready(); status != http.StatusOK {
			return fmt.Errorf("gw-a not leading yet")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	load.halt()
	gap, failed = load.gapAfter(stopped)
	t.Logf("graceful stop of the leader: longest gap %v, %d failed requests", gap.Round(time.Millisecond), failed-failedBefore)
	if gap > time.Second {
		t.Fatalf("a graceful stop left the group %v without a server, want under 1s (the lease is released)", gap)
	}
	epoch := cp.scalar(`SELECT epoch::text || ' ' || holder FROM queen_proxy.gateway_leases WHERE group_name = 'cell-a'`)
	if epoch != "3 gw-a" {
		t.Fatalf("lease epoch and holder %q, want 3 gw-a (a, then b, then a)", epoch)
	}
}

// servedLog records, for requests sent at once to every member of a group,
// which member served each (any answer but 503 gateway_standby: a 429 is a
// leader's decision too), with when it was sent and answered.
type servedLog struct {
	mu      sync.Mutex
	records []servedRecord
	loadRun
}

type servedRecord struct {
	gateway    string
	sent, recv time.Time
}

func probeServing(t *testing.T, members []*groupGateway, host, key string) *servedLog {
	l := &servedLog{loadRun: newLoadRun()}
	c := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext}}
	var wg sync.WaitGroup
	for _, g := range members {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/api/v1/resources/queues", g.port), nil)
				req.Host = host
				req.Header.Set("Authorization", "Bearer "+key)
				sent := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "gateway_standby") {
					continue
				}
				l.mu.Lock()
				l.records = append(l.records, servedRecord{g.name, sent, time.Now()})
				l.mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); close(l.stopped) }()
	t.Cleanup(l.halt)
	return l
}

// between returns the records sent in [from, to).
func (l *servedLog) between(from, to time.Time) []servedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []servedRecord
	for _, r := range l.records {
		if !r.sent.Before(from) && r.sent.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// handedOver checks that within records, leadership went from old to
// new at most once and never back: no request served by old was sent
// after one served by new had been answered (that would prove old
// admitted a request after new did), and no member but those two served.
// It returns the last request old served and the first new served.
func handedOver(t *testing.T, records []servedRecord, old, new string) (lastOld, firstNew servedRecord) {
	t.Helper()
	for _, r := range records {
		switch r.gateway {
		case old:
			if r.sent.After(lastOld.sent) {
				lastOld = r
			}
		case new:
			if firstNew.recv.IsZero() || r.recv.Before(firstNew.recv) {
				firstNew = r
			}
		default:
			t.Fatalf("%s served while leadership was to go from %s to %s", r.gateway, old, new)
		}
	}
	if !lastOld.sent.IsZero() && !firstNew.recv.IsZero() && lastOld.sent.After(firstNew.recv) {
		t.Fatalf("two members served at once: %s served a request sent %v after %s had served one",
			old, lastOld.sent.Sub(firstNew.recv).Round(time.Millisecond), new)
	}
	return lastOld, firstNew
}

// TestLeaderCutOffFromTheDatabase: each member reaches PostgreSQL through
// a TCP proxy of its own. When the leader's is cut while both stay up, the
// leader stops serving once its lease ran out by its own clock, the
// standby serves only after that, and never do both (a rate limit's burst
// is served once across the group, not once per member); when the leader
// reaches the database again it stays standby. When the new leader is
// frozen (SIGSTOP: its peer address accepts connections and never
// answers), the other takes over within the documented time, and the
// frozen one, thawed, does not serve again.
func TestLeaderCutOffFromTheDatabase(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cut-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cell := cp.cell("cut-cell", broker.URL(), "")
	tn := cp.tenant("cut")
	cl := cp.cluster(tn, "cut", cell)
	_, key := cp.key(cl.id)
	narrow := cp.cluster(tn, "cut-narrow", cell)
	_, narrowKey := cp.key(narrow.id)
	const burst = 10
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, jsonb_build_object('max_req_per_sec', 1, 'req_burst', $2::int))`, narrow.id, burst)

	proxyA, proxyB := startTCPProxy(t, dbURL), startTCPProxy(t, dbURL)
	a := startGroupGateway(t, "gw-a", freePort(t), proxyA.databaseURL)
	a.awaitReady(http.StatusOK)
	b := startGroupGateway(t, "gw-b", freePort(t), proxyB.databaseURL)
	b.awaitReady(http.StatusServiceUnavailable)
	eventually(t, 5*time.Second, func() error {
		if _, body := b.ready(); !containsAll(body, "leader: gw-a") {
			return fmt.Errorf("standby /readyz: %s", body)
		}
		return nil
	})
	// The peer endpoint is not on the port tenants reach.
	for _, host := range []string{"127.0.0.1", "cut.eu1.example.test"} {
		r := do(t, client(a.port), "GET", fmt.Sprintf("http://%s:%d/queengate/peer/v2/lease?nonce=%s", host, a.port, strings.Repeat("ab", 16)), key, "")
		if r.status == http.StatusOK || strings.Contains(string(r.body), "proof") {
			t.Fatalf("the tenant port answered the peer endpoint on host %s: %d %s", host, r.status, r.body)
		}
	}
	readNarrow := func(g *groupGateway) int {
		return do(t, client(g.port), "GET", fmt.Sprintf("http://cut-narrow.eu1.example.test:%d/api/v1/resources/queues", g.port), narrowKey, "").status
	}
	// The leader knows the narrow cluster and its key before it is cut off
	// (it would refuse a cluster it never saw during an outage anyway).
	if s := readNarrow(a); s != http.StatusOK {
		t.Fatalf("leader read of the narrow cluster %d", s)
	}
	served := probeServing(t, []*groupGateway{a, b}, "cut.eu1.example.test", key)
	time.Sleep(500 * time.Millisecond)

	// The lease expires behind the live leader's back, over and over (as
	// if the database's clock jumped): the standby asks the leader, which
	// answers that it leads, and does not take over.
	var withheld string
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		cp.exec(`UPDATE queen_proxy.gateway_leases SET expires_at = now() - interval '1 millisecond' WHERE group_name = 'cell-a'`)
		if status, body := b.ready(); status != http.StatusServiceUnavailable {
			t.Fatalf("the standby took over from a leader that answers: %d %s", status, body)
		} else if strings.Contains(body, "not taking over") {
			withheld = body
		}
	}
	if withheld == "" || !containsAll(withheld, "gw-a answers on its peer address that it leads") {
		t.Fatalf("the standby's /readyz never said it withheld a takeover (last: %s)", withheld)
	}
	if got := cp.scalar(`SELECT epoch::text || ' ' || holder FROM queen_proxy.gateway_leases WHERE group_name = 'cell-a'`); got != "1 gw-a" {
		t.Fatalf("lease %q after the expiries, want 1 gw-a", got)
	}

	proxyA.cut()
	cutAt := time.Now()
	b.awaitReady(http.StatusOK)
	t.Logf("standby took over %v after the leader lost the database", time.Since(cutAt).Round(time.Millisecond))
	status, body := a.ready()
	if status != http.StatusServiceUnavailable || !containsAll(body, "not serving", "ran out without a renewal") {
		t.Fatalf("cut-off leader /readyz %d %s", status, body)
	}

	// The burst, over both members at once: served once.
	var ok, limited, standby int
	for i := range 4 * burst {
		switch s := readNarrow([]*groupGateway{a, b}[i%2]); s {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
		case http.StatusServiceUnavailable:
			standby++
		default:
			t.Fatalf("narrow read %d", s)
		}
	}
	t.Logf("burst of %d over both members: %d served, %d limited, %d refused as standby", burst, ok, limited, standby)
	if ok < burst || ok > burst+2 || standby != 2*burst {
		t.Fatalf("%d served and %d refused as standby of %d; want the burst of %d served once (by the leader, plus refill) and every request to the cut-off member refused",
			ok, standby, 4*burst, burst)
	}

	proxyA.restore()
	restored := time.Now()
	eventually(t, 10*time.Second, func() error {
		if _, body := a.ready(); !containsAll(body, "standby of group cell-a as gw-a", "leader: gw-b") {
			return fmt.Errorf("old leader /readyz: %s", body)
		}
		return nil
	})
	t.Logf("the old leader saw the new one %v after it reached the database again", time.Since(restored).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	stoppedAt := time.Now()
	lastA, firstB := handedOver(t, served.between(time.Time{}, stoppedAt), "gw-a", "gw-b")
	if lastA.sent.IsZero() || firstB.recv.IsZero() {
		t.Fatalf("served by gw-a until %v, by gw-b from %v: the probe saw no handover", lastA.sent, firstB.recv)
	}
	if bound := 2 * time.Second; lastA.sent.Sub(cutAt) > bound {
		t.Fatalf("the cut-off leader served %v after the cut, past its lease of %v", lastA.sent.Sub(cutAt), bound)
	}
	t.Logf("gw-a served until %v after the cut, gw-b from %v", lastA.sent.Sub(cutAt).Round(time.Millisecond), firstB.recv.Sub(cutAt).Round(time.Millisecond))

	// Freeze the new leader: its peer address takes connections and never
	// answers, so a's ask times out and it takes over.
	b.signal(syscall.SIGSTOP)
	frozen := time.Now()
	a.awaitReady(http.StatusOK)
	took := time.Since(frozen)
	t.Logf("takeover from a frozen leader after %v", took.Round(time.Millisecond))
	// leader_lease_ttl + a poll + the bounded ask of the peer address.
	if limit := 2*time.Second + 200*time.Millisecond + 400*time.Millisecond + 400*time.Millisecond; took > limit {
		t.Fatalf("takeover from a frozen leader took %v, want at most %v", took, limit)
	}
	b.signal(syscall.SIGCONT)
	thawed := time.Now()
	time.Sleep(time.Second)
	served.halt()
	handedOver(t, served.between(stoppedAt, time.Now()), "gw-b", "gw-a")
	for _, r := range served.between(thawed, time.Now()) {
		if r.gateway == "gw-b" {
			t.Fatalf("the thawed leader served a request %v after it was thawed", r.sent.Sub(thawed))
		}
	}
	eventually(t, 5*time.Second, func() error {
		if _, body := b.ready(); !containsAll(body, "standby of group cell-a as gw-b", "leader: gw-a") {
			return fmt.Errorf("thawed leader /readyz: %s", body)
		}
		return nil
	})

	// The database is down for both members: b cannot take the lease, so
	// it grants a more time at every heartbeat, and a serves on past its
	// lease as a lone gateway would, while b stays standby.
	served = probeServing(t, []*groupGateway{a, b}, "cut.eu1.example.test", key)
	time.Sleep(300 * time.Millisecond)
	proxyA.cut()
	proxyB.cut()
	bothCut := time.Now()
	const outage = 6 * time.Second
	for time.Since(bothCut) < outage {
		if status, body := b.ready(); status != http.StatusServiceUnavailable {
			t.Fatalf("the standby serves %v into the outage: %d %s", time.Since(bothCut), status, body)
		}
		if status, body := a.ready(); status != http.StatusOK {
			t.Fatalf("the leader stopped %v into the outage: %d %s", time.Since(bothCut).Round(time.Millisecond), status, body)
		} else if time.Since(bothCut) > 3*time.Second && !containsAll(body, "serving on the grants of the other members") {
			t.Fatalf("the leader's /readyz %v into the outage: %s", time.Since(bothCut), body)
		}
		if r := do(t, client(a.port), "GET", fmt.Sprintf("http://cut.eu1.example.test:%d/api/v1/resources/queues", a.port), key, ""); r.status != http.StatusOK && r.status != http.StatusTooManyRequests {
			t.Fatalf("the leader's read %v into the outage: %d %s", time.Since(bothCut).Round(time.Millisecond), r.status, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	proxyA.restore()
	proxyB.restore()
	time.Sleep(time.Second)
	served.halt()
	records := served.between(time.Time{}, time.Now())
	var lastA2 time.Time
	for _, r := range records {
		if r.gateway != "gw-a" {
			t.Fatalf("%s served %v into the outage of the database for both", r.gateway, r.sent.Sub(bothCut))
		}
		if r.sent.After(lastA2) {
			lastA2 = r.sent
		}
	}
	if gap := servedGap(records, bothCut, bothCut.Add(outage)); gap > 500*time.Millisecond {
		t.Fatalf("the leader stopped serving for %v during the outage of the database for both", gap)
	}
	t.Logf("both cut off: gw-a served %d requests, the last %v after the cut; gw-b none", len(records), lastA2.Sub(bothCut).Round(time.Millisecond))
	if status, body := a.ready(); status != http.StatusOK || containsAll(body, "grants") {
		t.Fatalf("the leader once the database is back: %d %s", status, body)
	}
	if got := cp.scalar(`SELECT epoch::text || ' ' || holder FROM queen_proxy.gateway_leases WHERE group_name = 'cell-a'`); got != "3 gw-a" {
		t.Fatalf("lease %q after the outage, want 3 gw-a", got)
	}
}

// servedGap is the longest time in [from, to) without a served request.
func servedGap(records []servedRecord, from, to time.Time) time.Duration {
	var longest time.Duration
	last := from
	for _, r := range records {
		if r.sent.Before(from) || !r.sent.Before(to) {
			continue
		}
		longest = max(longest, r.sent.Sub(last))
		if r.sent.After(last) {
			last = r.sent
		}
	}
	return max(longest, to.Sub(last))
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// tcpProxy forwards a port to the database server and can cut every
// connection and refuse new ones, as a network partition would.
type tcpProxy struct {
	t           *testing.T
	addr        string
	target      string
	databaseURL string
	mu          sync.Mutex
	l           net.Listener
	conns       []net.Conn
}

func startTCPProxy(t *testing.T, dbURL string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, target: u.Host, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	u.Host = p.addr
	p.databaseURL = u.String()
	p.restore()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) restore() {
	p.t.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
