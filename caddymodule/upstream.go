package caddymodule

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"net/http"

	"github.com/queengate/queengate/tenancy"
)

// CellIdleTimeout is how long an idle keep-alive connection to a cell is
// kept for the next request. It stays well below the broker's own idle
// timeout (the real broker 0.15.1 closes an idle connection after 10 to
// 12 s, as TestRealBrokerKeepAliveIdleTimeout measures): a request sent on a
// connection the broker is closing at that moment fails before the broker
// reads it, and a produce request that fails so is answered 502 and billed
// as unanswered. The gateway closing first avoids the race.
const CellIdleTimeout = 5 * time.Second

// Upstreams is a dynamic upstream source for reverse_proxy that sends each
// request to the cell of the cluster the queen_gateway handler resolved.
type Upstreams struct {
	// CellsTLS says the proxy's transport speaks TLS to cells; the
	// queen_gateway directive sets it with its cell_tls option. Then only
	// https:// cells are accepted, else only http:// ones: a cell whose
	// scheme does not match is refused (502) rather than reached with the
	// wrong protocol, so a cell secret is never sent in clear to a cell
	// that was meant to be reached over TLS.
	CellsTLS bool `json:"cells_tls,omitempty"`

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
	dial, err := cellAddress(c.CellURL, u.CellsTLS)
	if err != nil {
		return nil, fmt.Errorf("queen upstreams: cell %s: %w", c.CellSlug, err)
	}
	ups := []*reverseproxy.Upstream{{Dial: dial}}
	u.byCell.Store(c.CellURL, ups)
	return ups, nil
}

// cellDialAddress turns an http:// cell's base URL into the host:port to
// dial.
func cellDialAddress(base string) (string, error) { return cellAddress(base, false) }

// cellAddress turns a cell's base URL into the host:port to dial. The URL's
// scheme must be https when the transport speaks TLS to cells, and http
// when it does not.
func cellAddress(base string, overTLS bool) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("bad base_url %q: %w", base, err)
	}
	defaultPort := "80"
	switch {
	case u.Scheme == "https" && overTLS:
		defaultPort = "443"
	case u.Scheme == "http" && !overTLS:
	case u.Scheme == "https":
		return "", fmt.Errorf("base_url %q is an https cell, but queen_gateway has no cell_tls option, and its requests (with the cell secret) are not sent in clear; add cell_tls (with ca for a private CA)", base)
	case overTLS:
		return "", fmt.Errorf("base_url %q is not an https cell, but queen_gateway reaches cells over TLS (cell_tls)", base)
	default:
		return "", fmt.Errorf("base_url %q: only http:// and https:// cells are supported", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("base_url %q has no host", base)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = defaultPort
	}
	return net.JoinHostPort(host, port), nil
}

// Interface guards
var _ reverseproxy.UpstreamSource = (*Upstreams)(nil)
