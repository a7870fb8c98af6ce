package caddymodule

import (
	"context"
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// ServeHTTP is the data-plane pipeline, in its load-bearing order. Each
// step either refuses the request with the error envelope or hands it on.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rid := newRequestID()
	w.Header().Set(headerRequestID, rid)
	caddyhttp.SetVar(r.Context(), varRequestID, rid)

	// 1. Cluster resolution: the Host names the cluster.
	cluster, refusal := g.resolveCluster(r)
	if refusal != nil {
		return g.refuse(w, r, rid, refusal)
	}
	caddyhttp.SetVar(r.Context(), varClusterSlug, cluster.Slug)

	// 2. Status gate: suspended and deleting clusters are not served.
	if !cluster.Status.Serves() {
		return g.refuse(w, r, rid, errClusterSuspended)
	}

	// 3. Authentication: an API key of this very cluster.
	if refusal := g.authenticate(r, cluster); refusal != nil {
		return g.refuse(w, r, rid, refusal)
	}

	// 4. Forward to the cluster's cell, bounded by the upstream timeout.
	ctx, cancel := context.WithTimeout(r.Context(), g.upstreamTimeout(r))
	defer cancel()
	ctx = context.WithValue(ctx, clusterCtxKey{}, cluster)
	r = r.WithContext(ctx)
	rewriteUpstreamHeaders(r.Header, cluster, rid)

	rw := &responseStarted{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	err := next.ServeHTTP(rw, r)
	if err == nil || rw.started {
		return err
	}
	return g.upstreamFailure(w, r, rid, err)
}

// resolveCluster finds the cluster the Host names. Unknown hosts, and known
// ones the database cannot confirm during an outage past the stale grace,
// are refused alike: the request fails closed.
func (g *Gateway) resolveCluster(r *http.Request) (*tenancy.Cluster, *apierror.Error) {
	var slug string
	if domains := g.app.BaseDomains; len(domains) > 0 {
		s, ok := tenancy.SlugUnderDomain(r.Host, domains)
		if !ok {
			return nil, errClusterUnknown
		}
		slug = s
	} else {
		slug = tenancy.SlugFromHost(r.Host)
	}
	cluster, err := g.app.Cache().ClusterBySlug(r.Context(), slug)
	if err != nil {
		if errors.Is(err, tenancy.ErrUnavailable) {
			g.logger.Warn("cluster lookup failed; refusing the unconfirmed host",
				zap.String("slug", slug), zap.Error(err))
		}
		return nil, errClusterUnknown
	}
	return cluster, nil
}

// authenticate accepts a live API key bound to this cluster.
func (g *Gateway) authenticate(r *http.Request, cluster *tenancy.Cluster) *apierror.Error {
	cred := bearerCredential(r.Header)
	switch {
	case cred == "":
		return errMissingCredential
	case !isAPIKey(cred):
		// Session tokens are not accepted on the data plane yet.
		return errInvalidCredential
	}
	key, err := g.app.Cache().APIKey(r.Context(), cred)
	if err != nil {
		if errors.Is(err, tenancy.ErrUnavailable) {
			g.logger.Warn("api key lookup failed; refusing the unconfirmed key", zap.Error(err))
		}
		return errUnknownKey
	}
	if key.Cluster.ID != cluster.ID {
		return errKeyClusterMismatch
	}
	return nil
}

func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, rid string, e *apierror.Error) error {
	g.logger.Debug("request refused",
		zap.String("request_id", rid), zap.String("code", string(e.Code)),
		zap.String("host", r.Host), zap.String("path", r.URL.Path))
	apierror.Write(w, e, rid)
	return nil
}

// upstreamFailure answers a request the cell did not: 504 when the upstream
// timeout passed, nothing when the client went away, else 502.
func (g *Gateway) upstreamFailure(w http.ResponseWriter, r *http.Request, rid string, err error) error {
	if errors.Is(r.Context().Err(), context.Canceled) {
		return nil
	}
	e := errBadGateway
	var he caddyhttp.HandlerError
	if errors.Is(r.Context().Err(), context.DeadlineExceeded) ||
		(errors.As(err, &he) && he.StatusCode == http.StatusGatewayTimeout) {
		e = errUpstreamTimeout
	}
	g.logger.Error("upstream request failed",
		zap.String("request_id", rid), zap.String("code", string(e.Code)),
		zap.String("host", r.Host), zap.String("path", r.URL.Path), zap.Error(err))
	apierror.Write(w, e, rid)
	return nil
}

// responseStarted notes whether the upstream's response has begun, after
// which a failure can no longer be answered with an error envelope.
type responseStarted struct {
	caddyhttp.ResponseWriterWrapper
	started bool
}

func (w *responseStarted) WriteHeader(status int) {
	w.started = true
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *responseStarted) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriterWrapper.Write(b)
}
