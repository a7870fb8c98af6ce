package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/freeport"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

// env is everything one benchmark run starts: the binaries, the upstream,
// the database and the two Caddy processes.
type env struct {
	dir        string // work directory: binaries, Caddyfiles, logs, spool
	moduleRoot string
	gomaxprocs int

	broker   *proc        // nil when the upstream is the operator's own (-upstream)
	front    *http.Server // the batch modes' upstream, in front of the fake broker (front.go)
	bare     *proc
	gateway  *proc
	pg       *pgserver.Server
	dbURL    string
	pool     *pgxpool.Pool
	cellKey  string // the cell secret the broker requires
	clusters []benchCluster

	// upstreamAddr is the upstream's host:port: the fake broker's, or the
	// one -upstream names.
	upstreamAddr string

	brokerPort, barePort, gatewayPort, metricsPort int
	bareAdmin, gatewayAdmin                        int // Caddy admin endpoints (for pprof)
}

// benchCluster is one seeded cluster and its API key.
type benchCluster struct {
	id, slug, tenant, key string
}

const (
	baseDomain = "bench.test"
	dbName     = "queengate_bench"
)

// proc is a child process with its log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop asks the process to exit (SIGINT: Caddy shuts down gracefully and
// the queen app drains its meter) and kills it after grace.
func (p *proc) stop(grace time.Duration) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %v; killed", p.name, grace)
	}
}

// start runs a binary from the work directory with its output in a log
// file; the child dies with the benchmark (Pdeathsig).
func (e *env) start(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(e.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bin := filepath.Join(e.dir, strings.SplitN(name, "-", 2)[0])
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.dir
	cmd.Stdout, cmd.Stderr = f, f
	xdg := filepath.Join(e.dir, "xdg-"+name)
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+xdg, "XDG_CONFIG_HOME="+xdg)
	if e.gomaxprocs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(e.gomaxprocs))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitHTTP polls url (with Host host) until it answers want, the process
// exits, or a minute passes.
func waitHTTP(p *proc, url, host string, want int) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); its log %s ends:\n%s", p.name, p.err, p.log, tailFile(p.log, 20))
		default:
		}
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s did not answer %d within a minute (last: %s); log %s", p.name, url, want, last, p.log)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// build compiles the gateway (the same binary `go build ./cmd/caddy`
// gives) and the fake broker into the work directory.
func (e *env) build(ctx context.Context) error {
	for _, b := range []struct{ out, pkg string }{{"caddy", "./cmd/caddy"}, {"fakebroker", "./cmd/fakebroker"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(e.dir, b.out), b.pkg)
		cmd.Dir = e.moduleRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}

func findModuleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (run from the repository): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// setup builds, starts the upstream and PostgreSQL, seeds the clusters and
// starts both Caddy processes.
func setup(ctx context.Context, o options) (*env, error) {
	root, err := findModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "queengate-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, moduleRoot: root, gomaxprocs: o.gomaxprocs}
	ok := false
	defer func() {
		if !ok {
			e.close(o.keep)
		}
	}()
	logf("work directory %s", dir)
	logf("building ./cmd/caddy and ./cmd/fakebroker ...")
	if err := e.build(ctx); err != nil {
		return nil, err
	}
	for _, p := range []*int{&e.brokerPort, &e.barePort, &e.gatewayPort, &e.metricsPort, &e.bareAdmin, &e.gatewayAdmin} {
		if *p, err = freeport.Pick(); err != nil {
			return nil, err
		}
	}

	if o.upstream != "" {
		if err := e.useUpstream(o.upstream, o.upstreamSecret); err != nil {
			return nil, err
		}
	} else {
		// The upstream: the fake broker, requiring the cell secret and the
		// tenant header like a tenancy-enabled broker, without its request
		// log and dropping messages an autoAck pop completes, so it stays
		// fast.
		e.cellKey = randomToken("cell_")
		e.upstreamAddr = fmt.Sprintf("127.0.0.1:%d", e.brokerPort)
		e.broker, err = e.start("fakebroker", "-listen", e.upstreamAddr,
			// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
			// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
			"-name", "bench-cell", "-require-tenant", "-token", e.cellKey, "-no-request-log", "-discard-completed")
		if err != nil {
			return nil, err
		}
		if err := waitHTTP(e.broker, "http://"+e.upstreamAddr+"/health", "", 200); err != nil {
			return nil, err
		}
		if o.mode == "batch" {
			var addr string
			if e.front, addr, err = startBatchFront(e.upstreamAddr); err != nil {
				return nil, err
			}
			logf("batch front %s answers the batch workloads in front of the fake broker", addr)
			e.upstreamAddr = addr
		}
	}

	logf("starting PostgreSQL (pg_stat_statements preloaded) ...")
	e.pg, err = pgserver.Start(ctx, pgserver.Options{Settings: map[string]string{
		"shared_preload_libraries":   "pg_stat_statements",
		"pg_stat_statements.track":   "top",
		"pg_stat_statements.max":     "1000",
		"track_activity_query_size":  "4096",
		"pg_stat_statements.save":    "off",
		"log_min_duration_statement": "-1",
	}})
	if err != nil {
		return nil, err
	}
	if err := e.pg.CreateDatabase(ctx, dbName); err != nil {
		return nil, err
	}
	e.dbURL = e.pg.URL(dbName)
	if err := e.seed(ctx, o.clusters); err != nil {
		return nil, err
	}

	if err := retryTakenPort([]*int{&e.barePort, &e.bareAdmin}, e.startBare); err != nil {
		return nil, err
	}
	startGateway := func() error { return e.startGateway(o.parked) }
	if err := retryTakenPort([]*int{&e.gatewayPort, &e.gatewayAdmin, &e.metricsPort}, startGateway); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// retryTakenPort runs start, which listens on ports freeport.Pick picked, and
// runs it again on new ones when one of them was taken meanwhile: the
// kernel may hand a port freeport.Pick gave back to the next listener that
// asks for any (the batch front, PostgreSQL) before start binds it.
func retryTakenPort(ports []*int, start func() error) error {
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		logf("a port picked for it was taken meanwhile; starting it again on others")
		for _, p := range ports {
			if *p, err = freeport.Pick(); err != nil {
				return err
			}
		}
	}
}

func randomToken(prefix string) string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	return prefix + base64.RawURLEncoding.EncodeToString(raw)
}

// seed applies the migrations and provisions, through the control-plane
// SQL functions, one cell (the fake broker, with its secret), a tenant and
// n clusters on the pro plan with limits no benchmark reaches (finite, so
// the buckets and caps do their work), each with a full-scope API key.
// Against an operator's upstream every cluster gets a cell of its own (all
// at that address): a broker without tenancy serves one cluster per cell
// (docs/isolation.md), and one with tenancy serves them either way.
func (e *env) seed(ctx context.Context, n int) error {
	pool, err := pgxpool.New(ctx, e.dbURL)
	if err != nil {
		return err
	}
	e.pool = pool
	if _, err := migrations.Apply(ctx, pool); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	var cellID, tenantID string
	addCell := func(slug string) error {
		var secret any
		if e.cellKey != "" {
			secret = e.cellKey
		}
		if err := pool.QueryRow(ctx, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, cell_secret)
			VALUES ($1, 'local', $2, 'shared', $3) RETURNING id::text`,
			slug, "http://"+e.upstreamAddr, secret).Scan(&cellID); err != nil {
			return fmt.Errorf("seed cell: %w", err)
		}
		return nil
	}
	if err := addCell("bench-cell"); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.create_tenant('bench', 'Bench Tenant')::text`).Scan(&tenantID); err != nil {
		return fmt.Errorf("seed tenant: %w", err)
	}
	const huge = 1_000_000_000
	overrides := fmt.Sprintf(`{"max_req_per_sec":%[1]d,"req_burst":%[1]d,"max_msgs_per_sec":%[1]d,"msgs_burst":%[1]d,
		"max_queues":%[1]d,"max_partitions_per_queue":%[1]d,"max_parked_pops":%[1]d,"max_batch_items":%[1]d,
		"max_payload_bytes":%[1]d,"max_retained_bytes":%[1]d}`, huge)
	for i := range n {
		if e.broker == nil && i > 0 {
			if err := addCell(fmt.Sprintf("bench-cell-%d", i+1)); err != nil {
				return err
			}
		}
		c := benchCluster{slug: fmt.Sprintf("bench%d", i+1)}
		if err := pool.QueryRow(ctx, `SELECT queen_proxy.create_cluster($1::uuid, $2, 'pro', $3::uuid)::text`,
			tenantID, c.slug, cellID).Scan(&c.id); err != nil {
			return fmt.Errorf("seed cluster: %w", err)
		}
		if err := pool.QueryRow(ctx, `SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE id = $1::uuid`, c.id).Scan(&c.tenant); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `SELECT queen_proxy.set_limit_override($1::uuid, $2::jsonb)`, c.id, overrides); err != nil {
			return fmt.Errorf("limit override: %w", err)
		}
		c.key = randomToken("qk_bench_")
		if _, err := pool.Exec(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, 'bench', $2,
			ARRAY['produce','consume','read','admin'])`, c.id, tenancy.HashAPIKey(c.key)); err != nil {
			return fmt.Errorf("seed api key: %w", err)
		}
		e.clusters = append(e.clusters, c)
	}
	return nil
}

// startBare starts Caddy's bare reverse_proxy to the upstream, with the
// same transport settings the queen_gateway directive gives its proxy
// (HTTP/1.1 keep-alive, the Host set to the upstream).
func (e *env) startBare() error {
	cfg := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	http_port %d
	default_bind 127.0.0.1
}
http:// {
	reverse_proxy %s {
		header_up Host {upstream_hostport}
		transport http {
			versions 1.1
		}
	}
}
`, e.bareAdmin, e.barePort, e.upstreamAddr)
	path := filepath.Join(e.dir, "Caddyfile.bare")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	var err error
	e.bare, err = e.start("caddy-bare", "run", "--config", path, "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	return waitHTTP(e.bare, fmt.Sprintf("http://127.0.0.1:%d/health", e.barePort), "", 200)
}

// startGateway starts the full queengate chain: API keys, buckets,
// admission, metering with its spool, the real database.
func (e *env) startGateway(parked int) error {
	cfg := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	queen {
		database_url %s
		base_domain %s
		spool_dir %s
		cell_max_parked %d
	}
}
http:// {
	queen_gateway
}
http://127.0.0.1:%d {
	metrics
}
`, e.gatewayAdmin, e.gatewayPort, e.dbURL, baseDomain, filepath.Join(e.dir, "spool"), max(parked+1000, 5000), e.metricsPort)
	path := filepath.Join(e.dir, "Caddyfile.queengate")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	var err error
	e.gateway, err = e.start("caddy-queengate", "run", "--config", path, "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	return waitHTTP(e.gateway, fmt.Sprintf("http://127.0.0.1:%d/readyz", e.gatewayPort), "x."+baseDomain, 200)
}

// close stops everything and removes the work directory unless keep.
func (e *env) close(keep bool) {
	for _, p := range []*proc{e.gateway, e.bare, e.broker} {
		if p == nil {
			continue
		}
		if p != nil {
			if err := p.stop(15 * time.Second); err != nil {
				logf("%v", err)
			}
		}
	}
	if e.front != nil {
		_ = e.front.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.pg != nil {
		_ = e.pg.Close()
	}
	if keep {
		logf("kept %s", e.dir)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// procStat is what /proc says about one process.
type procStat struct {
	cpu     time.Duration // user + system
	rssKB   int64
	hwmKB   int64
	threads int
	fds     int
}

// clockTick is USER_HZ, 100 on every Linux the benchmark runs on.
const clockTick = 10 * time.Millisecond

func readProc(pid int) (procStat, error) {
	var s procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name may hold spaces: fields start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return s, errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s, errors.New("short /proc stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpu = time.Duration(utime+stime) * clockTick
	st, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer st.Close()
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			s.rssKB = n
		case "VmHWM":
			s.hwmKB = n
		case "Threads":
			s.threads = int(n)
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.fds = len(ents)
	}
	return s, nil
}

// metric reads one unlabelled value from the gateway's metrics endpoint.
func (e *env) metric(name string) (float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.metricsPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// useUpstream points the benchmark at an operator's broker: it must answer
// GET /health with 200.
func (e *env) useUpstream(raw, secret string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("-upstream %q: want http://host:port (the load generator speaks plain HTTP/1.1)", raw)
	}
	e.upstreamAddr = u.Host
	if u.Port() == "" {
		e.upstreamAddr = net.JoinHostPort(u.Hostname(), "80")
	}
	e.cellKey = secret
	resp, err := http.Get("http://" + e.upstreamAddr + "/health")
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("-upstream: GET /health answered %d, want 200", resp.StatusCode)
	}
	logf("upstream %s (the operator's broker; its CPU is not measured)", e.upstreamAddr)
	return nil
}
