// Package caddymodule runs queengate inside Caddy. Its queen app owns the
// gateway's process-wide state (control-plane pool and caches, leadership,
// limits and metering state, metrics, readiness); its queen_gateway handler
// is the request pipeline, which puts each tenant request through the
// decisions of tenancy, limits and meter in a fixed order (size, cluster,
// status, route, plan gates, authentication, admission of the body and its
// limits, the cell's isolation) and then forwards it to the cell with the
// headers only the gateway sets, metering the answer and refusing in the
// JSON error envelope. It also registers the Caddyfile directives, the
// upstream that picks each request's cell and the on-demand TLS permission
// for cluster hostnames.
package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	caddy.RegisterModule(new(App))
	caddy.RegisterModule(new(Gateway))
	caddy.RegisterModule(new(Upstreams))
	caddy.RegisterModule(new(CertPermission))
	caddy.RegisterModule(new(Provision))
	httpcaddyfile.RegisterGlobalOption("queen", parseAppOption)
	// queen_provision runs before queen_gateway in a site that has both:
	// each is placed right before reverse_proxy, so it goes first.
	httpcaddyfile.RegisterHandlerDirective("queen_provision", parseProvisionDirective)
	httpcaddyfile.RegisterDirectiveOrder("queen_provision", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterDirective("queen_gateway", parseGatewayDirective)
	httpcaddyfile.RegisterDirectiveOrder("queen_gateway", httpcaddyfile.Before, "reverse_proxy")
}
