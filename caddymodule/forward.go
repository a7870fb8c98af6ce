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

// rewriteUpstreamHeaders makes the request the cell sees: the caller's
// credential (its Authorization and any session cookie) and any tenant
// header it sent are removed, the cluster's broker tenant and the cell's
// own credential are injected, and the request id travels with it.
func (g *Gateway) rewriteUpstreamHeaders(h http.Header, c *tenancy.Cluster, rid, cellAuth string) {
	h.Del("Authorization")
	h.Del(headerTenant)
	if cellAuth != "" {
		h.Set("Authorization", cellAuth)
	}
	h.Set(headerTenant, c.BrokerTenant)
	h.Set(headerRequestID, rid)
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
