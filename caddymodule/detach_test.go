package caddymodule

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/jackc/pgx/v5/pgxpool"

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
// keeps being cancelled with its client.
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
