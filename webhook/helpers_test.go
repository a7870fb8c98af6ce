package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/webhook"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fresh returns a pool on a new, migrated database.
func fresh(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t))
	if _, err := migrations.Apply(ctxT(t), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// emit records an event as every control-plane function does.
func emit(t *testing.T, pool *pgxpool.Pool, kind string, payload map[string]any) string {
	t.Helper()
	return scalar[string](t, pool, `SELECT queen_proxy.emit_outbox($1, $2)::text`, kind, payload)
}

// verify checks a delivery as a receiver would, written from the text of
// the Standard Webhooks specification and sharing no code with package
// webhook: the signed content is "<webhook-id>.<webhook-timestamp>.<body>",
// its HMAC-SHA256 under the secret's base64-decoded part after "whsec_",
// base64-encoded, must equal one of the space-delimited "v1,<signature>"
// entries of webhook-signature (compared in constant time), and the
// timestamp must be within five minutes of now.
func verify(secret string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp %s is %s away from now", ts, d)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, s := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(s, ",")
		if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

// received is one request a receiver took.
type received struct {
	ID      string
	Header  http.Header
	Body    []byte
	Type    string
	Data    map[string]any
	Status  int
	Arrived time.Time
}

// receiver is a webhook receiver: answer decides each request's status
// (by its 1-based number); it records every request.
type receiver struct {
	mu       sync.Mutex
	got      []received
	n        int
	answer   func(n int) int
	delay    time.Duration
	inFlight atomic.Int32
	maxIn    atomic.Int32
	srv      *http.Server
	url      string
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{answer: answer, url: "http://" + l.Addr().String() + "/hook"}
	r.serve(t, l)
	return r
}

func (r *receiver) serve(t *testing.T, l net.Listener) {
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	t.Cleanup(func() { _ = r.srv.Close() })
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	in := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for {
		m := r.maxIn.Load()
		if in <= m || r.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	body, _ := io.ReadAll(req.Body)
	var msg struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(body, &msg)
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	r.n++
	status := http.StatusOK
	if r.answer != nil {
		status = r.answer(r.n)
	}
	r.got = append(r.got, received{ID: req.Header.Get("webhook-id"), Header: req.Header.Clone(), Body: body,
		Type: msg.Type, Data: msg.Data, Status: status, Arrived: time.Now()})
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) all() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// accepted are the requests the receiver answered with a 2xx.
func (r *receiver) accepted() []received {
	var out []received
	for _, g := range r.all() {
		if g.Status >= 200 && g.Status < 300 {
			out = append(out, g)
		}
	}
	return out
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts a dispatcher with test timings until the test ends.
func run(t *testing.T, pool *pgxpool.Pool, cfg webhook.Config) {
	t.Helper()
	cfg.Pool = pool
	cfg.AllowLoopback = true
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.Gateway == "" {
		cfg.Gateway = "test-gateway"
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		webhook.New(cfg).Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
