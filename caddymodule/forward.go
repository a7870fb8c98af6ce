package caddymodule

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/queengate/queengate/internal/harden"
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

// clusterContext is what context.WithValue(ctx, clusterCtxKey{}, cluster)
// would make, kept in the request state instead of allocated on its own.
type clusterContext struct {
	context.Context
	cluster *tenancy.Cluster
}

func (c *clusterContext) Value(key any) any {
	if _, ok := key.(clusterCtxKey); ok {
		return c.cluster
	}
	return c.Context.Value(key)
}

// headerValues holds the values of the headers the pipeline sets, in the
// request state, so that setting one allocates nothing: each header gets a
// one-element slice of its own slot, capped so that an append elsewhere
// copies rather than writes into a neighbour.
type headerValues [6]string

const (
	slotResponseRequestID = iota
	slotRateLimitPolicy
	slotRateLimit
	slotAuthorization
	slotTenant
	slotRequestID
)

// set is h.Set(key, value) for a key already in canonical form.
func (v *headerValues) set(h http.Header, key string, slot int, value string) {
	v[slot] = value
	h[key] = v[slot : slot+1 : slot+1]
}

// rewriteUpstreamHeaders makes the request the cell sees: the caller's
// credential (its Authorization and any session cookie) and any tenant
// header it sent are removed, the cluster's broker tenant and the cell's
// own credential are injected, and the request id travels with it.
func (g *Gateway) rewriteUpstreamHeaders(h http.Header, c *tenancy.Cluster, rid, cellAuth string) {
	g.setUpstreamHeaders(h, c, rid, cellAuth, new(headerValues))
}

// setUpstreamHeaders is rewriteUpstreamHeaders with the values kept in v.
// The client's hop-by-hop declarations are settled first, so that nothing
// it sent can take the gateway's headers off the request later.
func (g *Gateway) setUpstreamHeaders(h http.Header, c *tenancy.Cluster, rid, cellAuth string, v *headerValues) {
	harden.ScrubForCell(h)
	delete(h, "Authorization")
	if cellAuth != "" {
		v.set(h, "Authorization", slotAuthorization, cellAuth)
	}
	v.set(h, headerTenant, slotTenant, c.BrokerTenant)
	v.set(h, headerRequestID, slotRequestID, rid)
	stripSessionCookies(h, g.app.cookieNames.Fleet)
}

// stripSessionCookies removes the gateway's session cookies from the
// Cookie header, keeping every other cookie as sent.
func stripSessionCookies(h http.Header, fleet string) {
	lines := h["Cookie"]
	if len(lines) == 0 || fleet == "" {
		return
	}
	kept := lines[:0]
	for _, line := range lines {
		if !strings.Contains(line, fleet) {
			kept = append(kept, line)
			continue
		}
		var parts []string
		for _, part := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if name == fleet || name == fleet+"_cell" || name == "__Host-"+fleet+"_cell" {
				continue
			}
			parts = append(parts, strings.TrimSpace(part))
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	if len(kept) == 0 {
		h.Del("Cookie")
		return
	}
	h["Cookie"] = kept
}

// upstreamTimeout is the bound on the whole upstream exchange: a long-poll
// pop gets its own wait (capped) plus a margin, everything else the fixed
// upstream timeout.
func (g *Gateway) upstreamTimeout(st *requestState) time.Duration {
	if !st.longPoll {
		return time.Duration(g.UpstreamTimeout)
	}
	d := min(time.Duration(st.longPollMs)*time.Millisecond, time.Duration(g.LongPollMax))
	return d + time.Duration(g.LongPollMargin)
}
