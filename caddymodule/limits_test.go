package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// limitedEnv is the test gateway with the pro cluster given limits.
func limitedEnv(t *testing.T, set func(*limits.Effective)) (*testEnv, *tenancy.Cluster) {
	t.Helper()
	env := newTestEnv(t)
	pro := env.src.clusters["pro"]
	set(&pro.Limits)
	return env, pro
}

func proCall(method, target, body string) call {
	return call{method: method, host: "pro.eu1.example.com", target: target, auth: "qk_live_full_pro", body: body}
}

func withFullProKey(env *testEnv) {
	env.src.keys[tenancy.HashAPIKey("qk_live_full_pro")] = &tenancy.APIKey{ID: "k-full-pro", Cluster: env.src.clusters["pro"], Scopes: tenancy.AllScopes}
}

func push(items ...string) string {
	parts := make([]string, len(items))
	for i, q := range items {
		parts[i] = fmt.Sprintf(`{"queue":%q,"payload":{"n":%d}}`, q, i)
	}
	return `{"items":[` + strings.Join(parts, ",") + `]}`
}

func TestRequestBucket(t *testing.T) {
	env, _ := limitedEnv(t, func(l *limits.Effective) { l.MaxReqPerSec, l.ReqBurst = 1, 3 })
	withFullProKey(env)
	for i := range 3 {
		w, seen := env.g.do(t, proCall("GET", "/api/v1/resources/queues", ""), nil)
		expect(t, w, seen, 200, "")
		if w.Header().Get("RateLimit-Policy") == "" || !strings.Contains(w.Header().Get("RateLimit"), fmt.Sprintf("r=%d", 2-i)) {
			t.Fatalf("request %d: RateLimit-Policy %q RateLimit %q", i, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		}
	}
	w, seen := env.g.do(t, proCall("GET", "/api/v1/resources/queues", ""), nil)
	expect(t, w, seen, 429, "rate_limited")
	if w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "request rate limit exceeded") {
		t.Fatalf("Retry-After %q body %s", w.Header().Get("Retry-After"), w.Body)
	}
	// Another cluster on the same gateway is untouched.
	w, seen = env.g.do(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_acme"}, nil)
	expect(t, w, seen, 200, "")
}

func TestShadowModeLogsAndForwards(t *testing.T) {
	env, _ := limitedEnv(t, func(l *limits.Effective) {
		l.MaxReqPerSec, l.ReqBurst, l.MaxQueues, l.MaxPayloadBytes = 1, 1, 1, 5
	})
	withFullProKey(env)
	env.g.app.Shadow = true
	for range 3 {
		w, seen := env.g.do(t, proCall("POST", "/api/v1/push", push("a", "b")), nil)
		// The rate and admission decisions are only logged; the payload
		// cap is a hard block and applies in shadow mode too.
		expect(t, w, seen, 413, "payload_too_large")
	}
	for range 3 {
		w, seen := env.g.do(t, proCall("POST", "/api/v1/push", `{"items":[{"queue":"a","payload":1},{"queue":"b","payload":2}]}`), nil)
		expect(t, w, seen, 200, "")
	}
}

func TestProduceAdmission(t *testing.T) {
	env, _ := limitedEnv(t, func(l *limits.Effective) {
		l.MaxMsgsPerSec, l.MsgsBurst = 1, 5
		l.MaxQueues, l.MaxPartitionsPerQueue = 2, 2
		l.MaxPayloadBytes, l.MaxBatchItems = 64, 4
	})
	withFullProKey(env)
	do := func(body string) (*httptest.ResponseRecorder, *upstreamSeen) {
		return env.g.do(t, proCall("POST", "/api/v1/push", body), nil)
	}
	w, seen := do(`{"items":[{"queue":"a","payload":"` + strings.Repeat("x", 70) + `"}]}`)
	expect(t, w, seen, 413, "payload_too_large")
	if !strings.Contains(w.Body.String(), "item 0: payload 72 bytes exceeds max_payload_bytes (64)") {
		t.Fatalf("payload cap message %s", w.Body)
	}
	w, seen = do(push("a", "a", "a", "a", "a"))
	expect(t, w, seen, 413, "payload_too_large")

	// Exactly at the caps works: two queues, two partitions of one.
	w, seen = do(`{"items":[{"queue":"a","partition":"p1","payload":1},{"queue":"a","partition":"p2","payload":1},{"queue":"b","payload":1}]}`)
	expect(t, w, seen, 200, "")
	if seen.body == "" || !strings.Contains(seen.body, `"partition":"p2"`) {
		t.Fatalf("the cell got %q", seen.body)
	}
	w, seen = do(push("c"))
	expect(t, w, seen, 403, "quota_exceeded")
	if !strings.Contains(w.Body.String(), "queue limit reached (2)") {
		t.Fatalf("queue cap message %s", w.Body)
	}
	w, seen = do(`{"items":[{"queue":"a","partition":"p3","payload":1}]}`)
	expect(t, w, seen, 403, "quota_exceeded")
	if !strings.Contains(w.Body.String(), "partition limit reached (2)") {
		t.Fatalf("partition cap message %s", w.Body)
	}
	// 3 of the 5 message tokens are spent: 2 more pass, the third waits.
	w, seen = do(push("a", "b"))
	expect(t, w, seen, 200, "")
	w, seen = do(push("a"))
	expect(t, w, seen, 429, "rate_limited")
	if !strings.Contains(w.Body.String(), "message rate limit exceeded") || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("message bucket refusal %s (Retry-After %q)", w.Body, w.Header().Get("Retry-After"))
	}
}

func TestRetentionCeiling(t *testing.T) {
	env, _ := limitedEnv(t, func(l *limits.Effective) { l.MaxRetentionSeconds = 3600 })
	withFullProKey(env)
	w, seen := env.g.do(t, proCall("POST", "/api/v1/configure", `{"queue":"q","options":{"retentionSeconds":7200}}`), nil)
	expect(t, w, seen, 403, "quota_exceeded")
	if !strings.Contains(w.Body.String(), "retentionSeconds of 7200s exceeds the plan's max_retention_seconds (3600s)") {
		t.Fatalf("message %s", w.Body)
	}
	w, seen = env.g.do(t, proCall("POST", "/api/v1/configure", `{"queue":"q","options":{"retentionSeconds":3600}}`), nil)
	expect(t, w, seen, 200, "")
	if seen.body != `{"queue":"q","options":{"retentionSeconds":3600}}` {
		t.Fatalf("the body was not forwarded as sent: %q", seen.body)
	}
}

// blockingUpstream answers a pop after release is closed, writing its head
// first when headFirst is set.
func blockingUpstream(release <-chan struct{}, headFirst bool, arrived chan<- struct{}) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		arrived <- struct{}{}
		if headFirst {
			w.WriteHeader(http.StatusOK)
		}
		<-release
		if !headFirst {
			w.WriteHeader(http.StatusNoContent)
		}
		return nil
	})
}

func TestParkedLongPolls(t *testing.T) {
	env, pro := limitedEnv(t, func(l *limits.Effective) { l.MaxParkedPops = 1 })
	withFullProKey(env)
	g := env.g
	popReq := func() *http.Request {
		r := httptest.NewRequest("GET", "/api/v1/pop/queue/q?wait=%74rue&timeout=5000", nil)
		r.Host = "pro.eu1.example.com"
		r.Header.Set("Authorization", "Bearer qk_live_full_pro")
		return r
	}
	release := make(chan struct{})
	arrived := make(chan struct{}, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = g.ServeHTTP(httptest.NewRecorder(), popReq(), blockingUpstream(release, false, arrived))
	})
	<-arrived
	if n := g.app.limits.parked.Cluster(pro.ID); n != 1 {
		t.Fatalf("parked gauge %d while a pop waits", n)
	}
	w := httptest.NewRecorder()
	_ = g.ServeHTTP(w, popReq(), blockingUpstream(release, false, arrived))
	if w.Code != 429 || w.Header().Get("Retry-After") != "5" || !strings.Contains(w.Body.String(), "too many parked consumers") {
		t.Fatalf("second parked pop: %d %s (Retry-After %q)", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	// A pop that does not wait is not parked.
	w2, seen := g.do(t, proCall("GET", "/api/v1/pop/queue/q?wait=false", ""), nil)
	expect(t, w2, seen, 200, "")
	close(release)
	wg.Wait()
	if n := g.app.limits.parked.Cluster(pro.ID); n != 0 {
		t.Fatalf("parked gauge %d after the pop ended", n)
	}

	// The slot is given back as soon as the response head arrives.
	release2 := make(chan struct{})
	wg.Go(func() {
		_ = g.ServeHTTP(httptest.NewRecorder(), popReq(), blockingUpstream(release2, true, arrived))
	})
	<-arrived
	deadline := time.Now().Add(2 * time.Second)
	for g.app.limits.parked.Cluster(pro.ID) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the parked slot was held after the response head arrived")
		}
		time.Sleep(time.Millisecond)
	}
	close(release2)
	wg.Wait()
}

func TestDeliveriesDebitOnlyFirstDeliveries(t *testing.T) {
	env, pro := limitedEnv(t, func(l *limits.Effective) { l.MaxMsgsPerSec, l.MsgsBurst = 1, 10 })
	withFullProKey(env)
	g := env.g
	pop := `{"messages":[{"partitionId":"p1","transactionId":"t1","data":{}},{"partitionId":"p1","transactionId":"t2","data":{}}]}`
	upstream := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write([]byte(pop))
		return err
	})
	serveOnce := func() {
		r := httptest.NewRequest("GET", "/api/v1/pop/queue/q", nil)
		r.Host = "pro.eu1.example.com"
		r.Header.Set("Authorization", "Bearer qk_live_full_pro")
		w := httptest.NewRecorder()
		if err := g.ServeHTTP(w, r, upstream); err != nil || w.Body.String() != pop {
			t.Fatalf("pop relayed %q, %v", w.Body, err)
		}
	}
	remaining := func() int64 {
		_, msgs := g.app.limits.buckets.Peek(pro.ID, pro.Limits)
		return msgs.Remaining
	}
	serveOnce()
	if got := remaining(); got != 8 {
		t.Fatalf("after delivering 2 messages the bucket holds %d, want 8", got)
	}
	serveOnce() // the same two messages again: redeliveries are free
	if got := remaining(); got != 8 {
		t.Fatalf("redeliveries were charged: %d left, want 8", got)
	}
}
