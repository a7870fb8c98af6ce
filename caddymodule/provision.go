package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/provision"
	"github.com/queengate/queengate/tenancy"
)

// Provision is the queen_provision HTTP handler: the provisioning API
// (package provision) under /provision/v1/ on the site the operator puts it
// in; other paths go on to the next handler. It is off unless a site has
// it, and it refuses to answer on a cluster's hostname (one under a base
// domain) unless AllowClusterHosts says so.
type Provision struct {
	// AllowClusterHosts lets the API answer on hostnames under the base
	// domains, the tenants' hostnames. Off by default: the API belongs on
	// a host of the operator's own.
	AllowClusterHosts bool `json:"allow_cluster_hosts,omitempty"`

	app        *App
	api        *provision.API
	unregister func()
}

// CaddyModule returns the Caddy module information.
func (*Provision) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.queen_provision", New: func() caddy.Module { return new(Provision) }}
}

// Provision builds the API on the queen app's database pool and has the
// app's invalidation listener drop its cached tokens.
func (p *Provision) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("queen")
	if err != nil {
		return fmt.Errorf("queen_provision needs the queen app (global option `queen { database_url ... }`): %w", err)
	}
	p.app = appIface.(*App)
	api, err := provision.New(provision.Options{
		Pool:             p.app.backend.pool,
		Log:              ctx.Logger().Named("provision"),
		OnClusterChanged: func(id string) { p.app.Cache().InvalidateCluster(id) },
		ClientIP:         clientAddr,
	})
	if err != nil {
		return fmt.Errorf("queen_provision: %w", err)
	}
	p.api = api
	p.unregister = p.app.backend.onStandingChanged(api.InvalidateTokens)
	return nil
}

// Cleanup stops the listener's calls into this handler's API.
func (p *Provision) Cleanup() error {
	if p.unregister != nil {
		p.unregister()
	}
	return nil
}

func (p *Provision) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !provision.Owns(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	rid := newRequestID()
	w.Header().Set(provision.HeaderRequestID, rid)
	if !p.AllowClusterHosts && underBaseDomain(r.Host, p.app.BaseDomains) {
		apierror.Write(w, &apierror.Error{Status: http.StatusNotFound, Code: apierror.NotFound,
			Message: "the provisioning API is not served on cluster hostnames"}, rid)
		return nil
	}
	p.api.ServeHTTP(w, r)
	return nil
}

// underBaseDomain reports whether host is a base domain or lies under one.
func underBaseDomain(host string, domains []string) bool {
	h := tenancy.CanonicalHost(host)
	for _, d := range domains {
		if h == d || strings.HasSuffix(h, "."+d) {
			return true
		}
	}
	return false
}

// parseProvisionDirective reads
//
//	queen_provision {
//		allow_cluster_hosts
//	}
func parseProvisionDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	p := new(Provision)
	d := h.Dispenser
	d.Next()
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "allow_cluster_hosts":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			p.AllowClusterHosts = true
		default:
			return nil, d.Errf("queen_provision: unknown option %q", d.Val())
		}
	}
	return p, nil
}

// standingHooks are the callbacks the invalidation listener runs when
// callers' standing changes (a session, an operator bit or a machine token
// revoked) and after every reconnect.
type standingHooks struct {
	mu    sync.Mutex
	next  int
	hooks map[int]func()
}

// onStandingChanged registers fn and returns what unregisters it.
func (b *backend) onStandingChanged(fn func()) func() {
	s := &b.standing
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hooks == nil {
		s.hooks = map[int]func(){}
	}
	id := s.next
	s.next++
	s.hooks[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.hooks, id)
		s.mu.Unlock()
	}
}

func (b *backend) standingChanged() {
	s := &b.standing
	s.mu.Lock()
	fns := make([]func(), 0, len(s.hooks))
	for _, fn := range s.hooks {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Provision)(nil)
	_ caddy.Provisioner           = (*Provision)(nil)
	_ caddy.CleanerUpper          = (*Provision)(nil)
)
