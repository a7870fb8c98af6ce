package caddymodule

import (
	"net/http"
	"strings"
	"time"

	"github.com/queengate/queengate/tenancy"
)

const (
	headerRequestID = "X-Queen-Request-Id"
	headerTenant    = "X-Queen-Tenant"

	varRequestID   = "queen.request_id"
	varClusterSlug = "queen.cluster"

	// defaultDialTimeout bounds connecting to a cell.
	defaultDialTimeout = 5 * time.Second
)

// clusterCtxKey carries the resolved cluster from the pipeline to the
// dynamic upstream.
type clusterCtxKey struct{}

// bearerCredential extracts the credential of the Authorization header: a
// leading "Bearer " is stripped when present, and surrounding space
// trimmed.
func bearerCredential(h http.Header) string {
	v := h.Get("Authorization")
	v = strings.TrimPrefix(v, "Bearer ")
	return strings.TrimSpace(v)
}

func isAPIKey(cred string) bool { return strings.HasPrefix(cred, "qk_") }

// rewriteUpstreamHeaders makes the request the cell sees: the caller's
// credential and any tenant header it sent are removed, the cluster's
// broker tenant and (when the cell has one) the cell secret are injected,
// and the request id travels with it.
func rewriteUpstreamHeaders(h http.Header, c *tenancy.Cluster, rid string) {
	h.Del("Authorization")
	h.Del(headerTenant)
	if c.CellSecret != "" {
		h.Set("Authorization", "Bearer "+c.CellSecret)
	}
	h.Set(headerTenant, c.BrokerTenant)
	h.Set(headerRequestID, rid)
}

// upstreamTimeout is the bound on the whole upstream exchange: a long-poll
// pop gets its own wait (capped) plus a margin, everything else the fixed
// upstream timeout.
func (g *Gateway) upstreamTimeout(r *http.Request) time.Duration {
	wait, ms := tenancy.LongPoll(r.URL.Path, r.URL.RawQuery)
	if !wait {
		return time.Duration(g.UpstreamTimeout)
	}
	d := min(time.Duration(ms)*time.Millisecond, time.Duration(g.LongPollMax))
	return d + time.Duration(g.LongPollMargin)
}
