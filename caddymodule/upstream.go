package caddymodule

import (
	"fmt"
	"net"
	"net/url"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"net/http"

	"github.com/queengate/queengate/tenancy"
)

// Upstreams is a dynamic upstream source for reverse_proxy that sends each
// request to the cell of the cluster the queen_gateway handler resolved.
type Upstreams struct {
	// byCell keeps one upstream list per cell URL, so requests do not
	// allocate new upstreams and health state is kept per cell.
	byCell sync.Map // cell base URL -> []*reverseproxy.Upstream
}

// CaddyModule returns the Caddy module information.
func (*Upstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.reverse_proxy.upstreams.queen", New: func() caddy.Module { return new(Upstreams) }}
}

// GetUpstreams returns the cell of the request's cluster.
func (u *Upstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	c, ok := r.Context().Value(clusterCtxKey{}).(*tenancy.Cluster)
	if !ok {
		return nil, fmt.Errorf("queen upstreams: no cluster resolved for this request; use the queen_gateway directive, which places the queen_gateway handler before reverse_proxy")
	}
	if ups, ok := u.byCell.Load(c.CellURL); ok {
		return ups.([]*reverseproxy.Upstream), nil
	}
	dial, err := cellDialAddress(c.CellURL)
	if err != nil {
		return nil, fmt.Errorf("queen upstreams: cell %s: %w", c.CellSlug, err)
	}
	ups := []*reverseproxy.Upstream{{Dial: dial}}
	u.byCell.Store(c.CellURL, ups)
	return ups, nil
}

// cellDialAddress turns a cell's base URL into the host:port to dial.
func cellDialAddress(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("bad base_url %q: %w", base, err)
	}
	if u.Scheme != "http" {
		return "", fmt.Errorf("base_url %q: only http:// cells are supported", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("base_url %q has no host", base)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port), nil
}

// Interface guards
var _ reverseproxy.UpstreamSource = (*Upstreams)(nil)
