package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"sync"
	"sync/atomic"
)

// A request body the gateway enforces is buffered once, whole, before
// anything is forwarded (the limits read it; the cell gets it byte for
// byte). It is held once: a body that declares its length is read into a
// buffer of exactly that size (over wholeAtOnce, reserved once its first
// eagerBody bytes came, which are copied over once), never grown; a
// chunked one grows by size classes. Buffers up to maxPooledBody go back to a pool, but only
// once nothing can read them any more: the pipeline is done with the
// request, and every reader handed to the proxy (r.Body, and what GetBody
// returns for a retry) has been closed. net/http's transport may still be
// writing a body after reverse_proxy returned (an answer that came before
// the body was sent) and closes it when done, possibly from another
// goroutine, so the readers lock against their Close; a reader that is
// never closed keeps its buffer out of the pool (the garbage collector
// takes it).

const (
	minPooledBody   = 512     // the smallest size class
	maxPooledBody   = 4 << 20 // larger bodies are allocated for themselves and not pooled
	bodyClassCount  = 14      // 512 B, 1 KiB, ..., 4 MiB
	chunkedBodyStep = 64 << 10
	eagerBody       = 1 << 20 // read before a larger declared length is reserved
	// wholeAtOnce is the largest declared length reserved before any of
	// it came, so that a push of one to two MiB (a thousand 1 KiB items)
	// is read straight into its own buffer; a larger body costs the copy
	// of its first eagerBody bytes into the reserved one (about 70 µs per
	// MiB under load).
	wholeAtOnce = 2 << 20
)

// bodyClasses holds the pooled buffers, by power-of-two capacity.
var bodyClasses [bodyClassCount]sync.Pool

// bodyClass is the index of the smallest class holding n bytes, or -1
// when n is over maxPooledBody.
func bodyClass(n int) int {
	if n > maxPooledBody {
		return -1
	}
	if n <= minPooledBody {
		return 0
	}
	return bits.Len(uint(n-1)) - bits.Len(uint(minPooledBody-1))
}

// getBodyBuffer returns an empty buffer with room for n bytes: pooled up
// to maxPooledBody, else exactly n. The buffer travels in its box (the
// pool's element), so that giving it back allocates nothing.
func getBodyBuffer(n int) *[]byte {
	c := bodyClass(n)
	if c < 0 {
		b := make([]byte, 0, n)
		return &b
	}
	if box, _ := bodyClasses[c].Get().(*[]byte); box != nil {
		*box = (*box)[:0]
		return box
	}
	b := make([]byte, 0, minPooledBody<<c)
	return &b
}

// putBodyBuffer gives a buffer back to its class; one not of a class's
// exact capacity (a large body's own) is left to the garbage collector.
func putBodyBuffer(box *[]byte) {
	c := bodyClass(cap(*box))
	if c < 0 || cap(*box) != minPooledBody<<c {
		return
	}
	*box = (*box)[:0]
	bodyClasses[c].Put(box)
}

// readBody reads a whole body into a buffer held once: of exactly the
// declared length when there is one (the server stops the body there),
// else grown a class at a time. A declared length over wholeAtOnce is
// reserved only once eagerBody bytes have come: a client that declares a
// large body and sends nothing holds no more than wholeAtOnce of the
// gateway's memory, and the one copy it costs is eagerBody's. A body of
// no declared length that ends at once (what the server hands on for a
// GET: Caddy wraps its empty body, so it is not http.NoBody) costs no
// buffer.
func readBody(body io.Reader, declared int64) (*[]byte, error) {
	if declared == 0 {
		var first [1]byte
		n, err := io.ReadAtLeast(body, first[:], 1)
		if n == 0 {
			if errors.Is(err, io.EOF) {
				return new([]byte), nil
			}
			return nil, err
		}
		// Bytes after all (only a handler other than the server's hands
		// on such a body): read as one of unknown length.
		body, declared = io.MultiReader(bytes.NewReader(first[:n]), body), -1
	}
	if declared > 0 {
		first := min(declared, eagerBody)
		if declared <= wholeAtOnce {
			first = declared
		}
		box := getBodyBuffer(int(first))
		buf := (*box)[:first]
		if err := readFull(body, buf); err != nil {
			putBodyBuffer(box)
			return nil, err
		}
		if declared > first {
			whole := getBodyBuffer(int(declared))
			*whole = append(*whole, buf...)
			putBodyBuffer(box)
			box, buf = whole, (*whole)[:declared]
			if err := readFull(body, buf[first:]); err != nil {
				putBodyBuffer(box)
				return nil, err
			}
		}
		// The declared length is all the server hands on; a reader that
		// has more (a test's, or another handler's) is refused as the
		// server would refuse it.
		var one [1]byte
		if m, _ := body.Read(one[:]); m > 0 {
			putBodyBuffer(box)
			return nil, errBodyLongerThanDeclared
		}
		*box = buf
		return box, nil
	}
	box := getBodyBuffer(chunkedBodyStep)
	for {
		buf := *box
		if len(buf) == cap(buf) {
			grown := getBodyBuffer(2 * cap(buf))
			*grown = append(*grown, buf...)
			putBodyBuffer(box)
			box, buf = grown, *grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		*box = buf[:len(buf)+n]
		if err == io.EOF {
			return box, nil
		}
		if err != nil {
			putBodyBuffer(box)
			return nil, err
		}
	}
}

// readFull is io.ReadFull, a body cut short being io.ErrUnexpectedEOF.
func readFull(body io.Reader, buf []byte) error {
	if _, err := io.ReadFull(body, buf); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

var (
	errBodyLongerThanDeclared = errors.New("request body longer than its Content-Length")
	errBodyReleased           = errors.New("request body already released: the request is over")
)

// heldBody is a buffered body and who may still read it: the pipeline
// (one hold, released when ServeHTTP returns) and each open reader.
type heldBody struct {
	box   *[]byte
	buf   []byte // *box
	holds atomic.Int32
}

func (h *heldBody) release() {
	if h.holds.Add(-1) == 0 {
		putBodyBuffer(h.box)
		h.box, h.buf = nil, nil
	}
}

// reader hands the body out once more (GetBody, for a retry): one hold
// until it is closed. Once every hold is gone the buffer may be another
// request's, so it is not handed out again.
func (h *heldBody) reader() (io.ReadCloser, error) {
	for {
		n := h.holds.Load()
		if n <= 0 {
			return nil, errBodyReleased
		}
		if h.holds.CompareAndSwap(n, n+1) {
			return &bodyReader{held: h, data: h.buf}, nil
		}
	}
}

// bodyReader reads a buffered request body for the proxy. Its reads and
// its Close lock against each other, so that the buffer is never given
// back while a read copies from it; after Close it reads nothing.
type bodyReader struct {
	mu     sync.Mutex
	held   *heldBody
	data   []byte
	off    int
	closed bool
}

// reset makes r the first reader of h (the one the request state holds,
// so that buffering a body allocates no reader); h counts its hold.
func (r *bodyReader) reset(h *heldBody) {
	r.held, r.data, r.off, r.closed = h, h.buf, 0, false
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.data = nil
	if r.held != nil {
		r.held.release()
	}
	return nil
}
