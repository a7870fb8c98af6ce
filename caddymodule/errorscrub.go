package caddymodule

import (
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/cellerror"
)

// maxInspectedAnswer is the largest cell answer the gateway holds back to
// look for internals in its error text. The broker's error answers are a
// few hundred bytes; anything larger is a normal answer and streams as it
// comes.
const maxInspectedAnswer = 64 << 10

// errCellInternal replaces a cell answer whose error text exposes the
// cell's internals (see internal/cellerror). The status stays the cell's.
var errCellInternal = apierror.Error{Code: apierror.InternalError,
	Message: "the cell could not process this request; its error details are withheld (the operator can find them by this request id)"}

// cellErrorScrub sits between the metered response and the client. Small
// JSON answers are held until they are complete, then relayed unchanged,
// unless their top-level error text exposes the cell's internals (SQL,
// PL/pgSQL function names, stack traces): those are replaced with the
// gateway's envelope, keeping the status and the request id, and the
// original is logged at debug. Everything else (not JSON, larger than
// maxInspectedAnswer, HEAD, no body) passes straight through, so long
// answers still stream. The metered response before it sees the cell's
// own bytes, so billing reads what the broker said.
//
// It lives in the request state on every forwarded request, so it is kept
// small: the request id is the state's own, and the buffer for an answer
// that comes in pieces is allocated only then.
type cellErrorScrub struct {
	w      http.ResponseWriter
	log    *zap.Logger
	rid    *string
	status int32
	want   int32   // the answer's Content-Length (at most maxInspectedAnswer), -1 when unknown
	head   bool    // a HEAD request: no body will come
	seen   bool    // the response head has been handed to us
	held   bool    // holding the head and body until the answer is complete
	gone   bool    // the answer was replaced: whatever else comes is dropped
	buf    *[]byte // an answer that comes in pieces, in a pooled buffer (bodybuffer.go)
	// kept is the metered response's copy of the answer, when it keeps
	// every byte (a pop's, to bill it): the held answer is read from it
	// instead of copied a second time. The metered response appends each
	// piece after handing it here, so it holds what came before.
	kept *[]byte
	// judge may show an answer held in kept free of error text from its
	// own reading of it (a pop's billing reads every byte anyway), so
	// that it is not searched a second time.
	judge errorFreeJudge
}

// errorFreeJudge reads a whole answer for its own purpose and reports
// whether that reading proves it has no top-level "error" member (so
// cellerror.InternalDetail would find nothing to withhold).
type errorFreeJudge interface {
	errorFree(status int, body []byte) bool
}

// attach readies the scrub for one request and returns the writer the
// metered response writes to.
func (s *cellErrorScrub) attach(w http.ResponseWriter, r *http.Request, log *zap.Logger, rid *string) http.ResponseWriter {
	*s = cellErrorScrub{w: w, log: log, rid: rid, head: r.Method == http.MethodHead}
	return s
}

// holdInKept makes the scrub read a held answer from the metered
// response's copy, which keeps every byte of it. That copy is dropped
// only past meter.MaxBilledBody, far beyond maxInspectedAnswer, where the
// scrub has stopped holding.
func (s *cellErrorScrub) holdInKept(kept *[]byte, judge errorFreeJudge) {
	s.kept, s.judge = kept, judge
}

func (s *cellErrorScrub) Header() http.Header { return s.w.Header() }

// Unwrap lets http.ResponseController reach the client's writer.
func (s *cellErrorScrub) Unwrap() http.ResponseWriter { return s.w }

// FlushError flushes what has been relayed; while the answer is held there
// is nothing to flush (flushing would send a head before its status).
func (s *cellErrorScrub) FlushError() error {
	if s.held {
		return nil
	}
	return http.NewResponseController(s.w).Flush()
}

func (s *cellErrorScrub) WriteHeader(status int) {
	if status < 200 {
		s.w.WriteHeader(status)
		return
	}
	if s.seen {
		return
	}
	s.seen, s.status = true, int32(status)
	if s.want = s.inspectable(status); s.want != 0 {
		s.held = true
		return
	}
	s.w.WriteHeader(status)
}

// inspectable returns the length of an answer worth holding (-1 when its
// length is unknown), or 0 to let it pass.
func (s *cellErrorScrub) inspectable(status int) int32 {
	if s.head || status == http.StatusNoContent || status == http.StatusNotModified {
		return 0
	}
	// reverse_proxy copies the cell's headers in canonical form, so they
	// are read straight from the map (Header.Get would canonicalise again).
	h := s.w.Header()
	if enc := firstValue(h["Content-Encoding"]); enc != "" && enc != "identity" {
		return 0
	}
	if !isJSONMediaType(firstValue(h["Content-Type"])) {
		return 0
	}
	cl := firstValue(h["Content-Length"])
	if cl == "" {
		return -1
	}
	n, err := strconv.ParseInt(cl, 10, 64)
	if err != nil || n <= 0 || n > maxInspectedAnswer {
		return 0
	}
	return int32(n)
}

func firstValue(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// isJSONMediaType reports an application/json Content-Type, parameters
// (charset) allowed. It is mime.ParseMediaType's answer for this one type
// without the map that function allocates on every answer.
func isJSONMediaType(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "application/json")
}

func (s *cellErrorScrub) Write(b []byte) (int, error) {
	if !s.seen {
		s.WriteHeader(http.StatusOK)
	}
	if s.gone {
		return len(b), nil
	}
	if !s.held {
		return s.w.Write(b)
	}
	came := s.heldLen()
	if came == 0 && cellerror.CannotExpose(b) {
		// Not an object (a push's answer is an array): nothing in it is
		// judged, so it streams as it comes.
		s.held = false
		s.w.WriteHeader(int(s.status))
		return s.w.Write(b)
	}
	if came == 0 && len(b) == int(s.want) {
		// The whole answer in one write, as it usually comes: decide on
		// it in place, without a copy.
		return len(b), s.relay(b, false)
	}
	if s.kept != nil {
		if came+len(b) > maxInspectedAnswer {
			// Longer than any error answer: a normal one, send it on.
			s.held = false
			s.w.WriteHeader(int(s.status))
			if _, err := s.w.Write(*s.kept); err != nil {
				return 0, err
			}
			return s.w.Write(b)
		}
		// Held in the metered response's copy; decided when the cell is
		// done (finish), once that copy holds this piece too.
		return len(b), nil
	}
	if s.buf == nil {
		// Sized from the announced length, so it is not grown and copied
		// as the pieces come; given back once the answer is relayed.
		s.buf = getBodyBuffer(max(int(s.want), len(b), minPooledBody))
	}
	*s.buf = append(*s.buf, b...)
	switch {
	case s.want > 0 && len(*s.buf) >= int(s.want):
		return len(b), s.relay(*s.buf, false)
	case len(*s.buf) > maxInspectedAnswer:
		// Longer than any error answer: a normal one, send it on as it comes.
		s.held = false
		s.w.WriteHeader(int(s.status))
		_, err := s.w.Write(*s.buf)
		s.dropBuffer()
		return len(b), err
	}
	return len(b), nil
}

// heldLen is how much of the answer is held so far.
func (s *cellErrorScrub) heldLen() int {
	switch {
	case s.kept != nil:
		return len(*s.kept)
	case s.buf != nil:
		return len(*s.buf)
	}
	return 0
}

// dropBuffer gives the held pieces' buffer back to the pool.
func (s *cellErrorScrub) dropBuffer() {
	if s.buf != nil {
		putBodyBuffer(s.buf)
		s.buf = nil
	}
}

// finish relays an answer still held when the cell is done (one whose
// length was unknown, or shorter than announced, or held in the metered
// response's copy).
func (s *cellErrorScrub) finish() {
	if s.held {
		var body []byte
		switch {
		case s.kept != nil:
			body = *s.kept
		case s.buf != nil:
			body = *s.buf
		}
		_ = s.relay(body, s.kept != nil)
	}
}

// relay sends the complete answer, or the envelope in its place. kept
// says body is the metered response's copy, which the judge may read.
func (s *cellErrorScrub) relay(body []byte, kept bool) error {
	s.held = false
	if kept && s.judge != nil && s.judge.errorFree(int(s.status), body) {
		s.w.WriteHeader(int(s.status))
		_, err := s.w.Write(body)
		return err
	}
	if detail, exposes := cellerror.InternalDetail(body); exposes {
		s.log.Debug("cell error details withheld from the client",
			zap.String("request_id", *s.rid), zap.Int("status", int(s.status)),
			zap.Int("body_bytes", len(body)), zap.String("cell_error", detail))
		e := errCellInternal
		e.Status = int(s.status)
		apierror.Write(s.w, &e, *s.rid)
		s.dropBuffer()
		s.gone = true
		return nil
	}
	s.w.WriteHeader(int(s.status))
	_, err := s.w.Write(body)
	s.dropBuffer()
	return err
}
