package caddymodule

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// unmarshal reads a session block; see parseAppOption for the syntax.
func (s *SessionConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "issuer":
			err = parseString(d, &s.Issuer)
		case "audience":
			err = parseString(d, &s.Audience)
		case "ed25519_key_file":
			err = parseString(d, &s.Ed25519KeyFile)
		case "ed25519_public_key_file":
			err = parseString(d, &s.Ed25519PublicKeyFile)
		case "hs256_secret":
			err = parseString(d, &s.HS256Secret)
		case "previous_ed25519_public_key_file":
			var path string
			if err = parseString(d, &path); err == nil {
				if strings.TrimSpace(path) == "" {
					return d.Errf("queen: session: %s needs a PEM file", opt)
				}
				s.PreviousEd25519PublicKeyFiles = append(s.PreviousEd25519PublicKeyFiles, path)
			}
		case "previous_hs256_secret":
			var secret string
			if err = parseString(d, &secret); err == nil {
				if secret == "" {
					return d.Errf("queen: session: %s needs a secret", opt)
				}
				s.PreviousHS256Secrets = append(s.PreviousHS256Secrets, secret)
			}
		case "cookie_name":
			err = parseString(d, &s.CookieName)
		case "ttl":
			err = parseDuration(d, &s.TTL)
		case "revocation_strict":
			if d.NextArg() {
				return d.ArgErr()
			}
			s.RevocationStrict = true
		default:
			return d.Errf("queen: session: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unmarshalCellToken reads one `cell_token <cell> { ... }` block.
func (a *App) unmarshalCellToken(d *caddyfile.Dispenser) error {
	var cell string
	if !d.NextArg() {
		return d.ArgErr()
	}
	cell = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	if _, dup := a.CellTokens[cell]; dup {
		return d.Errf("queen: cell_token %s given twice", cell)
	}
	c := new(CellTokenConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "algorithm":
			err = parseString(d, &c.Algorithm)
			if err == nil && c.Algorithm != "HS256" && c.Algorithm != "EdDSA" {
				return d.Errf("queen: cell_token %s: algorithm must be HS256 or EdDSA, got %q", cell, c.Algorithm)
			}
		case "secret":
			err = parseString(d, &c.Secret)
		case "key_file":
			err = parseString(d, &c.KeyFile)
		case "issuer":
			err = parseString(d, &c.Issuer)
		case "audience":
			err = parseString(d, &c.Audience)
		case "role_claim":
			err = parseString(d, &c.RoleClaim)
		case "ttl":
			err = parseDuration(d, &c.TTL)
		default:
			return d.Errf("queen: cell_token %s: unknown option %q", cell, opt)
		}
		if err != nil {
			return err
		}
	}
	if c.Algorithm == "" {
		return d.Errf("queen: cell_token %s: algorithm is required (HS256 or EdDSA)", cell)
	}
	if a.CellTokens == nil {
		a.CellTokens = map[string]*CellTokenConfig{}
	}
	a.CellTokens[cell] = c
	return nil
}

// unmarshalEnforcement reads the queen_gateway options of the enforcement
// pipeline (shared hosts, shield, size limits, the failed-authentication
// guard); known is false for any other option.
func (g *Gateway) unmarshalEnforcement(d *caddyfile.Dispenser, opt string) (known bool, err error) {
	switch opt {
	case "shared_hosts":
		hosts := d.RemainingArgs()
		if len(hosts) == 0 {
			return true, d.ArgErr()
		}
		g.SharedHosts = append(g.SharedHosts, hosts...)
	case "shield":
		if d.NextArg() {
			return true, d.ArgErr()
		}
		g.Shield = true
	case "console_only":
		if d.NextArg() {
			return true, d.ArgErr()
		}
		g.ConsoleOnly = true
	case "probes":
		if d.NextArg() {
			return true, d.ArgErr()
		}
		g.Probes = true
	case "max_uri_bytes":
		err = parseSizeInt(d, &g.MaxURIBytes)
	case "max_headers":
		err = parseCount(d, &g.MaxHeaders)
	case "max_header_value_bytes":
		err = parseSizeInt(d, &g.MaxHeaderValueBytes)
	case "max_header_bytes":
		err = parseSizeInt(d, &g.MaxHeaderBytes)
	case "max_body_bytes":
		var n int
		err = parseSizeInt(d, &n)
		g.MaxBodyBytes = int64(n)
	case "auth_failures":
		err = g.unmarshalAuthFailures(d)
	case "preauth_conns":
		err = parseCount(d, &g.PreauthConns)
	default:
		return false, nil
	}
	return true, err
}
