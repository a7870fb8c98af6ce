package caddymodule

import (
	"net/http"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/crossorigin"
	"github.com/queengate/queengate/tenancy"
)

// buildCrossSitePolicy is the console's cross-site rule with the console's
// allowed origins (the identity block's public URL and CORS origins), so a
// page may make cookie-authenticated writes on the data plane exactly where
// it may on the console API.
func (g *Gateway) buildCrossSitePolicy() *crossorigin.Policy {
	var public string
	var allowed []string
	if id := g.app.Identity; id != nil {
		public, _ = crossorigin.NormalizeOrigin(id.PublicURL)
		allowed = id.CORSOrigins
	}
	return crossorigin.NewPolicy(public, allowed, requestIsHTTPS)
}

var sameOriginOnly = crossorigin.NewPolicy("", nil, requestIsHTTPS)

// crossSiteRefusal applies the cross-site rule to a request authenticated
// by a session cookie, which a browser attaches to requests other sites
// make. Only requests that change state are checked: every method but GET,
// HEAD, OPTIONS and TRACE, and every consume whatever its method: a pop
// with autoAck takes the messages away, and one without leases them, which
// hides them from the cluster's own consumers for the lease time.
func (g *Gateway) crossSiteRefusal(r *http.Request, st *requestState) *apierror.Error {
	if crossorigin.SafeMethod(r.Method) && !st.popAutoAck && st.route.Class != tenancy.ClassConsume {
		return nil
	}
	policy := g.crossSite
	if policy == nil { // a gateway that was never provisioned: its own origin only
		policy = sameOriginOnly
	}
	reason := policy.Refusal(r, true)
	if reason == "" {
		return nil
	}
	return &apierror.Error{Status: http.StatusForbidden, Code: apierror.CSRFRejected, Message: reason}
}
