// Command bench measures queengate on this machine, in one run: the full
// gateway chain against Caddy's bare reverse_proxy and against the upstream
// alone, and how many parked long-poll pops one gateway holds.
//
//	go run ./bench                  # load: throughput, latency, database statements
//	go run ./bench -mode batch      # batched pushes and pops: queengate / bare Caddy ratios
//	go run ./bench -mode parked     # 5,000 parked long-poll pops: RSS, goroutines, fds
//	go run ./bench -mode all        # load and parked
//	go run ./bench -mode fleet      # the control-plane database at 1,000 and 10,000 clusters
//	go run ./bench -mode fanout     # 100 gateways on one database: revocation reach, connections, statements
//
// It builds ./cmd/caddy and ./cmd/fakebroker, starts the fake broker as a
// fast in-memory upstream, a throwaway PostgreSQL (internal/pgserver), a
// bare Caddy and the queengate Caddy as separate processes, and loads them
// from this process over loopback. docs/benchmarks.md explains the setup
// and holds the latest figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/queengate/queengate/meter"
)

type options struct {
	mode        string
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	rounds      int
	clusters    int
	payload     int
	paceFrac    float64
	rate        float64
	gomaxprocs  int
	parked      int
	keep        bool
	profileDir  string
	batch       string // the batch workloads -mode batch runs
	// upstream, when set, is an operator's broker (http://host:port) to
	// measure instead of the fake broker; upstreamSecret its bearer token.
	upstream       string
	upstreamSecret string
	// -mode fleet (fleet.go)
	fleetClusters string
	fleetDays     int
	fleetBusy     float64
	fleetRuns     int
	fleetPlans    string
	fleetSQL      string
	// -mode fanout (fanout.go)
	fanout fanoutOptions
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "load", "load, batch, parked, all, fleet or fanout")
	flag.StringVar(&o.batch, "batch", "push100,push1000,pop100", "the workloads of -mode batch, comma-separated")
	flag.IntVar(&o.concurrency, "c", 16, "concurrent keep-alive connections (workers)")
	flag.DurationVar(&o.duration, "d", 4*time.Second, "length of one measured run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured run of each target before the rounds")
	flag.IntVar(&o.rounds, "rounds", 8, "rounds; each runs every target once, in the order ABC, CBA, ABC, ...")
	flag.IntVar(&o.clusters, "clusters", 4, "clusters (tenants) the workers are spread over")
	flag.IntVar(&o.payload, "payload", 64, "bytes of filler in each pushed message's payload")
	flag.Float64Var(&o.paceFrac, "pace", 0.5, "paced (open-loop) runs offer this fraction of bare Caddy's measured throughput; 0 skips them")
	flag.Float64Var(&o.rate, "rate", 0, "offered rate of the paced runs in requests/s (overrides -pace)")
	flag.IntVar(&o.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of every process, load generator included (0: the Go default, all cores)")
	flag.IntVar(&o.parked, "parked", 5000, "long-poll pops to park in parked mode")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (binaries, Caddyfiles, logs)")
	flag.StringVar(&o.profileDir, "profile", "", "write CPU and allocation profiles of both Caddy processes, taken during the first closed-loop round, to this directory")
	flag.StringVar(&o.upstream, "upstream", "", "measure this broker (http://host:port) instead of the fake broker: directly, through bare Caddy and through queengate; it receives real pushes and pops")
	flag.StringVar(&o.upstreamSecret, "upstream-secret", os.Getenv("QUEENGATE_BENCH_UPSTREAM_SECRET"), "bearer token the -upstream broker requires (default $QUEENGATE_BENCH_UPSTREAM_SECRET)")
	flag.StringVar(&o.fleetClusters, "fleet-clusters", "1000,10000", "-mode fleet: the cluster counts to fill and measure, comma-separated, each in a database of its own")
	flag.IntVar(&o.fleetDays, "fleet-days", meter.DefaultUsageKeepDays, "-mode fleet: days of usage (the retention of usage_minutes)")
	flag.Float64Var(&o.fleetBusy, "fleet-busy", 0.02, "-mode fleet: the share of clusters that are busy (rows most minutes); the others are idle")
	flag.StringVar(&o.fleetPlans, "fleet-plans", "", "-mode fleet: copy the PostgreSQL log, with auto_explain's plans of every statement over 50 ms, to this file")
	flag.StringVar(&o.fleetSQL, "fleet-sql", "", "-mode fleet: SQL to run after each fill, before measuring (an index to try)")
	flag.IntVar(&o.fleetRuns, "fleet-runs", 5, "-mode fleet: runs of each measured operation (the median is printed)")
	flag.IntVar(&o.fanout.gateways, "gateways", 100, "gateway processes of -mode fanout")
	flag.IntVar(&o.fanout.revocations, "revocations", 50, "key revocations -mode fanout times in each phase")
	flag.IntVar(&o.fanout.churn, "churn", 1000, "key changes a minute in the churn phase of -mode fanout (0 skips the phase)")
	flag.DurationVar(&o.fanout.window, "window", 30*time.Second, "statement window of each -mode fanout phase")
	flag.DurationVar(&o.fanout.poll, "poll", 50*time.Millisecond, "pause between two probes of one gateway while -mode fanout waits for it to refuse a revoked key")
	flag.Parse()
	if o.gomaxprocs > 0 {
		runtime.GOMAXPROCS(o.gomaxprocs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := benchmark(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func benchmark(ctx context.Context, o options) error {
	switch o.mode {
	case "load", "batch", "parked", "all":
	case "fleet":
		return fleetBenchmark(ctx, o)
	case "fanout":
		return fanoutBenchmark(ctx, o)
	default:
		return fmt.Errorf("-mode must be load, batch, parked, all, fleet or fanout, not %q", o.mode)
	}
	e, err := setup(ctx, o)
	if err != nil {
		return err
	}
	defer e.close(o.keep)
	printMachine(o, e)
	if o.mode == "load" || o.mode == "all" {
		if err := loadBenchmark(ctx, e, o); err != nil {
			return err
		}
	}
	if o.mode == "batch" {
		if err := batchBenchmark(ctx, e, o); err != nil {
			return err
		}
	}
	if o.mode == "parked" || o.mode == "all" {
		if e.gateway == nil {
			if err := e.startGateway(o.parked); err != nil {
				return err
			}
		}
		if err := parkedBenchmark(ctx, e, o); err != nil {
			return err
		}
	}
	fmt.Printf("\nload average at the end: %s\n", loadAvg())
	return nil
}

func printMachine(o options, e *env) {
	fmt.Printf("## Machine\n\n")
	fmt.Printf("- CPU: %d × %s (GOMAXPROCS of every process: %s)\n", runtime.NumCPU(), cpuModel(), procsLabel(o.gomaxprocs))
	fmt.Printf("- memory: %s; kernel %s; %s\n", memTotal(), readTrim("/proc/sys/kernel/osrelease"), runtime.Version())
	fmt.Printf("- load average at the start: %s\n", loadAvg())
	if e.broker == nil {
		fmt.Printf("- upstream: the broker at %s (-upstream; its CPU is not measured), one cell per cluster\n", e.upstreamAddr)
		fmt.Printf("- load generator, bare Caddy, queengate and PostgreSQL share these cores\n\n")
		return
	}
	fmt.Printf("- load generator, bare Caddy, queengate, the fake broker and PostgreSQL all share these cores\n\n")
}

func procsLabel(n int) string {
	if n == 0 {
		return fmt.Sprintf("default, %d", runtime.NumCPU())
	}
	return fmt.Sprint(n)
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	for _, line := range strings.Split(readTrim("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	for _, line := range strings.Split(readTrim("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

// series is the runs of one target in one phase.
type series struct {
	target string
	runs   []*result
}

func (s *series) medianRate() float64 {
	rates := make([]float64, len(s.runs))
	for i, r := range s.runs {
		rates[i] = r.rate()
	}
	return median(rates)
}

// roundRates is each round's req/s, as a table cell lists them.
func (s *series) roundRates() string {
	rounds := make([]string, len(s.runs))
	for i, r := range s.runs {
		rounds[i] = fmt.Sprintf("%.0f", r.rate())
	}
	return strings.Join(rounds, ", ")
}

func (s *series) merged() *result {
	m := &result{target: s.target, hist: newHistogram(), cpu: map[string]time.Duration{}}
	for _, r := range s.runs {
		m.requests += r.requests
		m.errors += r.errors
		m.pops += r.pops
		m.popped += r.popped
		m.delivered += r.delivered
		m.elapsed += r.elapsed
		m.hist.merge(r.hist)
		for k, v := range r.cpu {
			m.cpu[k] += v
		}
		if m.firstErr == "" {
			m.firstErr = r.firstErr
		}
	}
	return m
}

// measure runs one target, with the CPU time each process spent on it,
// and profiles the proxy meanwhile when profileDir is set.
func measure(e *env, t target, spec loadSpec, profileDir string) (*result, error) {
	pids := map[string]int{"loadgen": os.Getpid()}
	if e.broker != nil {
		pids["upstream"] = e.broker.pid()
	}
	if t.pid != 0 {
		pids["proxy"] = t.pid
	}
	before := map[string]procStat{}
	for k, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		before[k] = s
	}
	var profiled chan error
	if profileDir != "" && t.admin != 0 {
		profiled = make(chan error, 1)
		go func() { profiled <- profile(t, spec.duration, profileDir) }()
	}
	r := run(t, spec)
	if profiled != nil {
		if err := <-profiled; err != nil {
			return nil, err
		}
	}
	r.cpu = map[string]time.Duration{}
	for k, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		r.cpu[k] = s.cpu - before[k].cpu
	}
	return r, nil
}

// phase runs every target rounds times, alternating the order (ABC, CBA,
// ABC, ... or AB, BA, ... for two) so that a drift in the machine's load
// cancels out. Only the first round is profiled. Each run is logged with
// what describe says of it.
func phase(ctx context.Context, e *env, targets []target, rounds int, spec loadSpec, label, profileDir string, describe func(*result) string) ([]*series, error) {
	out := make([]*series, len(targets))
	for i, t := range targets {
		out[i] = &series{target: t.name}
	}
	for round := range rounds {
		order := make([]int, len(targets))
		for i := range order {
			order[i] = i
		}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			dir := ""
			if round == 0 {
				dir = profileDir
			}
			r, err := measure(e, targets[i], spec, dir)
			if err != nil {
				return nil, err
			}
			logf("%s round %d %-9s %8.0f req/s  %s  errors %d  (load %s)", label, round+1, r.target,
				r.rate(), describe(r), r.errors, loadAvg())
			if r.errors > 0 {
				logf("  first error: %s", r.firstErr)
			}
			out[i].runs = append(out[i].runs, r)
		}
	}
	return out, nil
}

// latencies is the load benchmark's log of a run.
func latencies(r *result) string {
	return fmt.Sprintf("p50 %s  p99 %s", ms(r.hist.quantile(0.50)), ms(r.hist.quantile(0.99)))
}

// profile takes a CPU profile of the proxy over most of a run, then its
// allocation profile (cumulative since the process started), from Caddy's
// admin endpoint.
func profile(t target, d time.Duration, dir string) error {
	secs := max(1, int(d.Seconds())-1)
	if err := saveProfile(t.admin, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), dir, t.name+".cpu.pprof"); err != nil {
		return err
	}
	if err := saveProfile(t.admin, "/debug/pprof/allocs", dir, t.name+".allocs.pprof"); err != nil {
		return err
	}
	logf("profiles of %s written to %s (go tool pprof -top %s/%s.cpu.pprof)", t.name, dir, dir, t.name)
	return nil
}

// saveProfile fetches a profile from a Caddy admin endpoint into dir/file.
func saveProfile(admin int, path, dir, file string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", admin, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func loadBenchmark(ctx context.Context, e *env, o options) error {
	targets := e.targets()
	spec := loadSpec{concurrency: o.concurrency, duration: o.duration, payload: o.payload}

	logf("warm-up: %v per target", o.warmup)
	var warmupRequests, gatewayRequests int64
	for _, t := range targets {
		r := run(t, loadSpec{concurrency: o.concurrency, duration: o.warmup, payload: o.payload})
		if t.name == "queengate" {
			warmupRequests = r.requests
		}
		if r.errors > 0 {
			return fmt.Errorf("warm-up of %s: %d errors, first: %s", t.name, r.errors, r.firstErr)
		}
	}
	db, err := e.statementsStart(ctx)
	if err != nil {
		return err
	}

	logf("closed loop: %d workers, %v per run, %d rounds", o.concurrency, o.duration, o.rounds)
	closed, err := phase(ctx, e, targets, o.rounds, spec, "closed", o.profileDir, latencies)
	if err != nil {
		return err
	}
	gatewayRequests += closed[2].merged().requests

	var paced []*series
	rate := o.rate
	if rate == 0 {
		rate = o.paceFrac * closed[1].medianRate()
	}
	if rate > 0 {
		logf("paced: %.0f req/s offered to each target", rate)
		spec.rate = rate
		paced, err = phase(ctx, e, targets, o.rounds, spec, "paced", "", latencies)
		if err != nil {
			return err
		}
		gatewayRequests += paced[2].merged().requests
	}

	// Stop the gateway gracefully: it writes the usage it still holds, so
	// the statement count includes the final flush.
	logf("stopping the gateway (graceful: the meter drains)")
	if err := e.gateway.stop(30 * time.Second); err != nil {
		return err
	}
	e.gateway = nil
	stmts, err := e.statementsEnd(ctx, db)
	if err != nil {
		return err
	}
	metered, err := e.meteredRequests(ctx)
	if err != nil {
		return err
	}

	fmt.Printf("## Load: %d keep-alive connections, pushes and autoAck pops alternating, %d clusters, %d rounds of %v per target\n\n",
		o.concurrency, o.clusters, o.rounds, o.duration)
	fmt.Printf("### Closed loop (each connection sends its next request as soon as the last is answered)\n\n")
	printPhase(closed, false)
	if paced != nil {
		fmt.Printf("### Paced (open loop): %.0f requests/s offered to every target (%.0f %% of bare Caddy's closed-loop throughput)\n\n",
			rate, 100*rate/closed[1].medianRate())
		printPhase(paced, true)
	}
	printStatements(stmts, gatewayRequests, warmupRequests+gatewayRequests, metered)
	return nil
}

// printPhase prints one phase's table and its verdicts against the goals
// docs/benchmarks.md records: throughput ≥ 0.95 of bare Caddy in the closed loop, at most
// 6 µs of plugin CPU per request, at most 0.5 ms of p99 added when paced.
func printPhase(ss []*series, paced bool) {
	fmt.Println("| target | req/s (median) | req/s per round | p50 | p99 | p99.9 | max | errors | pops delivering | CPU µs/req: proxy | upstream | load generator |")
	fmt.Println("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range ss {
		m := s.merged()
		per := func(k string) string {
			d, ok := m.cpu[k]
			if !ok {
				return "—"
			}
			return fmt.Sprintf("%.1f", float64(d.Microseconds())/float64(m.requests))
		}
		delivering := "—"
		if m.pops > 0 {
			delivering = fmt.Sprintf("%.1f %%", 100*float64(m.delivered)/float64(m.pops))
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", s.target, s.medianRate(),
			s.roundRates(), ms(m.hist.quantile(0.5)), ms(m.hist.quantile(0.99)), ms(m.hist.quantile(0.999)),
			ms(m.hist.max), m.errors, delivering, per("proxy"), per("upstream"), per("loadgen"))
	}
	bare, gate := ss[1], ss[2]
	b, g := bare.merged(), gate.merged()
	// Rounds run B and C next to each other (ABC, CBA), so per-round
	// comparisons see the same machine; their median shrugs off a round
	// disturbed by something else running.
	var ratios, added []float64
	var perRound []string
	for i := range min(len(bare.runs), len(gate.runs)) {
		r := gate.runs[i].rate() / bare.runs[i].rate()
		ratios = append(ratios, r)
		added = append(added, float64(gate.runs[i].hist.quantile(0.99)-bare.runs[i].hist.quantile(0.99))/1e6)
		perRound = append(perRound, fmt.Sprintf("%.3f", r))
	}
	ratio := median(ratios)
	added99 := median(added)
	merged99 := float64(g.hist.quantile(0.99)-b.hist.quantile(0.99)) / 1e6
	added50 := float64(g.hist.quantile(0.5)-b.hist.quantile(0.5)) / 1e6
	perReq := func(r *result) float64 { return float64(r.cpu["proxy"].Microseconds()) / float64(r.requests) }
	throughputGoal := "goal ≥ 0.95 closed loop: " + verdict(ratio >= 0.95)
	p99Goal := "goal ≤ 0.5 ms when paced: " + verdict(added99 <= 0.5)
	if paced {
		throughputGoal = "keeping up is the point here"
	} else {
		p99Goal = "the goal is on the paced run"
	}
	plugin := perReq(g) - perReq(b)
	fmt.Printf("\n- throughput queengate / bare Caddy: **%.3f** (median of the rounds: %s; ratio of the medians %.3f) — %s\n",
		ratio, strings.Join(perRound, ", "), gate.medianRate()/bare.medianRate(), throughputGoal)
	fmt.Printf("- p99 added by queengate over bare Caddy: **%+.3f ms** (median of the rounds; over all requests %+.3f ms) — %s; p50 added %+.3f ms\n",
		added99, merged99, p99Goal, added50)
	fmt.Printf("- proxy CPU per request: queengate %.1f µs, bare Caddy %.1f µs: **%+.1f µs** added by the plugin — goal ≤ 6 µs: %s\n\n",
		perReq(g), perReq(b), plugin, verdict(plugin <= 6))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
