package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/tenancy"
)

// hostLookupRefused is clusterBySlugBounded's error when the slug was not
// looked up: addr, or the gateway, has spent its lookups of unknown hosts.
type hostLookupRefused struct{ retryAfter int }

func (e *hostLookupRefused) Error() string {
	return fmt.Sprintf("too many lookups of unknown hosts; retry in %d s", e.retryAfter)
}

func (e *hostLookupRefused) Unwrap() error { return tenancy.ErrNotAdmitted }

// clusterBySlugBounded is the cache's ClusterBySlug for a name a client
// sent (a Host, a TLS server name): what the cache cannot answer is looked
// up only within addr's and the gateway's budgets (harden.HostLookups),
// and a lookup that finds a cluster gives its tokens back.
func (b *backend) clusterBySlugBounded(ctx context.Context, slug string, addr netip.Addr) (*tenancy.Cluster, error) {
	var taken bool
	var retryAfter int
	cluster, err := b.cache.ClusterBySlugAdmit(ctx, slug, func() bool {
		taken, retryAfter = b.hostLookups.Take(addr)
		return taken
	})
	switch {
	case err == nil && taken:
		b.hostLookups.Refund(addr)
	case !taken && retryAfter > 0:
		return nil, &hostLookupRefused{retryAfter: retryAfter}
	}
	return cluster, err
}

// clientAddrOf is the client's address as Caddy determined it for the
// request whose context ctx is (see clientAddr); invalid outside a request.
func clientAddrOf(ctx context.Context) netip.Addr {
	if s, ok := caddyhttp.GetVar(ctx, caddyhttp.ClientIPVarKey).(string); ok && s != "" {
		if a, err := netip.ParseAddr(s); err == nil {
			return a
		}
	}
	if r, ok := ctx.Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			return ap.Addr()
		}
	}
	return netip.Addr{}
}
