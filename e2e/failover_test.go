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
	t       *testing.T
	name    string
	port    int
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// startGroupGateway runs the gateway binary as member name of group
// "cell-a" against dbURL.
func startGroupGateway(t *testing.T, name string, port int, dbURL string) *groupGateway {
	t.Helper()
	return startGroupGatewayIn(t, name, port, dbURL, t.TempDir())
}

// startGroupGatewayIn is startGroupGateway with its home (and so its spool
// directory) given, so that a gateway can be started again on what a killed
// one left.
func startGroupGatewayIn(t *testing.T, name string, port int, dbURL, home string) *groupGateway {
	t.Helper()
	cfg := gatewayCaddyfile(port, dbURL,
		"leader_group cell-a\n\t\tgateway_name "+name+"\n\t\tspool_dir "+filepath.Join(home, "spool")+"\n\t\tdatabase_timeout 1s", "")
	cfgPath := filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBinary(t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(withoutDatabaseURL(os.Environ()), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home)
	g := &groupGateway{t: t, name: name, port: port, cmd: cmd, logPath: filepath.Join(home, fmt.Sprintf("caddy-%d.log", time.Now().UnixNano())), done: make(chan struct{})}
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
	stop      chan struct{}
	stopped   chan struct{}
}

func runSteadyLoad(t *testing.T, urls map[string]string, host, key string) *steadyLoad {
	l := &steadyLoad{served: map[string]int{}, stop: make(chan struct{}), stopped: make(chan struct{})}
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

func (l *steadyLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.stopped
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

// TestLeaderCutOffFromTheDatabase: when only the leader loses the
// database, the standby takes over once the lease expired, both serve for
// as long as the old leader cannot reach the database, and it steps down
// as soon as it can.
func TestLeaderCutOffFromTheDatabase(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	broker := startBroker(t, fakebroker.Options{Name: "cut-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("cut"), "cut", cp.cell("cut-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)

	proxy := startTCPProxy(t, dbURL)
	a := startGroupGateway(t, "gw-a", freePort(t), proxy.databaseURL)
	a.awaitReady(http.StatusOK)
	b := startGroupGateway(t, "gw-b", freePort(t), dbURL)
	b.awaitReady(http.StatusServiceUnavailable)
	read := func(g *groupGateway) int {
		return do(t, client(g.port), "GET", fmt.Sprintf("http://cut.eu1.example.test:%d/api/v1/resources/queues", g.port), key, "").status
	}
	if s := read(a); s != http.StatusOK {
		t.Fatalf("leader read %d", s)
	}

	proxy.cut()
	cutAt := time.Now()
	b.awaitReady(http.StatusOK)
	t.Logf("standby took over %v after the leader lost the database", time.Since(cutAt).Round(time.Millisecond))
	if s := read(a); s != http.StatusOK {
		t.Fatalf("the cut-off leader stopped serving known clusters: %d", s)
	}
	if s := read(b); s != http.StatusOK {
		t.Fatalf("the new leader does not serve: %d", s)
	}

	proxy.restore()
	restored := time.Now()
	a.awaitReady(http.StatusServiceUnavailable)
	t.Logf("the old leader stepped down %v after it reached the database again", time.Since(restored).Round(time.Millisecond))
	if s := read(a); s != http.StatusServiceUnavailable {
		t.Fatalf("the old leader still serves: %d", s)
	}
	if _, body := a.ready(); !containsAll(body, "leader: gw-b") {
		t.Fatalf("old leader /readyz: %s", body)
	}
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
