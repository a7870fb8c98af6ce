package caddymodule

import (
	"encoding/json"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// parseAppOption parses the global option that configures the queen app:
//
//	queen {
//		database_url     <url>
//		base_domain      <domain...>
//		pool_max_conns   <n>
//		database_timeout <duration>
//		cache_ttl        <duration>
//		key_negative_ttl <duration>
//		stale_grace      <duration>
//		skip_migrations
//	}
func parseAppOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "queen", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the app from Caddyfile tokens; see
// parseAppOption for the syntax.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "database_url":
			if !d.AllArgs(&a.DatabaseURL) {
				return d.ArgErr()
			}
		case "base_domain":
			domains := d.RemainingArgs()
			if len(domains) == 0 {
				return d.ArgErr()
			}
			a.BaseDomains = append(a.BaseDomains, domains...)
		case "pool_max_conns":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil || n < 1 {
				return d.Errf("pool_max_conns: %q is not a positive integer", s)
			}
			a.PoolMaxConns = int32(n)
		case "database_timeout":
			if err := parseDuration(d, &a.DatabaseTimeout); err != nil {
				return err
			}
		case "cache_ttl":
			if err := parseDuration(d, &a.CacheTTL); err != nil {
				return err
			}
		case "key_negative_ttl":
			if err := parseDuration(d, &a.KeyNegativeTTL); err != nil {
				return err
			}
		case "stale_grace":
			if err := parseDuration(d, &a.StaleGrace); err != nil {
				return err
			}
		case "skip_migrations":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.SkipMigrations = true
		default:
			return d.Errf("queen: unknown option %q", opt)
		}
	}
	return nil
}

// parseGatewayDirective expands the queen_gateway directive into the whole
// ordered chain: the queen_gateway handler, then reverse_proxy to the
// cluster's cell. Syntax:
//
//	queen_gateway [<matcher>] {
//		upstream_timeout <duration>
//		long_poll_max    <duration>
//		long_poll_margin <duration>
//		dial_timeout     <duration>
//	}
func parseGatewayDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	g := new(Gateway)
	dialTimeout, err := g.unmarshal(h.Dispenser)
	if err != nil {
		return nil, err
	}
	proxy := newCellProxy(dialTimeout)
	chain := &caddyhttp.Subroute{Routes: caddyhttp.RouteList{{
		HandlersRaw: []json.RawMessage{
			caddyconfig.JSONModuleObject(g, "handler", "queen_gateway", nil),
			caddyconfig.JSONModuleObject(proxy, "handler", "reverse_proxy", nil),
		},
	}}}
	return h.NewRoute(matcherSet, chain), nil
}

// UnmarshalCaddyfile sets up the handler alone from Caddyfile tokens (the
// queen_gateway directive uses the same syntax and adds the proxy).
func (g *Gateway) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	_, err := g.unmarshal(d)
	return err
}

func (g *Gateway) unmarshal(d *caddyfile.Dispenser) (dialTimeout caddy.Duration, err error) {
	d.Next() // the directive name
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "upstream_timeout":
			err = parseDuration(d, &g.UpstreamTimeout)
		case "long_poll_max":
			err = parseDuration(d, &g.LongPollMax)
		case "long_poll_margin":
			err = parseDuration(d, &g.LongPollMargin)
		case "dial_timeout":
			err = parseDuration(d, &dialTimeout)
		default:
			err = d.Errf("queen_gateway: unknown option %q", opt)
		}
		if err != nil {
			return 0, err
		}
	}
	return dialTimeout, nil
}

// newCellProxy is the reverse_proxy the directive places after the gateway:
// upstreams from the resolved cluster's cell, the Host set to the cell, and
// plain HTTP/1.1 keep-alive connections to cells.
func newCellProxy(dialTimeout caddy.Duration) *reverseproxy.Handler {
	if dialTimeout == 0 {
		dialTimeout = caddy.Duration(defaultDialTimeout)
	}
	transport := &reverseproxy.HTTPTransport{DialTimeout: dialTimeout}
	return &reverseproxy.Handler{
		DynamicUpstreamsRaw: caddyconfig.JSONModuleObject(new(Upstreams), "source", "queen", nil),
		TransportRaw:        caddyconfig.JSONModuleObject(transport, "protocol", "http", nil),
		Headers: &headers.Handler{Request: &headers.HeaderOps{
			Set: map[string][]string{"Host": {"{http.reverse_proxy.upstream.hostport}"}},
		}},
	}
}

func parseDuration(d *caddyfile.Dispenser, into *caddy.Duration) error {
	opt := d.Val()
	var s string
	if !d.AllArgs(&s) {
		return d.ArgErr()
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%s: %q is not a duration: %v", opt, s, err)
	}
	if dur < 0 {
		return d.Errf("%s: %q must not be negative", opt, s)
	}
	*into = caddy.Duration(dur)
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Gateway)(nil)
)
