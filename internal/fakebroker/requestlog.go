package fakebroker

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// maxLoggedBody caps the body bytes kept per logged request.
const maxLoggedBody = 64 << 10

// maxBody caps the request bodies the broker accepts.
const maxBody = 64 << 20

// Request is one request as the broker received it, for tests to assert on.
type Request struct {
	Time          time.Time
	Method        string
	Path          string // decoded path
	RawQuery      string
	Host          string
	Header        http.Header // a clone of the request headers
	Body          []byte      // at most 64 KiB of the body
	BodyTruncated bool        // the body was longer than Body
	JWTSub        string      // sub of the verified JWT (Options.JWTSecret/JWTPublicKey), else ""
	JWTRole       string      // role claim of the verified JWT, else ""
	// Landed is the tenant a TenancyRust broker resolved the request to
	// (DefaultTenant when it carried no header; "" when the header was
	// refused as malformed, and in the other modes).
	Landed string
}

// Tenant returns the request's TenantHeader value ("" when absent).
func (r Request) Tenant() string { return r.Header.Get(TenantHeader) }

// requestLog is a bounded ring of the most recent requests.
type requestLog struct {
	mu   sync.Mutex
	buf  []Request
	next int
	full bool
}

func newRequestLog(size int) *requestLog {
	return &requestLog{buf: make([]Request, size)}
}

func (l *requestLog) add(r *http.Request, body []byte, id jwtIdentity, landed string) {
	rec := Request{
		Time:     time.Now(),
		Method:   r.Method,
		Path:     r.URL.Path,
		RawQuery: r.URL.RawQuery,
		Host:     r.Host,
		Header:   r.Header.Clone(),
		JWTSub:   id.sub,
		JWTRole:  id.role,
		Landed:   landed,
	}
	if len(body) > maxLoggedBody {
		rec.Body = append([]byte(nil), body[:maxLoggedBody]...)
		rec.BodyTruncated = true
	} else if body != nil {
		rec.Body = append([]byte(nil), body...)
	}
	l.mu.Lock()
	l.buf[l.next] = rec
	l.next = (l.next + 1) % len(l.buf)
	if l.next == 0 {
		l.full = true
	}
	l.mu.Unlock()
}

// Requests returns the logged requests, oldest first.
func (b *Broker) Requests() []Request {
	l := b.log
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Request
	if l.full {
		out = append(out, l.buf[l.next:]...)
	}
	return append(out, l.buf[:l.next]...)
}

// ResetRequests empties the request log.
func (b *Broker) ResetRequests() {
	l := b.log
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.buf)
	l.next = 0
	l.full = false
}

// readBody reads the whole request body, up to maxBody bytes.
func readBody(r *http.Request) (body []byte, tooLarge bool) {
	if r.Body == nil {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return data, false
	}
	return data, len(data) > maxBody
}
