package caddymodule

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// JWTIssuerConfig lets the data plane accept the JWTs of a customer's own
// identity provider in place of an API key, on the clusters listed.
type JWTIssuerConfig struct {
	// Name names the issuer in logs and in the console's per-key request
	// counts ("jwt:<name>"); a-z, 0-9 and -, at most 64 characters.
	Name string `json:"name,omitempty"`

	// Issuer is the exact "iss" of the provider's tokens. Required.
	Issuer string `json:"issuer,omitempty"`

	// JWKSURL is the provider's key set; when empty it is discovered from
	// <issuer>/.well-known/openid-configuration. https only (http to a
	// loopback address is allowed, for a provider on the same machine).
	JWKSURL string `json:"jwks_url,omitempty"`

	// Audiences: a token must name one of them in "aud". Required.
	Audiences []string `json:"audiences,omitempty"`

	// Algorithms the tokens may be signed with. Default RS256; only
	// RS*, PS*, ES* and EdDSA are accepted.
	Algorithms []string `json:"algorithms,omitempty"`

	// Clusters are the ids of the clusters the tokens may act on.
	// Required.
	Clusters []string `json:"clusters,omitempty"`

	// ClusterClaim names the claim with the slug or id of the cluster a
	// token is for; it must be the cluster the request is for. Default
	// "queen_cluster".
	ClusterClaim string `json:"cluster_claim,omitempty"`

	// ScopesClaim names the claim with the scopes (a space-separated
	// string or an array). Default "scope".
	ScopesClaim string `json:"scopes_claim,omitempty"`

	// ScopePrefix is what the scope names carry before produce, consume,
	// read and admin in that claim, for example "queen:". Default none.
	ScopePrefix string `json:"scope_prefix,omitempty"`

	// MaxScopes bounds what a token can grant. Default all four.
	MaxScopes []string `json:"max_scopes,omitempty"`

	// Leeway for exp, nbf and iat. Default 30s, at most 5m.
	Leeway caddy.Duration `json:"leeway,omitempty"`

	// JWKSRefresh is the age at which the key set is fetched again, and so
	// how long a key the provider dropped can still verify. Default 5m.
	JWKSRefresh caddy.Duration `json:"jwks_refresh,omitempty"`

	// JWKSMinInterval is the least time between two fetches of the key
	// set, whatever kids tokens name. Default 10s.
	JWKSMinInterval caddy.Duration `json:"jwks_min_interval,omitempty"`
}

// unmarshalJWTIssuer reads one `jwt_issuer <name> { … }` block.
func (a *App) unmarshalJWTIssuer(d *caddyfile.Dispenser) error {
	c := new(JWTIssuerConfig)
	if !d.AllArgs(&c.Name) {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "issuer":
			err = parseString(d, &c.Issuer)
		case "jwks_url":
			err = parseString(d, &c.JWKSURL)
		case "audience":
			err = parseList(d, &c.Audiences)
		case "algorithms":
			err = parseList(d, &c.Algorithms)
		case "clusters":
			err = parseList(d, &c.Clusters)
		case "cluster_claim":
			err = parseString(d, &c.ClusterClaim)
		case "scopes_claim":
			err = parseString(d, &c.ScopesClaim)
		case "scope_prefix":
			err = parseString(d, &c.ScopePrefix)
		case "max_scopes":
			err = parseList(d, &c.MaxScopes)
		case "leeway":
			err = parseDuration(d, &c.Leeway)
		case "jwks_refresh":
			err = parseDuration(d, &c.JWKSRefresh)
		case "jwks_min_interval":
			err = parseDuration(d, &c.JWKSMinInterval)
		default:
			return d.Errf("queen: jwt_issuer %s: unknown option %q", c.Name, opt)
		}
		if err != nil {
			return err
		}
	}
	a.JWTIssuers = append(a.JWTIssuers, c)
	return nil
}

// parseList reads one or more arguments, added to into.
func parseList(d *caddyfile.Dispenser, into *[]string) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.ArgErr()
	}
	*into = append(*into, args...)
	return nil
}

// provisionJWTIssuers builds the issuers; a configuration that could
// accept a token it should not is refused at load.
func (a *App) provisionJWTIssuers(log *zap.Logger) error {
	if len(a.JWTIssuers) == 0 {
		return nil
	}
	cfgs := make([]tenancy.TokenIssuerConfig, 0, len(a.JWTIssuers))
	for _, c := range a.JWTIssuers {
		if c == nil {
			continue
		}
		ceiling := tenancy.ParseScopes(c.MaxScopes)
		if len(c.MaxScopes) > 0 && ceiling == 0 {
			return fmt.Errorf("jwt_issuer %s: max_scopes %v names no scope (produce, consume, read, admin)", c.Name, c.MaxScopes)
		}
		cfgs = append(cfgs, tenancy.TokenIssuerConfig{
			Name: c.Name, Issuer: c.Issuer, JWKSURL: c.JWKSURL, Audiences: c.Audiences,
			Algorithms: c.Algorithms, Clusters: c.Clusters, ClusterClaim: c.ClusterClaim,
			ScopesClaim: c.ScopesClaim, ScopePrefix: c.ScopePrefix, MaxScopes: ceiling,
			Leeway: time.Duration(c.Leeway), JWKSRefresh: time.Duration(c.JWKSRefresh),
			JWKSMinInterval: time.Duration(c.JWKSMinInterval),
			Logger:          log.Named("jwt_issuer"),
		})
	}
	issuers, err := tenancy.NewTokenIssuers(cfgs)
	if err != nil {
		return err
	}
	a.tokenIssuers = issuers
	return nil
}

// errTokenActAs refuses x-queen-act-cluster with a provider's token: like
// an API key, the token is bound to the cluster it names.
var errTokenActAs = &apierror.Error{Status: errKeyActAs.Status, Code: errKeyActAs.Code,
	Message: "identity provider tokens are bound to the cluster they name; x-queen-act-cluster is not honoured for them"}

// authenticateIssuerToken admits a token of a configured identity
// provider as an API key would be: a refusal of the token itself is 401,
// a token for another cluster 403, and the principal carries the token's
// scopes under the issuer's stable id, so limits, metering and the
// request tally treat it as one more key of the cluster.
func (g *Gateway) authenticateIssuerToken(ctx context.Context, st *requestState, t target, iss *tenancy.TokenIssuer, token string, addr netip.Addr) (*tenancy.Cluster, *apierror.Error) {
	if t.actAs != "" {
		return nil, errTokenActAs
	}
	claims, err := iss.Verify(token)
	if err != nil {
		g.failures.Fail(addr)
		g.logger.Debug("identity provider token refused", zap.String("request_id", st.rid),
			zap.String("jwt_issuer", iss.Name()), zap.Error(err))
		return nil, errInvalidCredential
	}
	var cluster *tenancy.Cluster
	switch {
	case t.unknownHost:
		return nil, t.unknownHostRefusal()
	case t.sharedHost:
		// The token names its cluster, as a key does on a shared host.
		cluster = g.namedCluster(ctx, claims.Cluster)
	case claims.Cluster == t.cluster.Slug || claims.Cluster == t.cluster.ID:
		cluster = t.cluster
	}
	if cluster == nil || !iss.MaySee(cluster) {
		g.logger.Debug("identity provider token for another cluster", zap.String("request_id", st.rid),
			zap.String("jwt_issuer", iss.Name()), zap.String("claimed", claims.Cluster))
		return nil, errTokenOtherCluster
	}
	st.principal = tenancy.Principal{Kind: tenancy.PrincipalToken, KeyID: iss.Subject(), Scopes: claims.Scopes}
	return cluster, nil
}
