package caddymodule

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// Refusals of the limit steps. Their Retry-After is per decision.
func rateLimited(msg string, retryAfter int) *apierror.Error {
	return &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.RateLimited, Message: msg, RetryAfter: retryAfter}
}

func quotaExceeded(msg string) *apierror.Error {
	return &apierror.Error{Status: http.StatusForbidden, Code: apierror.QuotaExceeded, Message: msg}
}

func payloadTooLarge(msg string) *apierror.Error {
	return &apierror.Error{Status: http.StatusRequestEntityTooLarge, Code: apierror.PayloadTooLarge, Message: msg}
}

var errTooManyParked = rateLimited("too many parked consumers", limits.ParkedRetryAfter)

// admitRequest takes the request's token from the cluster's request bucket
// and tells the client where it stands (RateLimit headers) before it hits
// the wall: the recorded SDKs never read Retry-After.
func (g *Gateway) admitRequest(w http.ResponseWriter, st *requestState, c *tenancy.Cluster) *apierror.Error {
	ls := g.app.limits
	ls.collectIdle()
	st.reqDecision = ls.buckets.CheckRequest(c.ID, c.Limits)
	if st.reqDecision.Unlimited || st.reqDecision.Allowed {
		return nil
	}
	return g.limitExceeded(st, c, rateLimited("request rate limit exceeded", st.reqDecision.RetryAfter))
}

// admitMessages takes n tokens from the cluster's message bucket.
func (g *Gateway) admitMessages(st *requestState, c *tenancy.Cluster, n int64) *apierror.Error {
	st.msgDecision = g.app.limits.buckets.CheckMessages(c.ID, c.Limits, n)
	if st.msgDecision.Unlimited || st.msgDecision.Allowed {
		return nil
	}
	return g.limitExceeded(st, c, rateLimited("message rate limit exceeded", st.msgDecision.RetryAfter))
}

// setRateLimitHeaders writes RateLimit-Policy and RateLimit for the bucket
// closest to empty. Routes that use the message bucket (produce, consume)
// report it too.
func (g *Gateway) setRateLimitHeaders(w http.ResponseWriter, st *requestState, c *tenancy.Cluster) {
	msgs := st.msgDecision
	if !st.msgChecked {
		switch st.route.Class {
		case tenancy.ClassProduce, tenancy.ClassConsume:
			_, msgs = g.app.limits.buckets.Peek(c.ID, c.Limits)
		default:
			msgs = limits.Decision{Unlimited: true}
		}
	}
	policy, limit := limits.RateLimitHeaders(st.reqDecision, msgs)
	if policy == "" {
		return
	}
	h := w.Header()
	st.headers.set(h, headerRateLimitPolicy, slotRateLimitPolicy, policy)
	st.headers.set(h, headerRateLimit, slotRateLimit, limit)
}

// The RateLimit headers' names as http.Header keeps them (canonical form),
// so that setting them needs no conversion.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
)

// parkSlot holds a parked-consumer slot for a long-poll pop while it waits
// upstream. The returned release is never nil and may be called twice.
func (g *Gateway) parkSlot(r *http.Request, st *requestState, c *tenancy.Cluster) (func(), *apierror.Error) {
	if !st.longPoll {
		return func() {}, nil
	}
	release, over := g.app.limits.parked.TryAcquire(c.ID, c.Limits.MaxParkedPops, !g.app.Shadow)
	if !over {
		return release, nil
	}
	if e := g.limitExceeded(st, c, errTooManyParked); e != nil {
		release()
		return func() {}, e
	}
	return release, nil
}

// limitExceeded logs a rate or admission refusal and returns it, or, in
// shadow mode, logs that it would have refused and lets the request on.
func (g *Gateway) limitExceeded(st *requestState, c *tenancy.Cluster, e *apierror.Error) *apierror.Error {
	if g.app.Shadow {
		g.logger.Info("limit exceeded (shadow)",
			zap.String("request_id", st.rid), zap.String("cluster", c.Slug),
			zap.String("code", string(e.Code)), zap.String("would_block", e.Message))
		return nil
	}
	g.logger.Info("limit exceeded",
		zap.String("request_id", st.rid), zap.String("cluster", c.Slug),
		zap.String("code", string(e.Code)), zap.String("reason", e.Message))
	return e
}
