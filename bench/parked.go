package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// parkedSample is the gateway's (and the broker's) state at one moment.
type parkedSample struct {
	gateway, broker procStat
	goroutines      float64
	heapInuse       float64
	stackInuse      float64
	parked          float64
}

// sampleParked reads /proc first (RSS as the system sees it), then has the
// gateway collect its garbage (through the heap profile endpoint) so that
// the heap figure is what the parked pops keep alive.
func (e *env) sampleParked() (parkedSample, error) {
	var s parkedSample
	var err error
	if s.gateway, err = readProc(e.gateway.pid()); err != nil {
		return s, err
	}
	if e.broker != nil {
		if s.broker, err = readProc(e.broker.pid()); err != nil {
			return s, err
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", e.gatewayAdmin))
	if err != nil {
		return s, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, m := range []struct {
		name string
		v    *float64
	}{{"go_goroutines", &s.goroutines}, {"go_memstats_heap_inuse_bytes", &s.heapInuse},
		{"go_memstats_stack_inuse_bytes", &s.stackInuse}, {"queengate_parked_pops", &s.parked}} {
		if *m.v, err = e.metric(m.name); err != nil {
			return s, err
		}
	}
	return s, nil
}

// parkedBenchmark parks o.parked long-poll pops (wait=true, 60 s) through
// the gateway, one queue each, spread over the clusters, and reports what
// holding them costs the gateway; then it lets them go and checks that
// everything they held is given back.
func parkedBenchmark(ctx context.Context, e *env, o options) error {
	floor, err := bareParkedFloor(ctx, e, o.parked)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	idle, err := e.sampleParked()
	if err != nil {
		return err
	}
	logf("parking %d long-poll pops through the gateway ...", o.parked)
	start := time.Now()
	conns, err := parkConns(ctx, fmt.Sprintf("127.0.0.1:%d", e.gatewayPort), o.parked, func(i int) string {
		c := e.clusters[i%len(e.clusters)]
		return fmt.Sprintf("GET /api/v1/pop/queue/parked-%d?wait=true&timeout=60000 HTTP/1.1\r\nHost: %s.%s\r\nAuthorization: Bearer %s\r\n\r\n",
			i, c.slug, baseDomain, c.key)
	})
	defer closeConns(conns)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := e.metric("queengate_parked_pops")
		if err != nil {
			return err
		}
		if int(p) >= o.parked {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %.0f of %d pops parked after a minute", p, o.parked)
		}
		time.Sleep(100 * time.Millisecond)
	}
	parkedIn := time.Since(start)
	logf("%d parked in %v; holding them", o.parked, parkedIn.Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	held, err := e.sampleParked()
	if err != nil {
		return err
	}
	if o.profileDir != "" {
		if err := saveProfile(e.gatewayAdmin, "/debug/pprof/heap?gc=1", o.profileDir, "queengate.parked.heap.pprof"); err != nil {
			return err
		}
		if err := saveProfile(e.gatewayAdmin, "/debug/pprof/goroutine", o.profileDir, "queengate.parked.goroutine.pprof"); err != nil {
			return err
		}
		logf("heap and goroutine profiles of the gateway holding them written to %s", o.profileDir)
	}
	const window = 5 * time.Second
	time.Sleep(window)
	after, err := e.sampleParked()
	if err != nil {
		return err
	}
	gatewayCores := float64(after.gateway.cpu-held.gateway.cpu) / float64(window)
	brokerCores := float64(after.broker.cpu-held.broker.cpu) / float64(window)

	logf("releasing them (clients hang up)")
	for i, c := range conns {
		if c != nil {
			_ = c.Close()
			conns[i] = nil
		}
	}
	released := time.Now()
	var back parkedSample
	for {
		back, err = e.sampleParked()
		if err != nil {
			return err
		}
		if back.parked == 0 && back.goroutines <= idle.goroutines+20 && back.gateway.fds <= idle.gateway.fds+20 {
			break
		}
		if time.Since(released) > 30*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	releasedIn := time.Since(released)

	fmt.Printf("## Parked long-poll pops: %d at once through the gateway (wait=true, 60 s, one queue each, %d clusters)\n\n", o.parked, len(e.clusters))
	fmt.Printf("All %d parked (queengate_parked_pops) %.1f s after the first connection.\n\n", o.parked, parkedIn.Seconds())
	fmt.Println("| gateway | RSS | peak RSS | live Go heap (after a GC) | goroutine stacks | goroutines | threads | open fds |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	row := func(label string, s parkedSample) {
		fmt.Printf("| %s | %.1f MB | %.1f MB | %.1f MB | %.1f MB | %.0f | %d | %d |\n", label,
			float64(s.gateway.rssKB)/1024, float64(s.gateway.hwmKB)/1024, s.heapInuse/(1<<20), s.stackInuse/(1<<20),
			s.goroutines, s.gateway.threads, s.gateway.fds)
	}
	row("idle", idle)
	row(fmt.Sprintf("%d parked", o.parked), held)
	row(fmt.Sprintf("released (after %.1f s)", releasedIn.Seconds()), back)
	perPop := float64(held.gateway.rssKB-idle.gateway.rssKB) / float64(o.parked)
	fmt.Printf("\n- gateway RSS while holding them: **%.1f MB**, %.1f KB per parked pop over idle — goal ≤ 32 KB: %s\n",
		float64(held.gateway.rssKB)/1024, perPop, verdict(perPop <= 32))
	fmt.Printf("- the floor, bare Caddy's reverse_proxy holding the same %d pops (to the same upstream, same run): %.1f MB RSS, **%.1f KB per parked pop** over idle; queengate's own share is the difference, %.1f KB\n",
		o.parked, floor.heldMB, floor.perPopKB, perPop-floor.perPopKB)
	fmt.Printf("- per parked pop: %.2f goroutines, %.2f file descriptors in the gateway (the client's connection and the one to the cell)\n",
		(held.goroutines-idle.goroutines)/float64(o.parked), float64(held.gateway.fds-idle.gateway.fds)/float64(o.parked))
	fmt.Printf("- CPU while holding them (%v): gateway %.3f cores, fake broker %.3f cores (it re-checks every parked pop every 100 ms); broker RSS %.1f MB\n",
		window, gatewayCores, brokerCores, float64(after.broker.rssKB)/1024)
	fmt.Printf("- after the clients hung up: %.0f parked, %.0f goroutines (idle: %.0f), %d fds (idle: %d)\n\n",
		back.parked, back.goroutines, idle.goroutines, back.gateway.fds, idle.gateway.fds)
	return nil
}

// parkConns opens n connections to addr and sends request(i) on each,
// 64 at a time, and returns them open.
func parkConns(ctx context.Context, addr string, n int, request func(i int) string) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(conns) || ctx.Err() != nil {
					return
				}
				conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err == nil {
					_, err = fmt.Fprint(conn, request(i))
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns[i] = conn
			}
		})
	}
	wg.Wait()
	if k := failed.Load(); k > 0 {
		return conns, fmt.Errorf("%d of %d connections failed, first: %v", k, n, firstErr.Load())
	}
	return conns, nil
}

func closeConns(conns []net.Conn) {
	for i, c := range conns {
		if c != nil {
			_ = c.Close()
			conns[i] = nil
		}
	}
}

// parkedFloor is what bare Caddy spends holding parked pops.
type parkedFloor struct {
	heldMB, perPopKB float64
}

// bareParkedFloor parks n pops through bare Caddy's reverse_proxy, with
// the requests the gateway would send the cell, and measures its RSS: the
// floor that Go's HTTP stack and Caddy's proxy set, whatever the plugin
// does. A pop is parked once both its connections are open (2 fds).
func bareParkedFloor(ctx context.Context, e *env, n int) (parkedFloor, error) {
	idle, err := readProc(e.bare.pid())
	if err != nil {
		return parkedFloor{}, err
	}
	logf("parking %d long-poll pops through bare Caddy (the floor) ...", n)
	conns, err := parkConns(ctx, fmt.Sprintf("127.0.0.1:%d", e.barePort), n, func(i int) string {
		return fmt.Sprintf("GET /api/v1/pop/queue/parked-bare-%d?wait=true&timeout=60000 HTTP/1.1\r\n%s\r\n",
			i, e.cellHeader(e.clusters[i%len(e.clusters)]))
	})
	defer closeConns(conns)
	if err != nil {
		return parkedFloor{}, err
	}
	// Parked once the connection count stops growing near 2 per pop; the
	// figure is per connection pair actually held.
	deadline := time.Now().Add(60 * time.Second)
	last := -1
	for {
		s, err := readProc(e.bare.pid())
		if err != nil {
			return parkedFloor{}, err
		}
		if s.fds == last && s.fds-idle.fds >= 2*n*9/10 {
			break
		}
		if time.Now().After(deadline) {
			return parkedFloor{}, fmt.Errorf("bare Caddy holds %d connections after a minute, want about %d", s.fds-idle.fds, 2*n)
		}
		last = s.fds
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	held, err := readProc(e.bare.pid())
	if err != nil {
		return parkedFloor{}, err
	}
	pairs := max(1, (held.fds-idle.fds)/2)
	return parkedFloor{heldMB: float64(held.rssKB) / 1024, perPopKB: float64(held.rssKB-idle.rssKB) / float64(pairs)}, nil
}
