package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawCell is an upstream that records the exact bytes of every request it
// receives (head, body framing and any trailer section), so tests see what
// reached the cell on the wire and not only what a parser made of it.
type rawCell struct {
	t    testing.TB
	l    net.Listener
	mu   sync.Mutex
	reqs []rawRequest
}

// rawRequest is one request as the cell received it.
type rawRequest struct {
	Raw    []byte      // every byte of the request, as sent
	Lines  []string    // the head's field lines, verbatim, in order
	Body   []byte      // the decoded body
	Parsed http.Header // the head as net/http parses it
	Trail  http.Header // the trailer section as net/http parses it
	Path   string
}

func startRawCell(t testing.TB) *rawCell {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &rawCell{t: t, l: l}
	go c.accept()
	t.Cleanup(func() { _ = l.Close() })
	return c
}

func (c *rawCell) URL() string { return "http://" + c.l.Addr().String() }

func (c *rawCell) accept() {
	for {
		conn, err := c.l.Accept()
		if err != nil {
			return
		}
		go c.serve(conn)
	}
}

// recordingReader keeps what was read through it until taken.
type recordingReader struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func (r *recordingReader) take() []byte {
	out := bytes.Clone(r.buf.Bytes())
	r.buf.Reset()
	return out
}

// serve answers each request on conn after reading it whole. The gateway
// sends one request at a time per connection, so what was read from the
// connection when a request's body ended is exactly that request (the
// bufio reader may not read past it).
func (c *rawCell) serve(conn net.Conn) {
	defer conn.Close()
	rec := &recordingReader{r: conn}
	br := bufio.NewReader(rec)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		raw := rec.take()
		// Bytes the bufio reader holds beyond this request belong to the
		// next one; with one request in flight there are none.
		raw = raw[:len(raw)-br.Buffered()]
		c.mu.Lock()
		c.reqs = append(c.reqs, rawRequest{Raw: raw, Lines: headLines(raw), Body: body,
			Parsed: req.Header, Trail: req.Trailer, Path: req.URL.Path})
		c.mu.Unlock()
		answer := `{"queues":[]}`
		if req.URL.Path == "/api/v1/push" {
			answer = `[{"index":0,"message_id":"01a22ac0-e9c9-7000-84a3-8b2eb9b85461","partition_id":"1accaf93-9b03-46d1-b256-323f38572e2e","queueName":"q","status":"queued","trace_id":null,"transaction_id":"t-1"}]`
		}
		resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Raw-Cell: answered\r\nContent-Length: " +
			strconv.Itoa(len(answer)) + "\r\n\r\n" + answer
		if _, err := conn.Write([]byte(resp)); err != nil {
			return
		}
	}
}

// headLines returns the field lines of a raw request head.
func headLines(raw []byte) []string {
	head, _, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
	lines := strings.Split(string(head), "\r\n")
	if len(lines) == 0 {
		return nil
	}
	return lines[1:]
}

// requests returns what the cell received so far.
func (c *rawCell) requests() []rawRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]rawRequest(nil), c.reqs...)
}

// withRequestID returns the requests the gateway forwarded for a client
// request with the given id.
func (c *rawCell) withRequestID(rid string) []rawRequest {
	var out []rawRequest
	for _, r := range c.requests() {
		for _, v := range r.fieldValues("X-Queen-Request-Id") {
			if v == rid {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// fieldValues returns the values of every head line whose name is name in
// any case, or in any spelling with underscores for dashes.
func (r rawRequest) fieldValues(name string) []string {
	var out []string
	for _, line := range r.Lines {
		n, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if strings.EqualFold(strings.ReplaceAll(strings.TrimSpace(n), "_", "-"), name) {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// trailerSection returns what follows the last chunk of a chunked body
// (empty when the body is not chunked or carries no trailer fields).
func (r rawRequest) trailerSection() string {
	if !strings.EqualFold(strings.Join(r.fieldValues("Transfer-Encoding"), ","), "chunked") {
		return ""
	}
	_, rest, _ := bytes.Cut(r.Raw, []byte("\r\n\r\n"))
	i := bytes.LastIndex(rest, []byte("0\r\n"))
	if i < 0 {
		return "malformed chunked body"
	}
	return strings.TrimSuffix(string(rest[i+3:]), "\r\n")
}

// checkCellHeaders asserts what every request the gateway forwards must
// carry whatever the client sent: one x-queen-tenant (the cluster's), one
// Authorization (the cell's), one x-queen-request-id (rid), no hop-by-hop
// field of the client's and no trailer.
func checkCellHeaders(t testing.TB, r rawRequest, tenant, cellAuth, rid string) {
	t.Helper()
	if got := r.fieldValues("X-Queen-Tenant"); len(got) != 1 || got[0] != tenant {
		t.Errorf("cell received x-queen-tenant %q, want exactly [%s]\n%s", got, tenant, r.Raw)
	}
	if got := r.fieldValues("Authorization"); len(got) != 1 || got[0] != cellAuth {
		t.Errorf("cell received Authorization %q, want exactly [%s]\n%s", got, cellAuth, r.Raw)
	}
	if got := r.fieldValues("X-Queen-Request-Id"); len(got) != 1 || got[0] != rid {
		t.Errorf("cell received x-queen-request-id %q, want exactly [%s]\n%s", got, rid, r.Raw)
	}
	for _, hop := range []string{"Upgrade", "Trailer", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization"} {
		if got := r.fieldValues(hop); len(got) != 0 {
			t.Errorf("cell received the client's %s %q\n%s", hop, got, r.Raw)
		}
	}
	if got := r.fieldValues("Connection"); len(got) != 0 {
		t.Errorf("cell received Connection %q\n%s", got, r.Raw)
	}
	if s := r.trailerSection(); s != "" || len(r.Trail) != 0 {
		t.Errorf("cell received a trailer section %q (%v)\n%s", s, r.Trail, r.Raw)
	}
}

// sendRaw writes raw to a new connection to the gateway and reads one
// response.
func sendRaw(t testing.TB, port int, raw string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}
