package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/tenancy"
)

// target is what cluster resolution learned from the Host and the
// act-as header, before any credential is looked at.
type target struct {
	// cluster is the cluster the Host names; nil when the credential
	// decides (shared host, act-as) or the Host names none.
	cluster *tenancy.Cluster
	// sharedHost: the Host serves several clusters; the credential names one.
	sharedHost bool
	// unknownHost: on a shielded listener, a Host that names no cluster is
	// answered 421 only to a caller with a live credential.
	unknownHost bool
	// elsewhere: the Host names a cluster of a cell this gateway does not
	// front; on a shielded listener it is refused like an unknown host,
	// after a live credential.
	elsewhere bool
	// actAs is the x-queen-act-cluster value, trimmed.
	actAs string
}

const headerActCluster = "X-Queen-Act-Cluster"

// shielded reports whether cluster-specific answers wait for a live
// credential on this listener.
func (g *Gateway) shielded() bool { return g.Shield || len(g.SharedHosts) > 0 }

// resolveTarget decides where the cluster comes from. Unknown hosts, and
// known ones the database cannot confirm during an outage past the stale
// grace, fail closed.
func (g *Gateway) resolveTarget(r *http.Request) (target, *apierror.Error) {
	t := target{actAs: strings.TrimSpace(r.Header.Get(headerActCluster))}
	host := tenancy.CanonicalHost(r.Host)
	if host != "" && slices.Contains(g.SharedHosts, host) {
		t.sharedHost = true
		return t, nil
	}
	if t.actAs != "" {
		return t, nil
	}
	cluster, err := g.clusterForHost(r.Context(), host, clientAddr(r))
	var refused *hostLookupRefused
	if errors.As(err, &refused) {
		return t, tooManyHostLookups(refused.retryAfter)
	}
	if err == nil && !g.app.fronting.Serves(cluster) {
		// Refused before the credential is looked at or any bucket is
		// touched: the cluster's limits are its own cell's gateway's.
		if g.shielded() {
			t.unknownHost, t.elsewhere = true, true
			return t, nil
		}
		return t, errClusterElsewhere
	}
	if err != nil {
		if g.shielded() {
			t.unknownHost = true
			return t, nil
		}
		return t, errClusterUnknown
	}
	t.cluster = cluster
	return t, nil
}

// unknownHostRefusal is the 421 a live credential gets on a shielded
// listener for a Host this gateway does not serve.
func (t target) unknownHostRefusal() *apierror.Error {
	if t.elsewhere {
		return errClusterElsewhere
	}
	return errClusterUnknown
}

// clusterForHost is the cluster host names, looked up within addr's budget
// for hosts the cache cannot answer.
func (g *Gateway) clusterForHost(ctx context.Context, host string, addr netip.Addr) (*tenancy.Cluster, error) {
	var slug string
	if domains := g.app.BaseDomains; len(domains) > 0 {
		s, ok := tenancy.SlugUnderDomain(host, domains)
		if !ok {
			return nil, tenancy.ErrNotFound
		}
		slug = s
	} else {
		slug = tenancy.SlugFromHost(host)
	}
	cluster, err := g.app.backend.clusterBySlugBounded(ctx, slug, addr)
	if errors.Is(err, tenancy.ErrUnavailable) {
		g.logger.Warn("cluster lookup failed; refusing the unconfirmed host",
			zap.String("slug", slug), zap.Error(err))
	}
	return cluster, err
}

// clusterByReference resolves an act-as value or a token's cluster claim: a
// uuid is a cluster id, anything else a slug.
func (g *Gateway) clusterByReference(ctx context.Context, ref string) (*tenancy.Cluster, error) {
	ref = strings.ToLower(ref)
	if uuidtext.ValidLower(ref) {
		return g.app.Cache().ClusterByID(ctx, ref)
	}
	if !tenancy.ValidSlug(ref) {
		return nil, tenancy.ErrNotFound
	}
	return g.app.Cache().ClusterBySlug(ctx, ref)
}
