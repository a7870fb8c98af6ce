package caddymodule

import "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

// IdentityConfig configures human sign-in and the console: the login
// endpoints, OAuth providers and the console and operator APIs.
type IdentityConfig struct{}

// unmarshal reads an identity block of the queen global option.
func (c *IdentityConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		return d.Errf("queen: identity: unknown option %q", d.Val())
	}
	return nil
}
