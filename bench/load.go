package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math/bits"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// target is one system under load: where to connect and how each
// cluster's requests are spelled for it.
type target struct {
	name string
	addr string
	// header returns the Host and credential lines of cluster i's requests.
	header func(i int) string
	pid    int // the proxy's process (0 for the upstream alone)
	admin  int // the proxy's Caddy admin port, for pprof (0: none)
}

// cellHeader is the head lines the gateway would send the cell for
// cluster c: the upstream's Host, the cell secret (when there is one) and
// x-queen-tenant, each ending in CRLF.
func (e *env) cellHeader(c benchCluster) string {
	auth := ""
	if e.cellKey != "" {
		auth = "Authorization: Bearer " + e.cellKey + "\r\n"
	}
	return fmt.Sprintf("Host: %s\r\n%sX-Queen-Tenant: %s\r\n", e.upstreamAddr, auth, c.tenant)
}

// targets are the three systems, with byte-identical requests except for
// the Host and the credential: the upstream and bare Caddy get what the
// gateway would send the cell (the cell secret and x-queen-tenant), the
// gateway gets the cluster's hostname and API key.
func (e *env) targets() []target {
	upstreamHeader := func(i int) string { return e.cellHeader(e.clusters[i%len(e.clusters)]) }
	return []target{
		{name: "upstream", addr: e.upstreamAddr, header: upstreamHeader},
		{name: "caddy", addr: fmt.Sprintf("127.0.0.1:%d", e.barePort), header: upstreamHeader, pid: e.bare.pid(), admin: e.bareAdmin},
		{name: "queengate", addr: fmt.Sprintf("127.0.0.1:%d", e.gatewayPort), pid: e.gateway.pid(), admin: e.gatewayAdmin, header: func(i int) string {
			c := e.clusters[i%len(e.clusters)]
			return fmt.Sprintf("Host: %s.%s\r\nAuthorization: Bearer %s\r\n", c.slug, baseDomain, c.key)
		}},
	}
}

// requests returns worker w's push and pop, as raw HTTP/1.1: a push of one
// small JSON message to the worker's own queue, and an autoAck pop of one
// message from it, so every pop finds the message the push left.
func requests(t target, w, payload int) (push, pop []byte) {
	queue := fmt.Sprintf("bench-%d", w)
	body := fmt.Sprintf(`{"items":[{"queue":%q,"payload":{"worker":%d,"data":%q}}]}`, queue, w, strings.Repeat("x", payload))
	push = fmt.Appendf(nil, "POST /api/v1/push HTTP/1.1\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		t.header(w), len(body), body)
	pop = fmt.Appendf(nil, "GET /api/v1/pop/queue/%s?batch=1&autoAck=true HTTP/1.1\r\n%s\r\n", queue, t.header(w))
	return push, pop
}

// result is what one run of one target measured.
type result struct {
	target    string
	requests  int64
	errors    int64
	delivered int64 // pops that returned a message
	pops      int64
	popped    int64 // messages the batch pops took
	elapsed   time.Duration
	hist      *histogram
	firstErr  string
	cpu       map[string]time.Duration // per process, over the run
}

func (r *result) rate() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// pace, when not zero, is the offered rate of an open-loop run: each
// worker sends on a fixed schedule instead of back to back.
type loadSpec struct {
	concurrency int
	duration    time.Duration
	payload     int
	rate        float64 // requests per second over all workers; 0 = closed loop
	// shape, when set, replaces the alternating push and pop of one
	// message with one batch request repeated (batch.go).
	shape *batchShape
}

// run puts load on one target: concurrency workers, each on its own
// keep-alive connection, alternating push and pop until the duration is
// over, every request timed into a histogram.
func run(t target, spec loadSpec) *result {
	res := &result{target: t.name, hist: newHistogram()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	end := start.Add(spec.duration)
	var lastDone time.Time
	for w := range spec.concurrency {
		wg.Go(func() {
			wr := worker{t: t, id: w, hist: newHistogram()}
			popOnly := false
			if spec.shape != nil {
				wr.push, wr.pop = spec.shape.requests(t, w)
				popOnly = spec.shape.pops
			} else {
				wr.push, wr.pop = requests(t, w, spec.payload)
			}
			var interval time.Duration
			next := start
			if spec.rate > 0 {
				interval = time.Duration(float64(spec.concurrency) / spec.rate * float64(time.Second))
				next = start.Add(interval * time.Duration(w) / time.Duration(spec.concurrency))
			}
			time.Sleep(time.Until(start))
			for i := 0; ; i++ {
				sent := time.Now()
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
						sent = time.Now()
					} else {
						// Behind schedule: the wait for a free worker is part of
						// the latency (no coordinated omission).
						sent = next
					}
					next = next.Add(interval)
				}
				if sent.After(end) {
					break
				}
				if spec.shape != nil {
					wr.do(popOnly, sent)
				} else {
					wr.do(i%2 == 1, sent)
				}
			}
			wr.close()
			mu.Lock()
			res.requests += wr.requests
			res.errors += wr.errors
			res.delivered += wr.delivered
			res.pops += wr.pops
			res.popped += wr.popped
			res.hist.merge(wr.hist)
			if res.firstErr == "" {
				res.firstErr = wr.firstErr
			}
			if now := time.Now(); now.After(lastDone) {
				lastDone = now
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = lastDone.Sub(start)
	return res
}

// worker is one client connection.
type worker struct {
	t         target
	id        int
	push, pop []byte
	conn      net.Conn
	br        *bufio.Reader
	body      bytes.Buffer
	hist      *histogram

	requests, errors, delivered, pops, popped int64
	firstErr                                  string
}

func (w *worker) fail(err string) {
	w.errors++
	if w.firstErr == "" {
		w.firstErr = err
	}
	w.close()
}

func (w *worker) close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// do sends one request and reads its whole answer; the latency runs from
// sent (the request's scheduled time) to the last byte of the body.
func (w *worker) do(pop bool, sent time.Time) {
	if w.conn == nil {
		c, err := net.DialTimeout("tcp", w.t.addr, 5*time.Second)
		if err != nil {
			w.fail(err.Error())
			time.Sleep(10 * time.Millisecond)
			return
		}
		w.conn, w.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	req := w.push
	if pop {
		req = w.pop
	}
	_ = w.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := w.conn.Write(req); err != nil {
		w.fail(err.Error())
		return
	}
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		w.fail(err.Error())
		return
	}
	w.body.Reset()
	_, err = w.body.ReadFrom(resp.Body)
	resp.Body.Close()
	done := time.Now()
	if err != nil {
		w.fail(err.Error())
		return
	}
	w.requests++
	w.hist.record(done.Sub(sent))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		w.errors++
		if w.firstErr == "" {
			w.firstErr = fmt.Sprintf("%s %s", resp.Status, truncate(w.body.String(), 200))
		}
	}
	if pop {
		w.pops++
		if bytes.Contains(w.body.Bytes(), []byte(`"messages":[{`)) {
			w.delivered++
		}
		w.popped += int64(bytes.Count(w.body.Bytes(), []byte(`"transactionId":`)))
	}
	if resp.Close {
		w.close()
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// histogram counts latencies in log-linear buckets: exact below 128 ns,
// then 128 buckets per power of two (under 0.8 % error).
type histogram struct {
	counts [64 * 128]uint64
	n      uint64
	max    time.Duration
}

func newHistogram() *histogram { return &histogram{} }

func bucketOf(v uint64) int {
	if v < 128 {
		return int(v)
	}
	e := bits.Len64(v) - 8
	return (e+1)*128 + int(v>>uint(e)) - 128
}

// valueOf returns the middle of bucket i.
func valueOf(i int) uint64 {
	if i < 128 {
		return uint64(i)
	}
	e := i/128 - 1
	m := uint64(i%128 + 128)
	return m<<uint(e) + (uint64(1)<<uint(e))/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q of the requests
// were answered.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(valueOf(i))
		}
	}
	return h.max
}
