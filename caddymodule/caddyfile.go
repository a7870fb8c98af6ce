package caddymodule

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/dustin/go-humanize"
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
//		operator_enabled
//		key_touch_interval <duration>
//		session {
//			issuer                  <iss>
//			audience                <aud>
//			ed25519_key_file        <pem file>
//			ed25519_public_key_file <pem file>
//			hs256_secret            <secret>
//			previous_ed25519_public_key_file <pem file>
//			previous_hs256_secret   <secret>
//			cookie_name             <name>
//			ttl                     <duration>
//			revocation_strict
//		}
//		shadow
//		cell_max_parked      <n>
//		max_batch_items      <n>
//		reconcile_interval   <duration>
//		quota_interval       <duration>
//		isolation_probe_interval <duration>
//		cells             <cell slug...>
//		leader_group      <group name>
//		gateway_name      <name in the group>
//		leader_lease_ttl  <duration>
//		leader_group_size <n>
//		leader_group_members <name> <name>...
//		peer_listen       <host:port>
//		peer_address      <url>
//		peer_secret       <secret>
//		meter_flush_interval <duration>
//		spool_dir            <dir>
//		metrics_per_cluster
//		cell_token <cell slug|*> {
//			algorithm  HS256|EdDSA
//			secret     <secret>
//			key_file   <pem file>
//			issuer     <iss>
//			audience   <aud>
//			role_claim <claim>
//			ttl        <duration>
//		}
//		jwt_issuer <name> {
//			issuer            <iss>
//			jwks_url          <url>
//			audience          <aud...>
//			algorithms        <alg...>
//			clusters          <cluster id...>
//			cluster_claim     <claim>
//			scopes_claim      <claim>
//			scope_prefix      <prefix>
//			max_scopes        <scope...>
//			leeway            <duration>
//			jwks_refresh      <duration>
//			jwks_min_interval <duration>
//		}
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
		case "operator_enabled":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.OperatorEnabled = true
		case "key_touch_interval":
			if err := parseDuration(d, &a.KeyTouchInterval); err != nil {
				return err
			}
		case "session":
			if a.Sessions != nil {
				return d.Err("queen: session given twice")
			}
			a.Sessions = new(SessionConfig)
			if err := a.Sessions.unmarshal(d); err != nil {
				return err
			}
		case "cell_token":
			if err := a.unmarshalCellToken(d); err != nil {
				return err
			}
		case "jwt_issuer":
			if err := a.unmarshalJWTIssuer(d); err != nil {
				return err
			}
		case "identity":
			if a.Identity != nil {
				return d.Err("queen: identity given twice")
			}
			a.Identity = new(IdentityConfig)
			if err := a.Identity.unmarshal(d); err != nil {
				return err
			}
		case "webhooks":
			if a.Webhooks != nil {
				return d.Err("queen: webhooks given twice")
			}
			a.Webhooks = new(WebhooksConfig)
			if err := a.Webhooks.unmarshal(d); err != nil {
				return err
			}
		case "usage_export":
			if a.UsageExport != nil {
				return d.Err("queen: usage_export given twice")
			}
			a.UsageExport = new(UsageExportConfig)
			if err := a.UsageExport.unmarshal(d); err != nil {
				return err
			}
		case "shadow":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.Shadow = true
		case "cell_max_parked":
			if err := parseCount(d, &a.CellMaxParked); err != nil {
				return err
			}
		case "max_batch_items":
			if err := parseCount(d, &a.MaxBatchItems); err != nil {
				return err
			}
		case "produce_max_exchanges":
			if err := parseCount(d, &a.ProduceMaxExchanges); err != nil {
				return err
			}
		case "produce_max_bytes":
			if err := parseSizeInt(d, &a.ProduceMaxBytes); err != nil {
				return err
			}
		case "cluster_produce_max_exchanges":
			if err := parseCount(d, &a.ClusterProduceMaxExchanges); err != nil {
				return err
			}
		case "cluster_produce_max_bytes":
			if err := parseSizeInt(d, &a.ClusterProduceMaxBytes); err != nil {
				return err
			}
		case "reconcile_interval":
			if err := parseDuration(d, &a.ReconcileInterval); err != nil {
				return err
			}
		case "quota_interval":
			if err := parseDuration(d, &a.QuotaInterval); err != nil {
				return err
			}
		case "isolation_probe_interval":
			if err := parseDuration(d, &a.IsolationProbeInterval); err != nil {
				return err
			}
		case "cells":
			cells := d.RemainingArgs()
			if len(cells) == 0 {
				return d.ArgErr()
			}
			a.Cells = append(a.Cells, cells...)
		case "leader_group":
			if !d.AllArgs(&a.LeaderGroup) {
				return d.ArgErr()
			}
		case "gateway_name":
			if !d.AllArgs(&a.GatewayName) {
				return d.ArgErr()
			}
		case "leader_lease_ttl":
			if err := parseDuration(d, &a.LeaderLeaseTTL); err != nil {
				return err
			}
		case "leader_group_size":
			if err := parseCount(d, &a.LeaderGroupSize); err != nil {
				return err
			}
		case "leader_group_members":
			a.LeaderGroupMembers = d.RemainingArgs()
			if len(a.LeaderGroupMembers) == 0 {
				return d.ArgErr()
			}
		case "peer_listen":
			if err := parseString(d, &a.PeerListen); err != nil {
				return err
			}
		case "peer_address":
			if err := parseString(d, &a.PeerAddress); err != nil {
				return err
			}
		case "peer_secret":
			if err := parseString(d, &a.PeerSecret); err != nil {
				return err
			}
		case "meter_flush_interval":
			if err := parseDuration(d, &a.MeterFlushInterval); err != nil {
				return err
			}
		case "metrics_per_cluster":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.MetricsPerCluster = true
		case "spool_dir":
			if err := parseString(d, &a.SpoolDir); err != nil {
				return err
			}
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
//		cell_tls [{
//			ca          <pem file...>
//			server_name <name>
//		}]
//		shared_hosts           <host...>
//		shield
//		console_only
//		max_uri_bytes          <size>
//		max_headers            <n>
//		max_header_value_bytes <size>
//		max_header_bytes       <size>
//		max_body_bytes         <size>
//		auth_failures          <per second> <burst>
//		preauth_conns          <n>
//		probes
//	}
//
// cell_tls makes the proxy reach cells over https: only https:// cell
// base URLs are then accepted (and only http:// ones without it). ca names
// PEM files of the certificate authorities to trust for cells instead of
// the system roots; server_name is the name their certificates are
// verified against (and sent as SNI) instead of the host of the cell's URL.
func parseGatewayDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	g := new(Gateway)
	dialTimeout, cellTLS, err := g.unmarshal(h.Dispenser)
	if err != nil {
		return nil, err
	}
	proxy := newCellProxy(dialTimeout, cellTLS)
	// One route holding both handlers, not a subroute: the chain is the
	// same, without a second route layer on every request.
	route := caddyhttp.Route{HandlersRaw: []json.RawMessage{
		caddyconfig.JSONModuleObject(g, "handler", "queen_gateway", nil),
		caddyconfig.JSONModuleObject(proxy, "handler", "reverse_proxy", nil),
	}}
	if matcherSet != nil {
		route.MatcherSetsRaw = []caddy.ModuleMap{matcherSet}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: route}}, nil
}

// UnmarshalCaddyfile sets up the handler alone from Caddyfile tokens (the
// queen_gateway directive uses the same syntax and adds the proxy).
func (g *Gateway) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	_, _, err := g.unmarshal(d)
	return err
}

func (g *Gateway) unmarshal(d *caddyfile.Dispenser) (dialTimeout caddy.Duration, cellTLS *reverseproxy.TLSConfig, err error) {
	d.Next() // the directive name
	if d.NextArg() {
		return 0, nil, d.ArgErr()
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
		case "cell_tls":
			cellTLS, err = parseCellTLS(d)
		default:
			var known bool
			if known, err = g.unmarshalEnforcement(d, opt); !known && err == nil {
				err = d.Errf("queen_gateway: unknown option %q", opt)
			}
		}
		if err != nil {
			return 0, nil, err
		}
	}
	return dialTimeout, cellTLS, nil
}

// parseCellTLS parses the cell_tls option of queen_gateway into the TLS
// settings of the proxy's transport to cells.
func parseCellTLS(d *caddyfile.Dispenser) (*reverseproxy.TLSConfig, error) {
	if d.NextArg() {
		return nil, d.Errf("queen_gateway: cell_tls takes no arguments, only a block with ca and server_name")
	}
	cfg := new(reverseproxy.TLSConfig)
	var caFiles []string
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch opt := d.Val(); opt {
		case "ca":
			files := d.RemainingArgs()
			if len(files) == 0 {
				return nil, d.Errf("queen_gateway: cell_tls: ca needs at least one PEM file")
			}
			caFiles = append(caFiles, files...)
		case "server_name":
			if !d.AllArgs(&cfg.ServerName) {
				return nil, d.Errf("queen_gateway: cell_tls: server_name takes exactly one name")
			}
		default:
			return nil, d.Errf("queen_gateway: cell_tls: unknown option %q (want ca or server_name)", opt)
		}
	}
	if len(caFiles) > 0 {
		pool := &caddytls.FileCAPool{TrustedCACertPEMFiles: caFiles}
		cfg.CARaw = caddyconfig.JSONModuleObject(pool, "provider", "file", nil)
	}
	return cfg, nil
}

// newCellProxy is the reverse_proxy the directive places after the gateway:
// upstreams from the resolved cluster's cell, the Host set to the cell, and
// HTTP/1.1 keep-alive connections to cells, over TLS when cellTLS is set
// (HTTP/1.1 even when a TLS cell offers HTTP/2), given up when idle before
// the broker gives them up (CellIdleTimeout).
func newCellProxy(dialTimeout caddy.Duration, cellTLS *reverseproxy.TLSConfig) *reverseproxy.Handler {
	if dialTimeout == 0 {
		dialTimeout = caddy.Duration(defaultDialTimeout)
	}
	transport := &reverseproxy.HTTPTransport{DialTimeout: dialTimeout, TLS: cellTLS, Versions: []string{"1.1"},
		KeepAlive: &reverseproxy.KeepAlive{IdleConnTimeout: caddy.Duration(CellIdleTimeout)}}
	upstreams := &Upstreams{CellsTLS: cellTLS != nil}
	return &reverseproxy.Handler{
		DynamicUpstreamsRaw: caddyconfig.JSONModuleObject(upstreams, "source", "queen", nil),
		TransportRaw:        caddyconfig.JSONModuleObject(transport, "protocol", "http", nil),
		Headers: &headers.Handler{Request: &headers.HeaderOps{
			Set: map[string][]string{"Host": {"{http.reverse_proxy.upstream.hostport}"}},
		}},
	}
}

func (g *Gateway) unmarshalAuthFailures(d *caddyfile.Dispenser) error {
	var rate, burst string
	if !d.AllArgs(&rate, &burst) {
		return d.ArgErr()
	}
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || r <= 0 || math.IsInf(r, 0) {
		return d.Errf("auth_failures: rate %q is not a positive number of failures per second", rate)
	}
	b, err := strconv.Atoi(burst)
	if err != nil || b < 1 {
		return d.Errf("auth_failures: burst %q is not a positive integer", burst)
	}
	g.AuthFailureRate, g.AuthFailureBurst = r, b
	return nil
}

// parseSizeInt reads one size argument such as 8KiB or 16MB.
func parseSizeInt(d *caddyfile.Dispenser, into *int) error {
	opt := d.Val()
	var s string
	if !d.AllArgs(&s) {
		return d.ArgErr()
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > math.MaxInt32 {
		return d.Errf("%s: %q is not a size between 1 byte and 2 GiB", opt, s)
	}
	*into = int(n)
	return nil
}

// parseCount reads one positive integer argument.
func parseCount(d *caddyfile.Dispenser, into *int) error {
	opt := d.Val()
	var s string
	if !d.AllArgs(&s) {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return d.Errf("%s: %q is not a positive integer", opt, s)
	}
	*into = n
	return nil
}

func parseString(d *caddyfile.Dispenser, into *string) error {
	if !d.AllArgs(into) {
		return d.ArgErr()
	}
	return nil
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
