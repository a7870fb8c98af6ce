package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// The benchmarks in this file measure the plugin's own work per request,
// stage by stage, on a cache hit: the cluster and its API key are cached,
// and the cluster has finite limits so high that nothing is refused, so
// every bucket, the admission registry and the meter do their real work.
// docs/benchmarks.md has the figures and the command.

const (
	idBench  = "e0000000-0000-4000-8000-00000000000e"
	benchKey = "qk_live_benchbenchbenchbench"
	// A small push as SDKs send it, and the answers the broker gives.
	benchPushBody   = `{"items":[{"queue":"orders","partition":"Default","payload":{"order":42,"sku":"A-1001","qty":3}}]}`
	benchPushAnswer = `[{"index":0,"message_id":"019a8c6e-5b2f-7c3a-9d41-2f6e8a1b3c4d","partition_id":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"3c9e1f7a-2b4d-4e6f-8a0c-1d2e3f4a5b6c"}]`
	benchPopAnswer  = `{"consumerGroup":"__QUEUE_MODE__","leaseId":"019a8c6e-5b30-7000-8000-000000000001","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-30T07:00:00.000000Z","data":{"order":42},"id":"019a8c6e-5b2f-7c3a-9d41-2f6e8a1b3c4d","leaseId":"019a8c6e-5b30-7000-8000-000000000001","partition":"Default","partitionId":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","producerSub":null,"traceId":null,"transactionId":"3c9e1f7a-2b4d-4e6f-8a0c-1d2e3f4a5b6c"}],"partition":"Default","partitionId":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","partitionsClaimed":1,"queue":"orders","success":true}`
)

// hugeLimits are finite limits nothing in a benchmark reaches.
func hugeLimits() limits.Effective {
	const huge = limits.Cap(1_000_000_000_000)
	return limits.Effective{
		MaxReqPerSec: huge, ReqBurst: huge, MaxMsgsPerSec: huge, MsgsBurst: huge,
		MaxQueues: huge, MaxPartitionsPerQueue: huge, MaxParkedPops: huge,
		MaxPayloadBytes: huge, MaxBatchItems: huge, MaxRetainedBytes: huge, MaxRetentionSeconds: huge,
	}
}

// benchEnv is the test gateway with a cluster "bench" on a real cell
// (with a secret), finite huge limits, and a meter that records (its pool
// connects lazily and is never reached).
type benchEnv struct {
	g       *Gateway
	cluster *tenancy.Cluster
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	env := newTestEnv(b)
	c := &tenancy.Cluster{
		ID: idBench, Slug: "bench", BrokerTenant: "9b2c2f4e-1111-4000-8000-000000000001",
		Status: tenancy.StatusActive, CellID: "f0000000-0000-4000-8000-00000000000f", CellSlug: "cell-1",
		CellURL: "http://127.0.0.1:6632", CellSecret: "bench-cell-secret", Limits: hugeLimits(),
	}
	env.src.clusters["bench"] = c
	env.src.keys[tenancy.HashAPIKey(benchKey)] = &tenancy.APIKey{ID: "k-bench", Cluster: c, Scopes: tenancy.AllScopes}
	pool, err := pgxpool.New(context.Background(), "postgres://bench@127.0.0.1:1/bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	m, err := meter.New(meter.Config{Pool: pool, SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	env.g.app.backend.meter = m
	return &benchEnv{g: env.g, cluster: c}
}

// benchBody is a request body that can be rewound without allocating.
type benchBody struct {
	data []byte
	off  int
}

func (r *benchBody) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}

func (r *benchBody) Close() error { return nil }

// benchRequest is one reusable request as Caddy hands it to the handler
// (with its vars map in the context), reset before every iteration so
// that the benchmark itself allocates nothing.
type benchRequest struct {
	r    *http.Request
	auth []string
	body *benchBody
}

func newBenchRequest(method, target, body string) *benchRequest {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "bench.eu1.example.com"
	vars := map[string]any{}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	br := &benchRequest{r: r, auth: []string{"Bearer " + benchKey}}
	if body != "" {
		br.body = &benchBody{data: []byte(body)}
		r.Header["Content-Type"] = []string{"application/json"}
	}
	br.reset()
	return br
}

func (br *benchRequest) reset() *http.Request {
	r := br.r
	r.Header["Authorization"] = br.auth
	if br.body != nil {
		br.body.off = 0
		r.Body, r.ContentLength, r.GetBody = br.body, int64(len(br.body.data)), nil
	} else {
		r.Body, r.ContentLength, r.GetBody = serverEmptyBody{}, 0, nil
	}
	return r
}

// serverEmptyBody is the body of a request without one as the handler
// gets it from Caddy: empty, of length 0, but wrapped, so not
// http.NoBody.
type serverEmptyBody struct{}

func (serverEmptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (serverEmptyBody) Close() error             { return nil }

// discardWriter is a ResponseWriter that keeps nothing and allocates
// nothing, unlike httptest.ResponseRecorder (which copies the header).
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

func (w *discardWriter) reset() *discardWriter {
	clear(w.h)
	w.status = 0
	return w
}

// cell answers like a broker: status and body, as reverse_proxy would
// write them.
func cell(status int, answer string) caddyhttp.Handler {
	body := []byte(answer)
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(status)
		_, err := w.Write(body)
		return err
	})
}

// BenchmarkPipelinePush is the whole handler for one small authenticated
// push on a cache hit, with the broker's answer billed from its body: the
// plugin's own work for a proxied push, without the proxying itself.
func BenchmarkPipelinePush(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", benchPushBody)
	w := &discardWriter{h: http.Header{}}
	next := cell(http.StatusOK, benchPushAnswer)
	b.ReportAllocs()
	for b.Loop() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	}
}

// BenchmarkPipelinePop is the whole handler for one pop that returns a
// message: the delivery is billed, remembered and taken from the bucket.
func BenchmarkPipelinePop(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("GET", "/api/v1/pop/queue/orders?batch=1&autoAck=true", "")
	w := &discardWriter{h: http.Header{}}
	next := cell(http.StatusOK, benchPopAnswer)
	b.ReportAllocs()
	for b.Loop() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	}
}

// stageState is the state the stages before the measured one leave.
func stageState(b *testing.B, env *benchEnv, r *http.Request) (*requestState, target) {
	b.Helper()
	t, e := env.g.resolveTarget(r)
	if e != nil {
		b.Fatal(e)
	}
	st := &requestState{rid: newRequestID()}
	if e := env.g.classify(r, st); e != nil {
		b.Fatal(e)
	}
	if _, e := env.g.authenticate(r, st, t); e != nil {
		b.Fatal(e)
	}
	return st, t
}

// BenchmarkStageRequestID: the request id, set on the response and as a
// Caddy variable.
func BenchmarkStageRequestID(b *testing.B) {
	req := newBenchRequest("POST", "/api/v1/push", "")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		st := startRequest(w, req.r)
		if st.rid == "" {
			b.Fatal("no id")
		}
	}
}

// BenchmarkStageResolve: the cluster from the Host, through the cache.
func BenchmarkStageResolve(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	b.ReportAllocs()
	for b.Loop() {
		if t, e := env.g.resolveTarget(req.r); e != nil || t.cluster == nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkStageClassify: the route class of a push.
func BenchmarkStageClassify(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st := &requestState{}
	b.ReportAllocs()
	for b.Loop() {
		if e := env.g.classify(req.r, st); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkStageAuthenticate: the API key from the header, hashed and
// found in the cache, checked against the Host's cluster.
func BenchmarkStageAuthenticate(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st, t := stageState(b, env, req.r)
	b.ReportAllocs()
	for b.Loop() {
		if _, e := env.g.authenticate(req.r, st, t); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkStageAuthorize: the authorization matrix.
func BenchmarkStageAuthorize(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st, _ := stageState(b, env, req.r)
	b.ReportAllocs()
	for b.Loop() {
		if !tenancy.Authorize(&st.principal, st.route) {
			b.Fatal("refused")
		}
	}
}

// BenchmarkStageRateLimit: the request bucket and the RateLimit headers.
func BenchmarkStageRateLimit(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st, _ := stageState(b, env, req.r)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		if e := env.g.admitRequest(w, st, env.cluster); e != nil {
			b.Fatal(e)
		}
		st.msgChecked = false
		env.g.setRateLimitHeaders(w, st, env.cluster)
	}
}

// BenchmarkStageAdmitPush: a push body read once, parsed, its queue and
// partition admitted, its message taken from the message bucket and its
// bytes added to the storage estimate.
func BenchmarkStageAdmitPush(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", benchPushBody)
	b.ReportAllocs()
	for b.Loop() {
		r := req.reset()
		st := requestState{route: tenancy.Route{Class: tenancy.ClassProduce}}
		if e := env.g.admitBody(r, &st, env.cluster); e != nil || st.produced != 1 {
			b.Fatal(e)
		}
	}
}

// BenchmarkStageForward: the cell's credential, the upstream deadline and
// the headers the cell sees.
func BenchmarkStageForward(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st, _ := stageState(b, env, req.r)
	b.ReportAllocs()
	for b.Loop() {
		r := req.reset()
		fr, cancel, e := env.g.prepareForward(r, st, env.cluster, billPush)
		if e != nil {
			b.Fatal(e)
		}
		cancel()
		if fr.Header.Get(headerTenant) == "" {
			b.Fatal("no tenant")
		}
	}
}

// BenchmarkStageMeterPush: billing a push from the broker's answer and
// recording it in the meter.
func BenchmarkStageMeterPush(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("POST", "/api/v1/push", "")
	st, _ := stageState(b, env, req.r)
	answer := []byte(benchPushAnswer)
	rw := &meteredResponse{started: true, status: http.StatusOK, written: int64(len(answer))}
	b.ReportAllocs()
	for b.Loop() {
		// The answer is tallied as it streams past, then billed.
		rw.tallyAnswers(billPush, st)
		rw.tally.Write(answer)
		env.g.recordUsage(req.r, st, env.cluster, rw, exchangeAnswered)
	}
}

// BenchmarkStageMeterPop: billing a pop (one delivery, remembered against
// redelivery, taken from the message bucket) and recording it.
func BenchmarkStageMeterPop(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("GET", "/api/v1/pop/queue/orders?batch=1", "")
	st, _ := stageState(b, env, req.r)
	rw := &meteredResponse{started: true, status: http.StatusOK, keep: true, body: []byte(benchPopAnswer), written: int64(len(benchPopAnswer))}
	b.ReportAllocs()
	for b.Loop() {
		env.g.recordUsage(req.r, st, env.cluster, rw, exchangeAnswered)
	}
}

func TestHeaderKeysAreCanonical(t *testing.T) {
	for _, k := range []string{headerRequestID, headerTenant, headerRateLimitPolicy, headerRateLimit, "Authorization"} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header key %q is set directly but is not canonical (%q)", k, c)
		}
	}
}

func TestCellBearerCache(t *testing.T) {
	var c bearerCache
	a := c.get("s3cret")
	if a != "Bearer s3cret" || c.get("s3cret") != a {
		t.Fatalf("bearer %q", a)
	}
	for i := range 2 * maxCachedBearers {
		if got := c.get(fmt.Sprint("rotated-", i)); got != fmt.Sprint("Bearer rotated-", i) {
			t.Fatalf("bearer %q", got)
		}
	}
	if n := len(*c.m.Load()); n > maxCachedBearers {
		t.Fatalf("%d cached bearers, more than %d", n, maxCachedBearers)
	}
	if got := c.get("s3cret"); got != "Bearer s3cret" {
		t.Fatalf("bearer after rotations %q", got)
	}
}
