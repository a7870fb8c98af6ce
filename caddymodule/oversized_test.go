package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
)

// Answers larger than the gateway keeps of any answer (over
// meter.MaxBilledBody) are billed from what they say, read as they
// stream: a streams cycle's confirmed sink items, a replay's moved
// message, a pop's deliveries through the redelivery filter
// (docs/metering.md).

// hugeValue is a JSON string just long enough to make any answer holding
// it too large to keep.
var hugeValue = `"` + strings.Repeat("x", meter.MaxBilledBody+1) + `"`

// streamingAnswer answers status with body in pieces of 1 MiB, as
// reverse_proxy relays a large answer, and reads the request body first.
func streamingAnswer(body string) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		w.Header()["Content-Type"] = []string{"application/json"}
		w.WriteHeader(http.StatusOK)
		for len(body) > 0 {
			n := min(1<<20, len(body))
			if _, err := w.Write([]byte(body[:n])); err != nil {
				return err
			}
			body = body[n:]
		}
		return nil
	})
}

func serveTo(t *testing.T, env *testEnv, method, target, body string, next caddyhttp.Handler) {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = "pro.eu1.example.com"
	r.Header.Set("Authorization", "Bearer qk_live_full_pro")
	w := &discardWriter{h: http.Header{}}
	if err := env.g.ServeHTTP(w, r, next); err != nil || w.status != http.StatusOK {
		t.Fatalf("%s %s: status %d, %v", method, target, w.status, err)
	}
}

func TestOversizedCycleAnswerIsBilled(t *testing.T) {
	for _, data := range []string{`"small"`, hugeValue} {
		env, m := meteredEnv(t)
		answer := `{"messages":[{"data":` + data + `,"id":"m1"}],"push_results":[{"queueName":"q","status":"queued"},{"queueName":"q","status":"duplicate"},{"queueName":"q","status":"queued"}],"success":true}`
		serveTo(t, env, "POST", "/streams/v1/cycle", `{"push_items":[{"queue":"q","payload":1},{"queue":"q","payload":2},{"queue":"q","payload":3}]}`,
			streamingAnswer(answer))
		got := billed(m)
		if got[meter.OpPush].Msgs != 2 || got[meter.OpPush].Unanswered != 0 || got[meter.OpRead].Reqs != 1 {
			t.Fatalf("%d-byte answer: billed %+v; want 2 sink items the answer confirmed queued, and the request", len(answer), got)
		}
	}
}

func TestOversizedReplayAnswerIsBilled(t *testing.T) {
	for _, tc := range []struct {
		result string
		want   int64
	}{{`"moved"`, 1}, {`"duplicate"`, 0}} {
		for _, data := range []string{`"small"`, hugeValue} {
			env, m := meteredEnv(t)
			answer := `{"message":{"data":` + data + `},"result":` + tc.result + `,"success":true}`
			serveTo(t, env, "POST", "/api/v1/dlq/7/replay", "", streamingAnswer(answer))
			got := billed(m)
			if got[meter.OpPush].Msgs != tc.want || got[meter.OpConfigure].Reqs != 1 {
				t.Fatalf("result %s, %d-byte answer: billed %+v; want %d moved message and the request", tc.result, len(answer), got, tc.want)
			}
		}
	}
}

// A pop too large to keep goes through the redelivery filter like any
// other: its messages are remembered (a later pop redelivering one is not
// charged for it) and its redeliveries are not charged.
func TestOversizedPopGoesThroughTheRedeliveryFilter(t *testing.T) {
	env, pro := limitedEnv(t, func(l *limits.Effective) { l.MaxMsgsPerSec, l.MsgsBurst = 1, 100 })
	withFullProKey(env)
	// A bucket that refills only when told: at one message a second, a
	// slow run (-race) would otherwise refill what the test counts.
	env.g.app.limits.buckets = limits.NewBuckets(limits.NewManualClock(time.Unix(1_800_000_000, 0)).Now)
	remaining := func() int64 {
		_, msgs := env.g.app.limits.buckets.Peek(pro.ID, pro.Limits)
		return msgs.Remaining
	}
	message := func(txn, data string) string {
		return `{"consumerGroup":"__QUEUE_MODE__","data":` + data + `,"partitionId":"p1","transactionId":"` + txn + `"}`
	}
	half := `"` + strings.Repeat("y", meter.MaxBilledBody/2+1) + `"`
	oversized := `{"consumerGroup":"__QUEUE_MODE__","messages":[` + message("t1", half) + `,` + message("t2", half) + `],"success":true}`
	small := `{"consumerGroup":"__QUEUE_MODE__","messages":[` + message("t1", "1") + `,` + message("t3", "3") + `],"success":true}`

	serveTo(t, env, "GET", "/api/v1/pop/queue/q?batch=2", "", streamingAnswer(oversized))
	if got := remaining(); got != 98 {
		t.Fatalf("after an oversized pop of 2 new messages the bucket holds %d, want 98", got)
	}
	serveTo(t, env, "GET", "/api/v1/pop/queue/q?batch=2", "", streamingAnswer(small))
	if got := remaining(); got != 97 {
		t.Fatalf("after a pop redelivering t1 and delivering t3 the bucket holds %d, want 97 (t1 was remembered)", got)
	}
	serveTo(t, env, "GET", "/api/v1/pop/queue/q?batch=2", "", streamingAnswer(oversized))
	if got := remaining(); got != 97 {
		t.Fatalf("an oversized pop redelivering t1 and t2 was charged: %d left, want 97", got)
	}
}

// A delivered message without a key cannot be recognised as redelivered,
// so it is charged every time (failing closed), never dropped.
func TestKeylessDeliveriesAreCharged(t *testing.T) {
	env, pro := limitedEnv(t, func(l *limits.Effective) { l.MaxMsgsPerSec, l.MsgsBurst = 1, 100 })
	withFullProKey(env)
	// A bucket that refills only when told: at one message a second, a
	// slow run (-race) would otherwise refill what the test counts.
	env.g.app.limits.buckets = limits.NewBuckets(limits.NewManualClock(time.Unix(1_800_000_000, 0)).Now)
	remaining := func() int64 {
		_, msgs := env.g.app.limits.buckets.Peek(pro.ID, pro.Limits)
		return msgs.Remaining
	}
	answer := `{"messages":[{"data":1},{"partitionId":"p","transactionId":"t","consumerGroup":"g","data":2}],"success":true}`
	serveTo(t, env, "GET", "/api/v1/pop/queue/q", "", streamingAnswer(answer))
	if got := remaining(); got != 98 {
		t.Fatalf("after delivering a keyless and a keyed message the bucket holds %d, want 98", got)
	}
	serveTo(t, env, "GET", "/api/v1/pop/queue/q", "", streamingAnswer(answer))
	if got := remaining(); got != 97 {
		t.Fatalf("the second delivery: %d left, want 97 (the keyless message charged again, the keyed one not)", got)
	}
}
