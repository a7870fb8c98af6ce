package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// bigPush is a push of about size bytes: items of 1 MiB payloads.
func bigPush(size int) []byte {
	filler := strings.Repeat("x", 1<<20)
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"big","payload":{"n":%d,"data":%q}}`, i, filler)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// streamingCell reads the forwarded body as reverse_proxy's transport
// does (a piece at a time, then Close) and answers every item queued.
func streamingCell(items int) caddyhttp.Handler {
	answer := "[" + strings.TrimSuffix(strings.Repeat(`{"status":"queued"},`, items), ",") + "]"
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return err
		}
		_ = r.Body.Close()
		w.WriteHeader(http.StatusOK)
		_, err := io.WriteString(w, answer)
		return err
	})
}

// heapObjects samples the bytes of live and not yet swept heap objects.
func heapObjects(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A push of 64 MiB costs the gateway one body's worth of memory plus a
// small constant: it is read once into a buffer of its declared length,
// and nothing on the way to the cell copies it. Both the bytes allocated
// while it is served (which bound any peak) and the heap's sampled peak
// are measured.
func TestPushOf64MiBHoldsTheBodyOnce(t *testing.T) {
	env, _ := meteredEnv(t)
	env.g.MaxBodyBytes = 80 << 20
	body := bigPush(64 << 20)
	items := bytes.Count(body, []byte(`{"queue":`))
	const slack = 2 << 20

	serveOnce := func() (allocated, peak uint64) {
		r := httptest.NewRequest("POST", "/api/v1/push", bytes.NewReader(body))
		r.Host = "pro.eu1.example.com"
		r.Header.Set("Authorization", "Bearer qk_live_full_pro")
		w := httptest.NewRecorder()
		runtime.GC()
		samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		base := heapObjects(samples)
		metrics.Read(allocs)
		allocBefore := allocs[0].Value.Uint64()
		var top atomic.Uint64
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for {
				if v := heapObjects(s); v > top.Load() {
					top.Store(v)
				}
				select {
				case <-done:
					return
				case <-time.After(50 * time.Microsecond):
				}
			}
		})
		err := env.g.ServeHTTP(w, r, streamingCell(items))
		metrics.Read(allocs)
		close(done)
		wg.Wait()
		if err != nil || w.Code != http.StatusOK {
			t.Fatalf("push of %d bytes: %v, status %d: %s", len(body), err, w.Code, w.Body)
		}
		return allocs[0].Value.Uint64() - allocBefore, top.Load() - min(top.Load(), base)
	}
	serveOnce() // first use: caches, buckets, the admission registry
	allocated, peak := serveOnce()
	t.Logf("body %d bytes: %d bytes allocated while serving it, heap peak %d bytes over the start", len(body), allocated, peak)
	if allocated > uint64(len(body))+slack {
		t.Errorf("serving a push of %d bytes allocated %d bytes: more than the body once plus %d", len(body), allocated, slack)
	}
	if peak > uint64(len(body))+slack {
		t.Errorf("serving a push of %d bytes raised the heap by %d bytes at its peak: more than the body once plus %d", len(body), peak, slack)
	}
}

// A body is read into a buffer of exactly its declared length; a body
// that ends early, or runs past it, is not taken; a chunked one grows.
func TestReadBody(t *testing.T) {
	box, err := readBody(strings.NewReader("hello"), 5)
	if err != nil || string(*box) != "hello" {
		t.Fatalf("declared: %v", err)
	}
	if _, err := readBody(strings.NewReader("hel"), 5); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v, want unexpected EOF", err)
	}
	if _, err := readBody(strings.NewReader("hello world"), 5); !errors.Is(err, errBodyLongerThanDeclared) {
		t.Fatalf("long body: %v", err)
	}
	big := strings.Repeat("0123456789", 30_000) // over one chunked step
	box, err = readBody(io.MultiReader(strings.NewReader(big[:1000]), strings.NewReader(big[1000:])), -1)
	if err != nil || string(*box) != big {
		t.Fatalf("chunked: %v", err)
	}
	// A large declared length is reserved only once its first eagerBody
	// bytes came.
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(allocs)
	before := allocs[0].Value.Uint64()
	if _, err := readBody(strings.NewReader(strings.Repeat("a", 100)), 8<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("8 MiB declared, 100 bytes sent: %v", err)
	}
	metrics.Read(allocs)
	if got := allocs[0].Value.Uint64() - before; got > eagerBody+64<<10 {
		t.Fatalf("a body declared 8 MiB that sent 100 bytes cost %d bytes", got)
	}
	// An empty body of no declared length, as the server hands on for a
	// GET, takes no buffer; one that has bytes after all is read whole.
	metrics.Read(allocs)
	before = allocs[0].Value.Uint64()
	box, err = readBody(io.NopCloser(strings.NewReader("")), 0)
	metrics.Read(allocs)
	if got := allocs[0].Value.Uint64() - before; err != nil || cap(*box) != 0 || got > 64 {
		t.Fatalf("an empty body took a buffer or %d bytes (%v)", got, err)
	}
	box, err = readBody(io.MultiReader(strings.NewReader("a"), strings.NewReader("bc")), 0)
	if err != nil || string(*box) != "abc" {
		t.Fatalf("bytes behind a zero length: %q, %v", *box, err)
	}
	large, err := readBody(strings.NewReader(strings.Repeat("z", maxPooledBody+1)), maxPooledBody+1)
	if err != nil || cap(*large) != maxPooledBody+1 {
		t.Fatalf("a body over the pooled sizes gets a buffer of its own size: %v", err)
	}
}

// The buffer goes back only when the pipeline and every reader let go of
// it; a reader cannot read after its Close, and no reader is handed out
// once the body is released.
func TestHeldBodyHolds(t *testing.T) {
	box := getBodyBuffer(10)
	*box = append(*box, "abc"...)
	h := &heldBody{box: box, buf: *box}
	h.holds.Store(2)
	var first bodyReader
	first.reset(h)
	retry, err := h.reader()
	if err != nil {
		t.Fatal(err)
	}
	h.release() // the pipeline
	_ = first.Close()
	if h.buf == nil {
		t.Fatal("released while the retry's reader is still open")
	}
	if b, err := io.ReadAll(retry); err != nil || string(b) != "abc" {
		t.Fatalf("retry read %q, %v", b, err)
	}
	_ = retry.Close()
	_ = retry.Close() // idempotent: one hold per reader
	if h.buf != nil || h.holds.Load() != 0 {
		t.Fatalf("after every hold: buf %v, holds %d", h.buf != nil, h.holds.Load())
	}
	if _, err := first.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := h.reader(); !errors.Is(err, errBodyReleased) {
		t.Fatalf("reader after release: %v", err)
	}
}

// The proxy's transport may still be sending a body after reverse_proxy
// returned, and closes it when done: until then its buffer is not given to
// another request, which would overwrite what the cell is being sent.
func TestBodyStillBeingSentIsNotReused(t *testing.T) {
	env, _ := meteredEnv(t)
	first := push("first", "first", "first")
	late := make(chan io.ReadCloser, 1)
	keepReading := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		late <- r.Body // read after the handler returned, as the transport's writer may
		w.WriteHeader(http.StatusOK)
		_, err := io.WriteString(w, `[{"status":"queued"},{"status":"queued"},{"status":"queued"}]`)
		return err
	})
	do := func(body string, next caddyhttp.Handler) {
		t.Helper()
		r := httptest.NewRequest("POST", "/api/v1/push", strings.NewReader(body))
		r.Host = "pro.eu1.example.com"
		r.Header.Set("Authorization", "Bearer qk_live_full_pro")
		w := httptest.NewRecorder()
		if err := env.g.ServeHTTP(w, r, next); err != nil || w.Code != http.StatusOK {
			t.Fatalf("push: %v %d %s", err, w.Code, w.Body)
		}
	}
	do(first, keepReading)
	pending := <-late
	// Same size class, other bytes: were the first buffer pooled, these
	// requests would take it and write over it.
	other := strings.ReplaceAll(first, "first", "OTHER")
	for range 50 {
		do(other, streamingCell(3))
	}
	got, err := io.ReadAll(pending)
	if err != nil || string(got) != first {
		t.Fatalf("the body still being sent read %q, %v; want %q", got, err, first)
	}
	_ = pending.Close()
}
