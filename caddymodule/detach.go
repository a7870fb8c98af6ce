package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// A produce request that reached the cell may be committed there whatever
// becomes of its client, so its exchange with the cell must not end when
// the client does: it runs under the gateway's own upstream deadline,
// detached from the client's cancellation, and the answer is read to its
// end (and tallied) even once nobody takes it. Where no answer comes, the
// request is billed its admitted items as unanswered (docs/metering.md).

// detachedContext is context.WithoutCancel(parent), kept in the request
// state so that detaching allocates nothing: the parent's values (the
// Caddy variables, the replacer) stay, its cancellation and deadline do
// not.
type detachedContext struct{ parent context.Context }

func (c *detachedContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *detachedContext) Done() <-chan struct{}       { return nil }
func (c *detachedContext) Err() error                  { return nil }
func (c *detachedContext) Value(key any) any           { return c.parent.Value(key) }

// A pop's answer is what the broker delivered (with autoAck, acknowledged
// too), so a client that breaks it off does not stop it either: from the
// answer's first byte on, a pop's exchange is detached like a produce
// request's and its answer read to its end and billed. Before that byte
// the pop is still the client's: a long poll whose client left stops
// waiting, so that the broker does not deliver to nobody.

// Phases of a pop's exchange (requestState.popPhase).
const (
	popWaiting   int32 = iota // no answer byte yet: the client leaving cancels the exchange
	popAnswering              // the answer began: the exchange no longer ends with the client
	popLeft                   // the client left before the answer began: the exchange is cancelled
)

// detachOnAnswer returns the context of a pop's exchange: cancelled with
// the client until the cell's first answer byte, detached from it after.
// Which came first is settled once (popPhase), so an answer that began is
// never cancelled by a client leaving a moment later. stop releases it.
func (st *requestState) detachOnAnswer(client context.Context) (ctx context.Context, stop func()) {
	st.detached = detachedContext{parent: client}
	ctx, cancel := context.WithCancel(&st.detached)
	unwatch := context.AfterFunc(client, func() {
		if st.popPhase.CompareAndSwap(popWaiting, popLeft) {
			cancel()
		}
	})
	// reverse_proxy adds a trace of its own, composed with this one.
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() {
		st.popPhase.CompareAndSwap(popWaiting, popAnswering)
	}})
	return ctx, func() {
		unwatch()
		cancel()
	}
}

// clientGone reports whether the client left: a write to it failed, or
// (on a detached exchange) its own context ended.
func (st *requestState) clientGone() bool {
	return st.rw.clientGone || (st.detached.parent != nil && st.detached.parent.Err() != nil)
}

// popPhase is an atomic phase of a pop's exchange.
type popPhase = atomic.Int32

// detaches reports the routes whose exchange outlives the client: those
// billed from what they add to the cell.
func detaches(rule billing) bool {
	switch rule {
	case billPush, billEphemeralPush, billTransaction, billCycle, billReplay:
		return true
	}
	return false
}

// relay runs the rest of the chain (reverse_proxy) for a detached route.
// reverse_proxy panics with http.ErrAbortHandler when the cell's answer
// breaks off after its head was relayed; aborted reports it, so that the
// caller books the request before it panics again and the client's stream
// is cut as reverse_proxy meant. Other panics go on as they came.
func relay(next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) (aborted bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked as is
				panic(p)
			}
			aborted = true
		}
	}()
	return false, next.ServeHTTP(w, r)
}

// mayHaveReachedCell reports whether a failed upstream exchange may have
// delivered the request to the cell. Only a failure to connect (and
// reverse_proxy's "no upstreams available", 503) proves it did not; a
// refused body (http.MaxBytesError) was never complete. Anything else (a
// reset, a timeout, an unreadable answer) may have followed a request the
// broker committed.
func mayHaveReachedCell(err error) bool {
	var dial reverseproxy.DialError
	if errors.As(err, &dial) {
		return false
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return false
	}
	// reverse_proxy wraps its 503 in a 502 of its own: look at each.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if he, ok := e.(caddyhttp.HandlerError); ok && he.StatusCode == http.StatusServiceUnavailable {
			return false
		}
	}
	return true
}

// markResendable tells the transport whether the request may be sent
// again on a fresh connection when a reused connection to the cell fails
// before any byte of the answer came (the cell closed it as the request
// went out: a keep-alive race). net/http's transport does that for a
// request marked idempotent by an Idempotency-Key header whose body it
// can read again (the buffered body's GetBody). The key is the request id
// (already sent as X-Queen-Request-Id; reverse_proxy's header copy drops
// a key of no value, which would mark it without sending it). Only a push
// whose every item carries a transactionId is marked: the broker stores
// such items once, however often they come. A client's own
// Idempotency-Key headers never reach the transport, so no other request
// is sent twice.
func markResendable(h http.Header, resendable bool, rid *string) {
	delete(h, "Idempotency-Key")
	delete(h, "X-Idempotency-Key")
	if resendable {
		h["Idempotency-Key"] = []string{*rid}
	}
}
