// Package caddymodule is queengate's Caddy glue: it registers the queen app,
// the queen_gateway handler and its Caddyfile directive, the dynamic
// upstream that sends each request to its cluster's cell, and the on-demand
// TLS permission module for cluster hostnames. The logic lives in
// tenancy, limits and meter; this package only wires it into Caddy.
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
