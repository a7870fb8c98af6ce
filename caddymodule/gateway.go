package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Gateway is the queen_gateway HTTP handler: the data-plane pipeline that
// runs ahead of reverse_proxy. It resolves the cluster from the Host,
// applies the status gate, authenticates the caller, and prepares the
// request for its cluster's cell. The queen_gateway Caddyfile directive
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

	app    *App
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (*Gateway) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.queen_gateway", New: func() caddy.Module { return new(Gateway) }}
}

// Provision sets defaults and attaches the handler to the queen app.
func (g *Gateway) Provision(ctx caddy.Context) error {
	g.logger = ctx.Logger()
	setDuration(&g.UpstreamTimeout, 35*time.Second)
	setDuration(&g.LongPollMax, 90*time.Second)
	setDuration(&g.LongPollMargin, 10*time.Second)
	appIface, err := ctx.App("queen")
	if err != nil {
		return fmt.Errorf("queen_gateway needs the queen app (global option `queen { database_url ... }`): %w", err)
	}
	g.app = appIface.(*App)
	return nil
}

// Validate checks the configuration.
func (g *Gateway) Validate() error {
	if g.UpstreamTimeout < 0 || g.LongPollMax < 0 || g.LongPollMargin < 0 {
		return fmt.Errorf("queen_gateway: timeouts must not be negative")
	}
	return nil
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Gateway)(nil)
	_ caddy.Provisioner           = (*Gateway)(nil)
	_ caddy.Validator             = (*Gateway)(nil)
)
