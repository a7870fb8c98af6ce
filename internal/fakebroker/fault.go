package fakebroker

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"time"
)

// AnswerFault makes the broker slow or silent after it has done what a
// request asked: the request is handled (a push is stored) as usual, and
// only its answer is held back, cut in two, or never sent. Tests use it to
// put a client's hang-up, or a cell that breaks the connection, between
// the commit and the answer.
type AnswerFault struct {
	// Path limits the fault to requests for this path (exact, decoded);
	// empty means every request except /health.
	Path string
	// HeadDelay is how long the answer waits, after the request was
	// handled, before its status and headers are sent.
	HeadDelay time.Duration
	// BodyDelay is how long the answer stops after its head and the first
	// half of its body (flushed) before the rest.
	BodyDelay time.Duration
	// Reset closes the connection instead of answering (after HeadDelay),
	// with a TCP reset where the connection allows it.
	Reset bool
	// CutBody sends the head and the first half of the body (after
	// HeadDelay and BodyDelay), then closes the connection: an answer that
	// breaks off.
	CutBody bool
}

// SetAnswerFault installs f for the requests that follow; the zero
// AnswerFault removes it. A request waiting on a fault is released by Close.
func (b *Broker) SetAnswerFault(f AnswerFault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f == (AnswerFault{}) {
		b.fault = nil
		return
	}
	b.fault = &f
}

// StoredMessages is how many messages tenantID (empty = DefaultTenant)
// has had stored, by every route (duplicates the broker refused are not
// counted, messages consumed or expired since still are).
func (b *Broker) StoredMessages(tenantID string) int64 {
	if tenantID == "" {
		tenantID = DefaultTenant
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.tenants[tenantID]; t != nil {
		return t.stored
	}
	return 0
}

// faultFor returns the fault that applies to r, if any.
func (b *Broker) faultFor(r *http.Request) *AnswerFault {
	b.mu.Lock()
	f := b.fault
	b.mu.Unlock()
	if f == nil || r.URL.Path == "/health" || (f.Path != "" && f.Path != r.URL.Path) {
		return nil
	}
	return f
}

// heldAnswer is an answer kept whole while its request is handled, so a
// fault can decide when and how much of it to send.
type heldAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldAnswer) Header() http.Header { return h.header }

func (h *heldAnswer) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func (h *heldAnswer) Write(p []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(p)
}

// serveFaulty handles the request into a held answer, then sends it as f
// says.
func (b *Broker) serveFaulty(w http.ResponseWriter, f *AnswerFault, handler func(*Broker, *reqCtx), rc *reqCtx) {
	held := &heldAnswer{header: http.Header{}}
	rc.w = held
	handler(b, rc)
	if !b.pause(f.HeadDelay) {
		return
	}
	if f.Reset {
		b.dropConnection(w)
		return
	}
	for k, v := range held.header {
		w.Header()[k] = v
	}
	body := held.body.Bytes()
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if held.status == 0 {
		held.status = http.StatusOK
	}
	w.WriteHeader(held.status)
	half := len(body) / 2
	_, _ = w.Write(body[:half])
	_ = http.NewResponseController(w).Flush()
	if !b.pause(f.BodyDelay) {
		return
	}
	if f.CutBody {
		b.dropConnection(w)
		return
	}
	_, _ = w.Write(body[half:])
}

// pause waits d, or until the broker closes (false).
func (b *Broker) pause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.closed:
		return false
	}
}

// dropConnection closes the request's connection without another byte.
func (b *Broker) dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the stream instead.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
