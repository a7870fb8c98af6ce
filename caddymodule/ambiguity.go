package caddymodule

// This file refuses what the broker could read otherwise than the gateway:
// the method, path and query of a request are read the broker's way, or
// the request is answered 400 before anything else looks at it.

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// readPopQuery reads the query parameters the gateway acts on for a pop
// (wait, timeout, autoAck) exactly as the broker will read them, so that a
// pop the broker parks always holds a parked slot and its longer deadline,
// and a pop that acknowledges what it gets counts as a write. A value the
// broker could decode in more than one way is refused (400), never guessed.
func (g *Gateway) readPopQuery(r *http.Request, st *requestState) *apierror.Error {
	// Only pops are read (queue pops are consumes, the ephemeral pop is a
	// gated route); everything else skips the path's second escaping.
	c := st.route.Class
	if r.URL.RawQuery == "" || (c != tenancy.ClassConsume && !(c == tenancy.ClassGated && st.route.Feature == tenancy.FeatureEphemeral)) {
		st.longPoll, st.longPollMs, st.popAutoAck = false, 0, false
		return nil
	}
	q, err := tenancy.ReadPopQuery(r.URL.EscapedPath(), r.URL.RawQuery)
	if err != nil {
		g.logger.Debug("ambiguous query refused", zap.String("request_id", st.rid), zap.Error(err))
		return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest, Message: err.Error()}
	}
	st.longPoll, st.longPollMs = q.Wait, q.TimeoutMs
	st.popAutoAck = q.AutoAck
	return nil
}

// The refusals of a query holding what the broker's schema cannot store.
var (
	errQueryNUL = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest,
		Message: "query holds U+0000 (%00); the broker cannot store it"}
	errConsumerGroupTooLong = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest,
		Message: "consumerGroup is longer than 255 characters, more than the broker can store"}
)

// queryStorageRefusal refuses a query the broker would decode into a value
// its database cannot hold (docs/enforcement.md, the schema's rules).
func queryStorageRefusal(rawQuery string) *apierror.Error {
	switch {
	case rawQuery == "":
		return nil
	case tenancy.QueryHoldsNUL(rawQuery):
		return errQueryNUL
	case tenancy.ConsumerGroupTooLong(rawQuery):
		return errConsumerGroupTooLong
	}
	return nil
}

// ambiguousPathRefusal is the 400 for a method or path the broker could
// match otherwise than the classifier did; the message names the reason
// (a dot segment, a lower-case method, ...), so the client can fix it.
func ambiguousPathRefusal(err error) *apierror.Error {
	e := *errAmbiguousPath
	e.Message = err.Error()
	return &e
}
