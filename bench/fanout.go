package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/freeport"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/webhook"
)

// The fan-out benchmark runs a fleet of real gateway processes (the same
// binary as the other modes, one Caddy each) on one control-plane database
// and measures what the fleet costs that database and how fast an operator's
// key revocation reaches every member. A process per gateway, rather than
// many caches in this process, keeps every connection and statement a real
// gateway makes (the listener, the pool, the webhook dispatcher, the
// heartbeat) in the figures: an idle gateway needs about 60 MB, so 100 fit
// in memory, and idle they need little CPU.

// fanoutOptions are the flags of -mode fanout.
type fanoutOptions struct {
	gateways    int
	revocations int
	churn       int           // key changes a minute in the churn phase
	window      time.Duration // statement and connection window of each phase
	poll        time.Duration // pause between two probes of one gateway
}

// The default settings of every fleet gateway, which bound its
// connections: the pool, the LISTEN connection and the webhook
// dispatcher's pool (workers + 1). No gateway of the fleet is in a leader
// group or exports usage, whose pools would add 2 each.
const (
	defaultPoolMaxConns   = 16
	fanoutConnsPerGateway = defaultPoolMaxConns + 1 + webhook.DefaultWorkers + 1
)

// operatorRole is the role the benchmark's operator commands connect as,
// so that pg_stat_statements (which counts per role) tells the gateways'
// statements from the operator's.
const operatorRole = "bench_operator"

// fleetGateway is one gateway process of the fleet.
type fleetGateway struct {
	proc   *proc
	port   int
	client *http.Client
	// unconfirmed counts the probes refused because the gateway could not
	// read the cluster in time.
	unconfirmed atomic.Int64
}

// fanoutEnv is what -mode fanout starts.
type fanoutEnv struct {
	*env
	fleet    []*fleetGateway
	operator *pgxpool.Pool // controlplane.Connect, as the operator role: revocations
	churner  *pgxpool.Pool // the same, for the churn, so revocations never queue behind it
	gwRole   string        // the role the gateways connect as
	caches   []*cacheInstance
}

// phaseResult is one phase: its statements, connections and revocations.
type phaseResult struct {
	name       string
	changes    int64         // key changes the churn made in the window
	window     time.Duration // length of the statement window
	statements int64         // by the gateways' role, in the window
	fleetCPU   time.Duration // the gateways' CPU time in the window
	pgCPU      time.Duration // PostgreSQL's
	top        []timedStatement
	// during the revocations (their warm-up probes included)
	revStatements int64
	revTop        []timedStatement
	conns         connSample // the sample with the most connections
	maxPerGW      int        // most connections one gateway held in any sample
	revocations   []revocation
	// the same revocations' reach timed in the in-process caches
	// (fanoutcaches.go)
	cacheRevocations []revocation
}

// revocation is one revoked key: when each gateway first refused it, and
// the CPU time spent from the revocation until every gateway refused it.
type revocation struct {
	perGateway []time.Duration // -1: never refused within the timeout
	cpu        cpuSplit
}

// cpuSplit is CPU time by who spent it.
type cpuSplit struct{ fleet, postgres, bench time.Duration }

func (c cpuSplit) sub(o cpuSplit) cpuSplit {
	return cpuSplit{fleet: c.fleet - o.fleet, postgres: c.postgres - o.postgres, bench: c.bench - o.bench}
}

// cpuNow reads the CPU time of the fleet, of PostgreSQL (the postmaster's
// children: each connection is a process) and of this process.
func (fe *fanoutEnv) cpuNow() (cpuSplit, error) {
	var c cpuSplit
	var err error
	if c.fleet, err = fe.fleetCPU(); err != nil {
		return c, err
	}
	if b, err := readProc(os.Getpid()); err == nil {
		c.bench = b.cpu
	}
	pidFile, err := os.ReadFile(filepath.Join(fe.pg.Dir(), "data", "postmaster.pid"))
	if err != nil {
		return c, fmt.Errorf("postgres pid: %w", err)
	}
	postmaster := strings.SplitN(string(pidFile), "\n", 2)[0]
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return c, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 13 || (f[1] != postmaster && p.Name() != postmaster) {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		c.postgres += time.Duration(utime+stime) * clockTick
	}
	return c, nil
}

func (r revocation) everywhere() (time.Duration, bool) {
	var worst time.Duration
	for _, d := range r.perGateway {
		if d < 0 {
			return 0, false
		}
		worst = max(worst, d)
	}
	return worst, true
}

// coldRevocations run before the phases, unmeasured.
const coldRevocations = 3

// revocationTimeout is how long a gateway may keep accepting a revoked key
// before the benchmark gives up on it and fails: far past the goal (1 s)
// and past the cache TTL (30 s), which would end it without any
// notification.
const revocationTimeout = 45 * time.Second

func fanoutBenchmark(ctx context.Context, o options) error {
	f := o.fanout
	if f.gateways < 1 || f.revocations < 1 || f.churn < 0 || f.window <= 0 || f.poll <= 0 {
		return errors.New("-gateways and -revocations must be at least 1, -churn at least 0, -window and -poll positive")
	}
	fe, err := setupFanout(ctx, o)
	if err != nil {
		return err
	}
	defer fe.closeFleet(o.keep)
	logf("starting %d in-process caches with their invalidation listeners ...", f.gateways)
	caches, closeCaches, err := fe.startCaches(ctx, f.gateways)
	if err != nil {
		return err
	}
	defer closeCaches()
	fe.caches = caches
	rss, err := fe.fleetRSS()
	if err != nil {
		return err
	}

	// A gateway's first requests do work of their own once (the cell's
	// probes, the cluster's first reads); the first revocations after the
	// fleet started would time that. They run first and are shown apart.
	var cold []time.Duration
	for i := range coldRevocations {
		r, err := fe.revokeOnce(ctx, f.poll)
		if err != nil {
			return fmt.Errorf("revocation %d after the start: %w", i+1, err)
		}
		d, ok := r.everywhere()
		if !ok {
			return fmt.Errorf("revocation %d after the start was not refused by every gateway within %v", i+1, revocationTimeout)
		}
		logf("revocation %d after the start (not counted): every gateway refuses it after %s", i+1, ms(d))
		cold = append(cold, d)
	}
	idle, err := fe.runPhase(ctx, "idle", 0, f)
	if err != nil {
		return err
	}
	var churn *phaseResult
	if f.churn > 0 {
		if churn, err = fe.runPhase(ctx, "churn", f.churn, f); err != nil {
			return err
		}
	}

	fmt.Printf("## Fan-out: %d gateways (one Caddy process each) on one control-plane database\n\n", f.gateways)
	fmt.Printf("- CPU: %d × %s; memory %s; load average at the end: %s\n", runtime.NumCPU(), cpuModel(), memTotal(), loadAvg())
	fmt.Printf("- gateways, the fake broker, PostgreSQL and the benchmark share these cores; gateway RSS idle: %.1f MB each on average, %.2f GB in all\n",
		rss/float64(len(fe.fleet))/1024, rss/(1<<20))
	fmt.Printf("- a revocation: `controlplane.RevokeKey` (what `caddy queen key revoke` runs) on a key every gateway holds in its cache; the clock starts before the call and stops, for each gateway, at the first answer 401 to a probe (probes every %v per gateway)\n", f.poll)
	fmt.Printf("- statements: top-level statements the gateways' role ran (pg_stat_statements, which counts each SQL function call as one), per second of the phase's %v window\n\n", f.window)
	phases := []*phaseResult{idle}
	if churn != nil {
		phases = append(phases, churn)
	}
	printFanout(phases, f.gateways, fe.fleet)
	coldText := make([]string, len(cold))
	for i, d := range cold {
		coldText[i] = ms(d)
	}
	fmt.Printf("- the first %d revocations after the fleet started, not counted above (each gateway's first requests: its cell's probes, its first reads): refused everywhere after %s\n\n",
		coldRevocations, strings.Join(coldText, ", "))
	return fanoutVerdict(phases, f.gateways)
}

// setupFanout builds, starts the fake broker and PostgreSQL, seeds the
// clusters, the operator role, and starts the fleet.
func setupFanout(ctx context.Context, o options) (*fanoutEnv, error) {
	root, err := findModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "queengate-fanout-")
	if err != nil {
		return nil, err
	}
	fe := &fanoutEnv{env: &env{dir: dir, moduleRoot: root, gomaxprocs: o.gomaxprocs}}
	ok := false
	defer func() {
		if !ok {
			fe.closeFleet(o.keep)
		}
	}()
	logf("work directory %s", dir)
	logf("building ./cmd/caddy and ./cmd/fakebroker ...")
	if err := fe.build(ctx); err != nil {
		return nil, err
	}
	if fe.brokerPort, err = freeport.Pick(); err != nil {
		return nil, err
	}
	fe.cellKey = randomToken("cell_")
	fe.upstreamAddr = fmt.Sprintf("127.0.0.1:%d", fe.brokerPort)
	fe.broker, err = fe.start("fakebroker", "-listen", fe.upstreamAddr,
		"-name", "bench-cell", "-require-tenant", "-token", fe.cellKey, "-no-request-log", "-discard-completed")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(fe.broker, "http://"+fe.upstreamAddr+"/health", "", 200); err != nil {
		return nil, err
	}
	// Room for every gateway's bound, so that the figures are what the
	// gateways open, never what the server refused.
	maxConns := o.fanout.gateways*fanoutConnsPerGateway + 50
	logf("starting PostgreSQL (pg_stat_statements preloaded, max_connections %d) ...", maxConns)
	pgDir := ""
	if o.keep {
		// Kept with the rest: the server's log says what it went through.
		pgDir = filepath.Join(dir, "pg")
		if err := os.MkdirAll(pgDir, 0o777); err != nil {
			return nil, err
		}
		// PostgreSQL runs as its own user, which must reach it.
		for _, d := range []string{dir, pgDir} {
			if err := os.Chmod(d, 0o755); err != nil {
				return nil, err
			}
		}
		if err := os.Chmod(pgDir, 0o777); err != nil {
			return nil, err
		}
	}
	fe.pg, err = pgserver.Start(ctx, pgserver.Options{Dir: pgDir, Settings: map[string]string{
		"shared_preload_libraries":   "pg_stat_statements",
		"pg_stat_statements.track":   "top",
		"pg_stat_statements.max":     "1000",
		"pg_stat_statements.save":    "off",
		"log_min_duration_statement": "-1",
		"max_connections":            strconv.Itoa(maxConns),
	}})
	if err != nil {
		return nil, err
	}
	if err := fe.pg.CreateDatabase(ctx, dbName); err != nil {
		return nil, err
	}
	fe.dbURL = fe.pg.URL(dbName)
	if err := fe.seed(ctx, o.clusters); err != nil {
		return nil, err
	}
	if err := fe.pool.QueryRow(ctx, `SELECT current_user`).Scan(&fe.gwRole); err != nil {
		return nil, err
	}
	if _, err := fe.pool.Exec(ctx, `CREATE ROLE `+operatorRole+` LOGIN SUPERUSER`); err != nil {
		return nil, fmt.Errorf("operator role: %w", err)
	}
	u, err := url.Parse(fe.dbURL)
	if err != nil {
		return nil, err
	}
	u.User = url.User(operatorRole)
	if fe.operator, err = controlplane.Connect(ctx, u.String(), 0); err != nil {
		return nil, err
	}
	if fe.churner, err = controlplane.Connect(ctx, u.String(), 0); err != nil {
		return nil, err
	}
	if err := fe.startFleet(ctx, o.fanout.gateways); err != nil {
		return nil, err
	}
	ok = true
	return fe, nil
}

// startFleet starts n gateways, a few at a time (each applies, under the
// migration lock, the migrations it finds applied, and fills its first
// caches), and waits until each is ready.
func (fe *fanoutEnv) startFleet(ctx context.Context, n int) error {
	logf("starting %d gateways ...", n)
	started := time.Now()
	fe.fleet = make([]*fleetGateway, n)
	sem := make(chan struct{}, 8)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		port, err := freeport.Pick()
		if err != nil {
			return err
		}
		// Each gateway starts, and is waited for, on a port of its own;
		// one taken meanwhile by another process starts it again on
		// another.
		start := func() error {
			cfg := fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	queen {
		database_url %s
		base_domain %s
		spool_dir %s
	}
}
http:// {
	queen_gateway
}
`, port, fe.dbURL, baseDomain, filepath.Join(fe.dir, fmt.Sprintf("spool-%03d", i)))
			path := filepath.Join(fe.dir, fmt.Sprintf("Caddyfile.gw%03d", i))
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				return err
			}
			p, err := fe.start(fmt.Sprintf("caddy-gw%03d", i), "run", "--config", path, "--adapter", "caddyfile")
			if err != nil {
				return err
			}
			fe.fleet[i] = &fleetGateway{proc: p, port: port, client: &http.Client{
				Timeout:   30 * time.Second,
				Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true},
			}}
			return waitHTTP(p, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), "x."+baseDomain, 200)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = retryTakenPort([]*int{&port}, start)
		}()
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logf("%d gateways ready in %.1f s", n, time.Since(started).Seconds())
	return nil
}

// closeFleet stops the fleet (all at once: each drains its meter) and the
// rest of the environment.
func (fe *fanoutEnv) closeFleet(keep bool) {
	var wg sync.WaitGroup
	for _, g := range fe.fleet {
		if g == nil {
			continue
		}
		wg.Go(func() {
			if err := g.proc.stop(30 * time.Second); err != nil {
				logf("%v", err)
			}
		})
	}
	wg.Wait()
	for _, p := range []*pgxpool.Pool{fe.operator, fe.churner} {
		if p != nil {
			p.Close()
		}
	}
	fe.close(keep)
}

// fleetRSS is the fleet's resident memory in kB.
func (fe *fanoutEnv) fleetRSS() (float64, error) {
	var kb int64
	for _, g := range fe.fleet {
		s, err := readProc(g.proc.pid())
		if err != nil {
			return 0, err
		}
		kb += s.rssKB
	}
	return float64(kb), nil
}

// fleetCPU is the CPU time the gateways have used since they started.
func (fe *fanoutEnv) fleetCPU() (time.Duration, error) {
	var d time.Duration
	for _, g := range fe.fleet {
		s, err := readProc(g.proc.pid())
		if err != nil {
			return 0, err
		}
		d += s.cpu
	}
	return d, nil
}

// runPhase measures one phase: with churn key changes a minute running
// (none for idle), a window of statements and connections, then the
// revocations, with the connections sampled throughout.
func (fe *fanoutEnv) runPhase(ctx context.Context, name string, churn int, f fanoutOptions) (*phaseResult, error) {
	res := &phaseResult{name: name}
	phaseCtx, stop := context.WithCancel(ctx)
	defer stop()
	var changes atomic.Int64
	var churnErr error
	var background sync.WaitGroup
	if churn > 0 {
		background.Go(func() { churnErr = fe.churn(phaseCtx, churn, &changes) })
	}
	var sampleErr error
	var sampleMu sync.Mutex
	background.Go(func() {
		for {
			s, err := fe.sampleConns(phaseCtx)
			sampleMu.Lock()
			if err != nil && phaseCtx.Err() == nil {
				sampleErr = err
			}
			if err == nil {
				if s.total > res.conns.total {
					res.conns = s
				}
				res.maxPerGW = max(res.maxPerGW, slices.Max(s.perGateway))
			}
			sampleMu.Unlock()
			select {
			case <-phaseCtx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	// Let the churn's first notifications reach the fleet before counting.
	settle := 3 * time.Second
	logf("%s: settling %v, then a %v window of statements and connections", name, settle, f.window)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	before, err := fe.statementCalls(ctx)
	if err != nil {
		return nil, err
	}
	cpuBefore, err := fe.cpuNow()
	if err != nil {
		return nil, err
	}
	changesBefore := changes.Load()
	started := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(f.window):
	}
	after, err := fe.statementCalls(ctx)
	if err != nil {
		return nil, err
	}
	cpuAfter, err := fe.cpuNow()
	if err != nil {
		return nil, err
	}
	res.fleetCPU = cpuAfter.fleet - cpuBefore.fleet
	res.pgCPU = cpuAfter.postgres - cpuBefore.postgres
	res.window = time.Since(started)
	res.changes = changes.Load() - changesBefore
	res.statements, res.top = statementDelta(before, after)
	logf("%s: %.1f statements/s by the gateways, %d key changes in the window; the fleet used %.2f cores, PostgreSQL %.2f", name,
		float64(res.statements)/res.window.Seconds(), res.changes, res.fleetCPU.Seconds()/res.window.Seconds(), res.pgCPU.Seconds()/res.window.Seconds())

	before, err = fe.statementCalls(ctx)
	if err != nil {
		return nil, err
	}
	for i := range f.revocations {
		r, err := fe.revokeOnce(ctx, f.poll)
		if err != nil {
			return nil, fmt.Errorf("%s: revocation %d: %w", name, i+1, err)
		}
		worst, ok := r.everywhere()
		logf("%s: revocation %d/%d: every gateway refuses it after %s (all: %v); CPU meanwhile: fleet %s, PostgreSQL %s, benchmark %s",
			name, i+1, f.revocations, ms(worst), ok, ms(r.cpu.fleet), ms(r.cpu.postgres), ms(r.cpu.bench))
		res.revocations = append(res.revocations, r)
	}
	if after, err = fe.statementCalls(ctx); err != nil {
		return nil, err
	}
	res.revStatements, res.revTop = statementDelta(before, after)
	for i := range f.revocations {
		r, err := fe.revokeInCaches(ctx, fe.caches)
		if err != nil {
			return nil, fmt.Errorf("%s: revocation %d in the caches: %w", name, i+1, err)
		}
		worst, ok := r.everywhere()
		logf("%s: revocation %d/%d: every in-process cache dropped it after %s (all: %v)", name, i+1, f.revocations, ms(worst), ok)
		res.cacheRevocations = append(res.cacheRevocations, r)
	}
	stop()
	background.Wait()
	if churnErr != nil {
		return nil, fmt.Errorf("%s: churn: %w", name, churnErr)
	}
	if sampleErr != nil {
		return nil, fmt.Errorf("%s: connections: %w", name, sampleErr)
	}
	return res, nil
}

// churn makes perMinute key changes a minute, evenly spaced, over every
// bench cluster in turn: each tick either issues a key or revokes the
// oldest the churn issued, alternately, through the operator's commands.
// A change slower than the spacing does not hold up the next (two run at
// once at most, the operator's pool), so the rate is kept.
func (fe *fanoutEnv) churn(ctx context.Context, perMinute int, changes *atomic.Int64) error {
	tick := time.NewTicker(time.Minute / time.Duration(perMinute))
	defer tick.Stop()
	var mu sync.Mutex
	var live []string
	var firstErr error
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		mu.Lock()
		err := firstErr
		var revoke string
		if i%2 == 1 && len(live) > 0 {
			revoke, live = live[0], live[1:]
		}
		mu.Unlock()
		if err != nil {
			return err
		}
		wg.Go(func() {
			var err error
			if revoke != "" {
				_, err = controlplane.RevokeKey(ctx, fe.churner, revoke)
			} else {
				c := fe.clusters[i%len(fe.clusters)]
				var k controlplane.IssuedKey
				if k, err = controlplane.CreateKey(ctx, fe.churner, controlplane.NewKey{Cluster: c.id, Name: "churn", Scopes: []string{"produce"}}); err == nil {
					mu.Lock()
					live = append(live, k.ID)
					mu.Unlock()
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
				}
				return
			}
			changes.Add(1)
		})
	}
}

// probe answers 403 for a live read-only key (a push needs produce) and
// 401 once the key is revoked: neither reaches the cell or bills anything.
func (g *fleetGateway) probe(ctx context.Context, slug, key string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/api/v1/push", g.port),
		strings.NewReader(`{"items":[{"queue":"fanout","payload":{}}]}`))
	if err != nil {
		return 0, err
	}
	req.Host = slug + "." + baseDomain
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusForbidden, http.StatusUnauthorized:
	case http.StatusMisdirectedRequest, http.StatusServiceUnavailable:
		// The gateway could not confirm the cluster in time (its lookup
		// timed out: database_timeout) and refused, failing closed. It
		// says nothing of the key: ask again.
		g.unconfirmed.Add(1)
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("answered %d %s", resp.StatusCode, body)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// revokeOnce issues a read-only key, has every gateway cache it (each
// answers 403), revokes it and times each gateway's first 401.
func (fe *fanoutEnv) revokeOnce(ctx context.Context, poll time.Duration) (revocation, error) {
	c := fe.clusters[0]
	k, err := controlplane.CreateKey(ctx, fe.operator, controlplane.NewKey{Cluster: c.id, Name: "fanout", Scopes: []string{"read"}})
	if err != nil {
		return revocation{}, err
	}
	// A few at a time: the first request a gateway sees of a key asks the
	// database, and a hundred at once on two cores is a stampede the
	// benchmark would make, not the fleet.
	warm := make([]error, len(fe.fleet))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, g := range fe.fleet {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			code, err := g.probe(ctx, c.slug, k.Key)
			for tries := 0; err == nil && code != http.StatusForbidden && code != http.StatusUnauthorized && tries < 30; tries++ {
				time.Sleep(time.Second)
				code, err = g.probe(ctx, c.slug, k.Key)
			}
			if err != nil {
				err = fmt.Errorf("gateway %d: %w", i, err)
			} else if code != http.StatusForbidden {
				err = fmt.Errorf("gateway %d answered %d to a live read-only key's push, want 403", i, code)
			}
			warm[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(warm...); err != nil {
		return revocation{}, err
	}
	r := revocation{perGateway: make([]time.Duration, len(fe.fleet))}
	cpuBefore, err := fe.cpuNow()
	if err != nil {
		return r, err
	}
	start := time.Now()
	if _, err := controlplane.RevokeKey(ctx, fe.operator, k.ID); err != nil {
		return r, err
	}
	probeErrs := make([]error, len(fe.fleet))
	for i, g := range fe.fleet {
		wg.Go(func() {
			r.perGateway[i] = -1
			for time.Since(start) < revocationTimeout {
				code, err := g.probe(ctx, c.slug, k.Key)
				if err != nil {
					probeErrs[i] = fmt.Errorf("gateway %d: %w", i, err)
					return
				}
				switch code {
				case http.StatusUnauthorized:
					r.perGateway[i] = time.Since(start)
					return
				}
				select {
				case <-ctx.Done():
					probeErrs[i] = ctx.Err()
					return
				case <-time.After(poll):
				}
			}
		})
	}
	wg.Wait()
	cpuAfter, err := fe.cpuNow()
	if err != nil {
		return r, err
	}
	r.cpu = cpuAfter.sub(cpuBefore)
	return r, errors.Join(probeErrs...)
}

// statementCalls is pg_stat_statements' count of each statement the
// gateways' role ran in the bench database (the benchmark's own reads of
// the statistics, under the same role, left out).
func (fe *fanoutEnv) statementCalls(ctx context.Context) (map[string]timedStatement, error) {
	rows, err := fe.pool.Query(ctx, `SELECT queryid::text, calls, rows, total_exec_time, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND userid = (SELECT oid FROM pg_roles WHERE rolname = $1)
		  AND query NOT ILIKE '%pg_stat%'`, fe.gwRole)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := map[string]timedStatement{}
	for rows.Next() {
		var id string
		var s timedStatement
		if err := rows.Scan(&id, &s.calls, &s.rows, &s.execMS, &s.query); err != nil {
			return nil, err
		}
		out[id] = s
	}
	return out, rows.Err()
}

// timedStatement is a statement with the time PostgreSQL spent running it.
type timedStatement struct {
	statement
	execMS float64
}

// statementDelta is what ran between two readings, most frequent first.
func statementDelta(before, after map[string]timedStatement) (int64, []timedStatement) {
	var total int64
	var top []timedStatement
	for id, a := range after {
		d := timedStatement{statement: statement{calls: a.calls - before[id].calls, rows: a.rows - before[id].rows, query: a.query},
			execMS: a.execMS - before[id].execMS}
		if d.calls <= 0 {
			continue
		}
		total += d.calls
		top = append(top, d)
	}
	slices.SortFunc(top, func(a, b timedStatement) int { return int(b.calls - a.calls) })
	return total, top
}

// connSample is the database connections held at one moment.
type connSample struct {
	total      int
	perGateway []int
	byApp      map[string]int // application_name -> connections, over the fleet
}

// sampleConns counts each gateway's established TCP connections to the
// database (from /proc: its sockets, and the kernel's table of loopback
// connections to PostgreSQL's port), and names each one by the
// application_name its backend reports.
func (fe *fanoutEnv) sampleConns(ctx context.Context) (connSample, error) {
	s := connSample{perGateway: make([]int, len(fe.fleet)), byApp: map[string]int{}}
	byPort, err := tcpToPort(fe.pg.Port())
	if err != nil {
		return s, err
	}
	apps := map[int]string{}
	rows, err := fe.pool.Query(ctx, `SELECT client_port, coalesce(application_name, '') FROM pg_stat_activity
		WHERE datname = current_database() AND client_port IS NOT NULL`)
	if err != nil {
		return s, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	for rows.Next() {
		var port int
		var app string
		if err := rows.Scan(&port, &app); err != nil {
			rows.Close()
			return s, err
		}
		apps[port] = app
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, err
	}
	for i, g := range fe.fleet {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.proc.pid()))
		if err != nil {
			return s, err
		}
		for _, ent := range ents {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", g.proc.pid(), ent.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			port, ok := byPort[strings.TrimSuffix(inode, "]")]
			if !ok {
				continue
			}
			s.perGateway[i]++
			s.total++
			app := apps[port]
			if app == "" {
				app = "(not in pg_stat_activity yet)"
			}
			s.byApp[app]++
		}
	}
	return s, nil
}

// tcpToPort maps the inode of every established IPv4 connection to
// pgPort to its local port (/proc/net/tcp).
func tcpToPort(pgPort int) (map[string]int, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	want := fmt.Sprintf(":%04X", pgPort)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fl) < 10 || !strings.HasSuffix(fl[2], want) || fl[3] != "01" {
			continue
		}
		_, hexPort, _ := strings.Cut(fl[1], ":")
		port, err := strconv.ParseInt(hexPort, 16, 32)
		if err != nil {
			continue
		}
		out[fl[9]] = int(port)
	}
	return out, sc.Err()
}

// quantileOf is the q-quantile of ds (nearest rank).
func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func printFanout(phases []*phaseResult, gateways int, fleet []*fleetGateway) {
	fmt.Println("| phase, measured in | revocations refused by every one | everywhere: p50 | p99 | max | one instance: p50 | p99 | key changes/min (measured) | DB connections (most at once) | per gateway (most) | statements/s by the gateways | per gateway | gateways' CPU (cores) | PostgreSQL CPU (cores) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range phases {
		printRevocationRow(p.name+", gateway processes (HTTP probes)", p.revocations, p, gateways)
		printRevocationRow(p.name+", in-process caches", p.cacheRevocations, nil, gateways)
	}
	fmt.Println()
	for _, p := range phases {
		var fleet, pg, bench time.Duration
		for _, r := range p.revocations {
			fleet += r.cpu.fleet
			pg += r.cpu.postgres
			bench += r.cpu.bench
		}
		n := time.Duration(max(len(p.revocations), 1))
		fmt.Printf("- %s: CPU time from a revocation until every gateway process refused it, on average: gateways %s, PostgreSQL %s, the benchmark's probes %s\n",
			p.name, ms(fleet/n), ms(pg/n), ms(bench/n))
	}
	var unconfirmed int64
	for _, g := range fleet {
		unconfirmed += g.unconfirmed.Load()
	}
	fmt.Printf("- probes refused because a gateway could not read the cluster within database_timeout (421, failing closed; asked again): %d\n", unconfirmed)
	printRest(phases, gateways)
}

// printRevocationRow prints one row of the fan-out table; p, when given,
// adds the phase's connections and statements.
func printRevocationRow(label string, revs []revocation, p *phaseResult, gateways int) {
	var everywhere, each []time.Duration
	seen := 0
	for _, r := range revs {
		if d, ok := r.everywhere(); ok {
			seen++
			everywhere = append(everywhere, d)
		}
		for _, d := range r.perGateway {
			if d >= 0 {
				each = append(each, d)
			}
		}
	}
	rest := "— | — | — | — | — | — | —"
	if p != nil {
		perSec := float64(p.statements) / p.window.Seconds()
		rest = fmt.Sprintf("%.0f | %d | %d | %.1f | %.2f | %.2f | %.2f", float64(p.changes)/p.window.Minutes(),
			p.conns.total, p.maxPerGW, perSec, perSec/float64(gateways), p.fleetCPU.Seconds()/p.window.Seconds(), p.pgCPU.Seconds()/p.window.Seconds())
	}
	fmt.Printf("| %s | %d of %d | %s | %s | %s | %s | %s | %s |\n", label, seen, len(revs),
		ms(quantileOf(everywhere, 0.5)), ms(quantileOf(everywhere, 0.99)), ms(slices.Max(append(everywhere, 0))),
		ms(quantileOf(each, 0.5)), ms(quantileOf(each, 0.99)), rest)
}

func printRest(phases []*phaseResult, gateways int) {
	for _, p := range phases {
		apps := make([]string, 0, len(p.conns.byApp))
		for app, n := range p.conns.byApp {
			apps = append(apps, fmt.Sprintf("`%s` %d", app, n))
		}
		slices.Sort(apps)
		fmt.Printf("- %s: connections by application_name at the busiest sample: %s\n", p.name, strings.Join(apps, ", "))
	}
	fmt.Println()
	for _, p := range phases {
		fmt.Printf("#### Statements by the gateways, %s (%.0f s window)\n\n", p.name, p.window.Seconds())
		fmt.Println("| calls/s | per gateway | mean ms | statement |")
		fmt.Println("|---:|---:|---:|---|")
		for i, st := range p.top {
			if i == 12 {
				break
			}
			r := float64(st.calls) / p.window.Seconds()
			fmt.Printf("| %.1f | %.3f | %.3f | `%s` |\n", r, r/float64(gateways), st.execMS/float64(st.calls), truncate(strings.ReplaceAll(st.query, "|", "\\|"), 110))
		}
		fmt.Println()
		n := float64(len(p.revocations))
		fmt.Printf("#### Statements by the gateways per revocation, %s (its warm-up included: each gateway first reads the new key)\n\n", p.name)
		fmt.Println("| calls per revocation | per gateway | mean ms | statement |")
		fmt.Println("|---:|---:|---:|---|")
		for i, st := range p.revTop {
			if i == 12 {
				break
			}
			fmt.Printf("| %.1f | %.2f | %.3f | `%s` |\n", float64(st.calls)/n, float64(st.calls)/n/float64(gateways), st.execMS/float64(st.calls), truncate(strings.ReplaceAll(st.query, "|", "\\|"), 110))
		}
		fmt.Println()
	}
}

// fanoutVerdict prints the goals' verdicts and fails when a gateway never
// refused a revoked key: that is a broken fleet, not a slow one.
func fanoutVerdict(phases []*phaseResult, gateways int) error {
	missing, maxPer := 0, 0
	worst := func(revs func(*phaseResult) []revocation) time.Duration {
		var w time.Duration
		for _, p := range phases {
			for _, r := range revs(p) {
				d, ok := r.everywhere()
				if !ok {
					missing++
					continue
				}
				w = max(w, d)
			}
		}
		return w
	}
	procs := worst(func(p *phaseResult) []revocation { return p.revocations })
	caches := worst(func(p *phaseResult) []revocation { return p.cacheRevocations })
	for _, p := range phases {
		maxPer = max(maxPer, p.maxPerGW)
	}
	fmt.Printf("- revocation reaches every one of %d in-process caches (the notification's way alone): slowest %s — goal ≤ 1 s: %s\n",
		gateways, ms(caches), verdict(missing == 0 && caches <= time.Second))
	fmt.Printf("- revocation refused by every one of %d gateway processes on this machine (HTTP, end to end): slowest %s — goal ≤ 1 s: %s\n",
		gateways, ms(procs), verdict(missing == 0 && procs <= time.Second))
	fmt.Printf("- connections per gateway: at most %d held — bound %d (pool_max_conns %d + the LISTEN connection + the webhook dispatcher's %d): %s\n\n",
		maxPer, fanoutConnsPerGateway, defaultPoolMaxConns, webhook.DefaultWorkers+1, verdict(maxPer <= fanoutConnsPerGateway))
	if missing > 0 {
		return fmt.Errorf("%d revocations were not refused by every gateway or cache within %v", missing, revocationTimeout)
	}
	return nil
}
