package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/queengate/queengate/meter"
)

// meteredEnv is the test gateway with the full pro key and a meter that
// records (its pool is never reached): Unflushed shows what was billed.
func meteredEnv(t *testing.T) (*testEnv, *meter.Meter) {
	t.Helper()
	env := newTestEnv(t)
	withFullProKey(env)
	pool, err := pgxpool.New(context.Background(), "postgres://test@127.0.0.1:1/test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := meter.New(meter.Config{Pool: pool, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	env.g.app.backend.meter = m
	return env, m
}

// billed sums what the meter holds for the pro cluster, per op class.
func billed(m *meter.Meter) map[meter.Op]meter.Unflushed {
	out := map[meter.Op]meter.Unflushed{}
	for _, u := range m.Unflushed(idPro) {
		s := out[u.Op]
		s.Reqs += u.Reqs
		s.Msgs += u.Msgs
		s.Unanswered += u.Unanswered
		out[u.Op] = s
	}
	return out
}

// goneClient is a client that left: every write fails.
type goneClient struct {
	h      http.Header
	status int
	writes int
}

func (c *goneClient) Header() http.Header { return c.h }
func (c *goneClient) WriteHeader(s int)   { c.status = s }
func (c *goneClient) Write(p []byte) (int, error) {
	c.writes++
	return 0, errors.New("write: connection reset by peer")
}

// A produce request's exchange is not cancelled with its client, and an
// answer the client no longer takes is still read whole and billed; a pop
// whose answer has not begun keeps being cancelled with its client.
func TestDetachedExchangeOutlivesTheClient(t *testing.T) {
	env, m := meteredEnv(t)
	answer := `[{"status":"queued"},{"status":"queued"},{"status":"duplicate"}]`
	for _, tc := range []struct {
		name, method, target, body string
		detached                   bool
	}{
		{"push", "POST", "/api/v1/push", push("q", "q", "q"), true},
		{"pop", "GET", "/api/v1/pop/queue/q?batch=1", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var rd io.Reader
			if tc.body != "" {
				rd = strings.NewReader(tc.body)
			}
			r := httptest.NewRequestWithContext(ctx, tc.method, tc.target, rd)
			r.Host = "pro.eu1.example.com"
			r.Header.Set("Authorization", "Bearer qk_live_full_pro")
			client := &goneClient{h: http.Header{}}
			var upstreamErr error
			var relayed int
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				cancel() // the client leaves once its request was sent
				if !tc.detached {
					// The pop's exchange ends with its client (as soon as
					// the client's context says so).
					select {
					case <-r.Context().Done():
					case <-time.After(5 * time.Second):
					}
				}
				upstreamErr = r.Context().Err()
				w.WriteHeader(http.StatusOK)
				for i := 0; i < len(answer); i += 7 {
					n, err := w.Write([]byte(answer[i:min(i+7, len(answer))]))
					if err != nil {
						return err
					}
					relayed += n
				}
				return nil
			})
			before := billed(m)[meter.OpPush].Msgs
			if err := env.g.ServeHTTP(client, r, next); err != nil && tc.detached {
				t.Fatalf("ServeHTTP: %v", err)
			}
			if tc.detached != (upstreamErr == nil) {
				t.Fatalf("upstream context error %v once the client left; detached %v", upstreamErr, tc.detached)
			}
			if !tc.detached {
				return
			}
			if relayed != len(answer) || client.writes != 1 {
				t.Fatalf("relayed %d of %d bytes with %d client writes; want the whole answer read after one failed write",
					relayed, len(answer), client.writes)
			}
			if got := billed(m)[meter.OpPush].Msgs - before; got != 2 {
				t.Fatalf("billed %d messages, want the 2 the answer queued", got)
			}
		})
	}
}

// No answer, or half of one: every produce route bills its admitted items
// as unanswered, unless the cell was never reached.
func TestUnansweredProduceBillsAdmittedItems(t *testing.T) {
	for _, tc := range []struct {
		name, target, body string
		op                 meter.Op
		items              int64
		upstream           error // returned by the handler after the pipeline
		cut                bool  // the answer breaks off after its head instead
	}{
		{"push reset", "/api/v1/push", push("a", "b", "c"), meter.OpPush, 3, caddyhttp.Error(502, io.ErrUnexpectedEOF), false},
		{"push timeout", "/api/v1/push", push("a"), meter.OpPush, 1, caddyhttp.Error(504, context.DeadlineExceeded), false},
		{"push cut", "/api/v1/push", push("a", "b"), meter.OpPush, 2, nil, true},
		{"transaction", "/api/v1/transaction",
			`{"operations":[{"type":"push","items":[{"queue":"q","payload":1},{"queue":"q","payload":2}]}]}`, meter.OpTxn, 2,
			caddyhttp.Error(502, io.ErrUnexpectedEOF), false},
		{"ephemeral push", "/api/v1/ephemeral/push", `{"queue":"q","messages":[1,2,3,4]}`, meter.OpPush, 4,
			caddyhttp.Error(502, io.ErrUnexpectedEOF), false},
		{"streams cycle", "/streams/v1/cycle", `{"push_items":[{"queue":"q","payload":1},{"queue":"q","payload":2}]}`, meter.OpPush, 2,
			caddyhttp.Error(502, io.ErrUnexpectedEOF), false},
		{"dial failed", "/api/v1/push", push("a", "b"), meter.OpPush, 0,
			caddyhttp.Error(502, reverseproxy.DialError{}), false},
		{"no upstream", "/api/v1/push", push("a", "b"), meter.OpPush, 0,
			caddyhttp.Error(502, caddyhttp.Error(503, errors.New("no upstreams available"))), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, m := meteredEnv(t)
			r := httptest.NewRequest("POST", tc.target, strings.NewReader(tc.body))
			r.Host = "pro.eu1.example.com"
			r.Header.Set("Authorization", "Bearer qk_live_full_pro")
			w := httptest.NewRecorder()
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				if tc.cut {
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write([]byte(`[{"status":"queued"},`))
					panic(http.ErrAbortHandler)
				}
				return tc.upstream
			})
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.cut || (p != nil && p != http.ErrAbortHandler) {
						t.Fatalf("panic %v; a cut answer must abort the client's stream", p)
					}
				}()
				_ = env.g.ServeHTTP(w, r, next)
			}()
			got := billed(m)[tc.op]
			if got.Msgs != tc.items || got.Unanswered != tc.items {
				t.Fatalf("billed %d messages (%d unanswered), want %d (all unanswered)", got.Msgs, got.Unanswered, tc.items)
			}
		})
	}
}

// A pop that gets no answer is billed no message, as before.
func TestUnansweredPopBillsNothing(t *testing.T) {
	env, m := meteredEnv(t)
	w, _ := env.g.do(t, proCall("GET", "/api/v1/pop/queue/q?batch=5", ""), caddyhttp.Error(502, io.ErrUnexpectedEOF))
	if w.Code != http.StatusBadGateway {
		t.Fatalf("status %d", w.Code)
	}
	if got := billed(m)[meter.OpDelivery]; got.Reqs != 1 || got.Msgs != 0 || got.Unanswered != 0 {
		t.Fatalf("pop billed %+v, want one request and nothing else", got)
	}
}

// popAnswerOf is a pop answer of the broker's shape with n messages.
func popAnswerOf(n int) string {
	var b strings.Builder
	b.WriteString(`{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-30T04:40:08.409Z","data":{"n":%d},"id":"01a22ac0-cdd3-7000-9f54-11a670d5%04x","leaseId":null,"partition":"Default","partitionId":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","producerSub":null,"traceId":null,"transactionId":"01a22ac0-cdd0-739c-987b-5766b13d%04x"}`, i, i, i)
	}
	b.WriteString(`],"partition":"Default","partitionId":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","queue":"q","success":true}`)
	return b.String()
}

// A pop is billed what the broker delivered whatever its client does:
// once the answer began, a client that leaves does not cancel the
// exchange, the answer is read to its end and billed, and the request is
// counted; an answer that itself breaks off is billed the messages it had
// begun (an answer past the kept copy's bound is read by meter.PopKeys,
// whose count of a cut answer meter's tests check).
func TestPopIsBilledWhenItsClientLeaves(t *testing.T) {
	for _, tc := range []struct {
		name     string
		messages int
		cutAt    float64 // the answer breaks off after this share of it; 0: it ends whole
		billed   int64   // -1: the messages begun before the cut
	}{
		{"whole", 20, 0, 20},
		{"cut", 20, 0.5, -1},
		{"cut early", 20, 0.1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, m := meteredEnv(t)
			answer := popAnswerOf(tc.messages)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := httptest.NewRequestWithContext(ctx, "GET", "/api/v1/pop/queue/q?batch=10000", nil)
			r.Host = "pro.eu1.example.com"
			r.Header.Set("Authorization", "Bearer qk_live_full_pro")
			client := &goneClient{h: http.Header{}}
			end := len(answer)
			if tc.cutAt > 0 {
				// Cut inside the message after the share, which counts.
				end = strings.Index(answer[int(float64(len(answer))*tc.cutAt):], `{"consumerGroup"`) +
					int(float64(len(answer))*tc.cutAt) + 60
			}
			want := tc.billed
			if want < 0 {
				want = int64(strings.Count(answer[:end], `{"consumerGroup":"__QUEUE_MODE__","createdAt"`))
			}
			var relayed int
			var upstreamErr error
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				// The transport saw the answer's first byte; then the
				// client leaves.
				httptrace.ContextClientTrace(r.Context()).GotFirstResponseByte()
				cancel()
				time.Sleep(50 * time.Millisecond)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				for i := 0; i < end; i += 4096 {
					n, err := w.Write([]byte(answer[i:min(i+4096, end)]))
					if err != nil {
						return err
					}
					relayed += n
				}
				upstreamErr = r.Context().Err()
				if end < len(answer) {
					panic(http.ErrAbortHandler)
				}
				return nil
			})
			func() {
				defer func() {
					if p := recover(); (p != nil) != (tc.cutAt > 0) || (p != nil && p != http.ErrAbortHandler) {
						t.Fatalf("panic %v; only a cut answer aborts the client's stream", p)
					}
				}()
				if err := env.g.ServeHTTP(client, r, next); err != nil {
					t.Fatalf("ServeHTTP: %v", err)
				}
			}()
			if upstreamErr != nil || relayed != end {
				t.Fatalf("the exchange ended with its client (%v), %d of %d bytes read", upstreamErr, relayed, end)
			}
			got := billed(m)[meter.OpDelivery]
			if got.Reqs != 1 || got.Msgs != want {
				t.Fatalf("billed %d requests, %d messages; want 1 and %d", got.Reqs, got.Msgs, want)
			}
		})
	}
}

// The warning of a produce request billed as unanswered says whether its
// client had left: a client that hung up before any answer byte (no write
// to it ever failed) is gone, one that waits is not.
func TestUnansweredWarningSaysWhetherTheClientLeft(t *testing.T) {
	for _, leaves := range []bool{true, false} {
		env, _ := meteredEnv(t)
		core, logs := observer.New(zapcore.WarnLevel)
		env.g.logger = zap.New(core)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, "POST", "/api/v1/push", strings.NewReader(push("a", "b")))
		r.Host = "pro.eu1.example.com"
		r.Header.Set("Authorization", "Bearer qk_live_full_pro")
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			if leaves {
				cancel()
			}
			return caddyhttp.Error(502, io.ErrUnexpectedEOF)
		})
		_ = env.g.ServeHTTP(httptest.NewRecorder(), r, next)
		entries := logs.FilterMessageSnippet("billed as unanswered").All()
		if len(entries) != 1 {
			t.Fatalf("client leaves %v: %d unanswered warnings, want 1", leaves, len(entries))
		}
		if got := entries[0].ContextMap()["client_gone"]; got != leaves {
			t.Fatalf("client leaves %v: the warning says client_gone %v", leaves, got)
		}
	}
}
