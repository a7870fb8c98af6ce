package caddymodule

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/crossorigin"
	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/tenancy"
)

// Gateway is the queen_gateway HTTP handler: the data-plane pipeline that
// runs ahead of reverse_proxy. It resolves the cluster, classifies the
// route, applies the status and plan gates, authenticates and authorizes
// the caller, and prepares the request for its cluster's cell. The queen_gateway Caddyfile directive
// places it, together with the reverse_proxy that forwards to the cell, so
// the order cannot be got wrong.
type Gateway struct {
	// UpstreamTimeout bounds a request to the cell, from sending it to the
	// end of the response, for every request except long-poll pops.
	// Default 35s (more than the broker's own 30s maximum wait).
	UpstreamTimeout caddy.Duration `json:"upstream_timeout,omitempty"`

	// LongPollMax caps the wait a long-poll pop may ask the broker for when
	// computing its upstream timeout. Default 90s.
	LongPollMax caddy.Duration `json:"long_poll_max,omitempty"`

	// LongPollMargin is added to a long-poll pop's wait to get its upstream
	// timeout. Default 10s.
	LongPollMargin caddy.Duration `json:"long_poll_margin,omitempty"`

	// SharedHosts are full hostnames (no wildcards) that serve several
	// clusters: the credential names the cluster (an API key its own, a
	// session its cluster claim or x-queen-act-cluster). Configuring any
	// shields the listener, as Shield does.
	SharedHosts []string `json:"shared_hosts,omitempty"`

	// ConsoleOnly makes the handler serve its web surface alone (identity,
	// console, operator API, the console app; the probes too) and refuse
	// every other request with 421 console_only_host before anything is
	// looked up: the operators' host, which is no cluster's, then answers
	// no data plane for any key. Needs the queen app's identity block.
	ConsoleOnly bool `json:"console_only,omitempty"`

	// Shield keeps everything cluster-specific from anonymous callers: the
	// status and plan gates run after authentication, and a Host naming no
	// cluster gets its 421 only when a live credential is shown (401
	// otherwise), so cluster names and states cannot be probed.
	Shield bool `json:"shield,omitempty"`

	// MaxURIBytes caps the request path and query; longer ones get 414.
	// Default 8 KiB.
	MaxURIBytes int `json:"max_uri_bytes,omitempty"`

	// MaxHeaders caps the number of header lines; more get 431. Default 100.
	MaxHeaders int `json:"max_headers,omitempty"`

	// MaxHeaderValueBytes caps any single header value; a longer one gets
	// 431. Default 16 KiB.
	MaxHeaderValueBytes int `json:"max_header_value_bytes,omitempty"`

	// MaxHeaderBytes caps the sum of header names and values; more get 431.
	// Default 64 KiB.
	MaxHeaderBytes int `json:"max_header_bytes,omitempty"`

	// MaxBodyBytes caps every request body; more gets 413
	// payload_too_large. Default 16 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`

	// AuthFailureRate is how many failed authentications per second one
	// client address earns back; once its AuthFailureBurst is spent, the
	// address gets 429 before its credential is looked at. Successful
	// requests cost nothing. Default 1.
	AuthFailureRate float64 `json:"auth_failure_rate,omitempty"`

	// AuthFailureBurst is how many failed authentications in a row one
	// client address may make. Default 20.
	AuthFailureBurst int `json:"auth_failure_burst,omitempty"`

	// PreauthConns caps, per client address (IPv6 per /64), the open
	// connections to this handler's server on which no request has
	// authenticated yet; past it a new connection from that address is
	// closed as it is accepted. One cap per server: the first
	// queen_gateway of a server sets it. Default 256.
	PreauthConns int `json:"preauth_conns,omitempty"`

	// Probes marks this handler as the probe listener's: /readyz shows
	// every check's detail (cell names and verdicts, the group's members,
	// database errors) to any caller, and runs the checks for each request.
	// Elsewhere only loopback callers get that; others get the cached
	// verdict alone.
	Probes bool `json:"probes,omitempty"`

	app        *App
	logger     *zap.Logger
	server     *caddyhttp.Server // nil outside an http server
	headLimits harden.HeadLimits
	failures   *harden.FailureGuard
	surface    webSurface
	crossSite  *crossorigin.Policy
}

// CaddyModule returns the Caddy module information.
func (*Gateway) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.queen_gateway", New: func() caddy.Module { return new(Gateway) }}
}

// Provision sets defaults and attaches the handler to the queen app.
func (g *Gateway) Provision(ctx caddy.Context) error {
	g.logger = ctx.Logger()
	boundHeaderRead(ctx, g.logger)
	if g.PreauthConns == 0 {
		g.PreauthConns = DefaultPreauthConns
	}
	g.server = countPreauthConns(ctx, g.PreauthConns)
	setDuration(&g.UpstreamTimeout, 35*time.Second)
	setDuration(&g.LongPollMax, 90*time.Second)
	setDuration(&g.LongPollMargin, 10*time.Second)
	if g.MaxBodyBytes == 0 {
		g.MaxBodyBytes = 16 << 20
	}
	if g.AuthFailureRate == 0 {
		g.AuthFailureRate = 1
	}
	if g.AuthFailureBurst == 0 {
		g.AuthFailureBurst = 20
	}
	for i, h := range g.SharedHosts {
		g.SharedHosts[i] = tenancy.CanonicalHost(h)
	}
	g.headLimits = harden.HeadLimits{
		MaxURIBytes: g.MaxURIBytes, MaxHeaders: g.MaxHeaders,
		MaxHeaderValueBytes: g.MaxHeaderValueBytes, MaxHeaderBytes: g.MaxHeaderBytes,
	}.WithDefaults()
	g.failures = harden.NewFailureGuard(harden.FailureGuardConfig{Rate: g.AuthFailureRate, Burst: g.AuthFailureBurst})
	appIface, err := ctx.App("queen")
	if err != nil {
		return fmt.Errorf("queen_gateway needs the queen app (global option `queen { database_url ... }`): %w", err)
	}
	g.app = appIface.(*App)
	surface, err := g.buildSurface()
	if err != nil {
		return fmt.Errorf("queen_gateway: %w", err)
	}
	g.surface = surface
	if g.ConsoleOnly && surface == nil {
		return fmt.Errorf("queen_gateway: console_only serves the console alone, which needs the identity block in the queen app")
	}
	g.crossSite = g.buildCrossSitePolicy()
	return nil
}

// Validate checks the configuration.
func (g *Gateway) Validate() error {
	if g.UpstreamTimeout < 0 || g.LongPollMax < 0 || g.LongPollMargin < 0 {
		return fmt.Errorf("queen_gateway: timeouts must not be negative")
	}
	if g.MaxURIBytes < 0 || g.MaxHeaders < 0 || g.MaxHeaderValueBytes < 0 || g.MaxHeaderBytes < 0 || g.MaxBodyBytes < 0 {
		return fmt.Errorf("queen_gateway: size limits must not be negative")
	}
	if g.PreauthConns < 0 {
		return fmt.Errorf("queen_gateway: preauth_conns must be positive")
	}
	if g.AuthFailureRate < 0 || g.AuthFailureBurst < 0 {
		return fmt.Errorf("queen_gateway: auth_failures rate and burst must not be negative")
	}
	for _, h := range g.SharedHosts {
		if h == "" || strings.ContainsAny(h, "/* ") {
			return fmt.Errorf("queen_gateway: shared host %q is not a hostname", h)
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Gateway)(nil)
	_ caddy.Provisioner           = (*Gateway)(nil)
	_ caddy.Validator             = (*Gateway)(nil)
)
