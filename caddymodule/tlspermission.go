package caddymodule

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/queengate/queengate/tenancy"
)

// CertPermission is the on-demand TLS permission module tls.permission.queen.
// It lets Caddy obtain a certificate during a TLS handshake only for the
// hostname of a live cluster: exactly "<slug>.<base domain>" for one of the
// queen app's base domains, where the cluster exists and is not being
// deleted. Suspended clusters keep their certificate, so their clients get
// a 403 cluster_suspended over TLS rather than a failed handshake.
//
// The decision reads the queen app's cluster cache: a cached cluster, or a
// name recently found to be none, costs no database query; any other name
// is looked up only within the handshaking address's and the gateway's
// budgets for unknown hosts, as a Host header is. While the database does not answer, clusters the
// gateway already knows keep being allowed for the app's stale_grace;
// clusters it has never seen are refused.
//
// Enable it with the global option
//
//	on_demand_tls {
//		permission queen
//	}
type CertPermission struct {
	// Taken from the queen app at Provision, so that a handshake still in
	// flight while its configuration is unloaded never reads the app after
	// Cleanup released it; the backend's cache and budgets outlive it (a
	// closed pool only fails the lookup, and the handshake).
	backend     *backend
	baseDomains []string
	fronting    tenancy.Fronting
	logger      *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (*CertPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "tls.permission.queen", New: func() caddy.Module { return new(CertPermission) }}
}

// Provision attaches the module to the queen app, which must be configured
// with at least one base domain.
func (p *CertPermission) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	appIface, err := ctx.AppIfConfigured("queen")
	if err != nil {
		return fmt.Errorf("on_demand_tls permission queen needs the queen app (global option `queen { database_url ... base_domain ... }`): %w", err)
	}
	app := appIface.(*App)
	if len(app.BaseDomains) == 0 {
		return fmt.Errorf("on_demand_tls permission queen: the queen app has no base_domain; certificates are only allowed for <slug>.<base domain>, so set base_domain in the queen global option")
	}
	p.backend = app.backend
	p.baseDomains = slices.Clone(app.BaseDomains)
	p.fronting = app.fronting
	return nil
}

// servedCluster looks a cluster up as the pipeline serves it: a cluster of a
// cell another gateway fronts gets no certificate here, since every request
// for it would be refused.
func (p *CertPermission) servedCluster(ctx context.Context, slug string, remote netip.Addr) (*tenancy.Cluster, error) {
	c, err := p.backend.clusterBySlugBounded(ctx, slug, remote)
	if err == nil && !p.fronting.Serves(c) {
		return nil, fmt.Errorf("cell %q: %w", c.CellSlug, tenancy.ErrClusterElsewhere)
	}
	return c, err
}

// CertificateAllowed implements caddytls.OnDemandPermission. A refusal
// wraps caddytls.ErrPermissionDenied and fails the handshake.
func (p *CertPermission) CertificateAllowed(ctx context.Context, name string) error {
	var remote netip.Addr
	hello, _ := ctx.Value(certmagic.ClientHelloInfoCtxKey).(*tls.ClientHelloInfo)
	if hello != nil && hello.Conn != nil {
		if ap, err := netip.ParseAddrPort(hello.Conn.RemoteAddr().String()); err == nil {
			remote = ap.Addr()
		}
	}
	slug, err := tenancy.CertificateAllowed(ctx, name, p.baseDomains, func(ctx context.Context, slug string) (*tenancy.Cluster, error) {
		return p.servedCluster(ctx, slug, remote)
	})
	if err == nil {
		return nil
	}
	// Debug only: refusals are what scanners and typos cause all day long.
	// A database outage is already reported, rate-limited, by the cache.
	if ce := p.logger.Check(zapcore.DebugLevel, "on-demand certificate refused"); ce != nil {
		fields := []zap.Field{zap.String("server_name", name), zap.String("slug", slug), zap.Error(err)}
		if remote.IsValid() {
			fields = append(fields, zap.String("remote_ip", remote.String()))
		}
		ce.Write(fields...)
	}
	return fmt.Errorf("%w: %w", caddytls.ErrPermissionDenied, err)
}

// UnmarshalCaddyfile parses the module's Caddyfile form, which takes no
// arguments or options:
//
//	permission queen
func (p *CertPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	if d.NextArg() {
		return d.Errf("permission queen takes no arguments; the base domains come from the queen global option")
	}
	if d.NextBlock(0) {
		return d.Errf("permission queen takes no options; the base domains come from the queen global option")
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*CertPermission)(nil)
	_ caddytls.OnDemandPermission = (*CertPermission)(nil)
	_ caddyfile.Unmarshaler       = (*CertPermission)(nil)
)
