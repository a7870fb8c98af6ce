package caddymodule

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
)

func TestAppUnmarshalJWTIssuer(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url x
		jwt_issuer acme-okta {
			issuer https://acme.okta.example/oauth2/default
			jwks_url https://acme.okta.example/oauth2/default/v1/keys
			audience queen api://queen
			algorithms RS256 ES256
			clusters 11111111-2222-4333-8444-555555555555
			cluster_claim qc
			scopes_claim scp
			scope_prefix queen:
			max_scopes produce consume
			leeway 10s
			jwks_refresh 2m
			jwks_min_interval 5s
		}
		jwt_issuer other {
			issuer https://other.example
			audience q
			clusters 99999999-2222-4333-8444-555555555555
		}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if len(a.JWTIssuers) != 2 {
		t.Fatalf("%d issuers", len(a.JWTIssuers))
	}
	c := a.JWTIssuers[0]
	if c.Name != "acme-okta" || c.Issuer != "https://acme.okta.example/oauth2/default" ||
		c.JWKSURL != "https://acme.okta.example/oauth2/default/v1/keys" ||
		strings.Join(c.Audiences, ",") != "queen,api://queen" || strings.Join(c.Algorithms, ",") != "RS256,ES256" ||
		strings.Join(c.Clusters, ",") != "11111111-2222-4333-8444-555555555555" || c.ClusterClaim != "qc" ||
		c.ScopesClaim != "scp" || c.ScopePrefix != "queen:" || strings.Join(c.MaxScopes, ",") != "produce,consume" ||
		c.Leeway != caddy.Duration(10*time.Second) || c.JWKSRefresh != caddy.Duration(2*time.Minute) ||
		c.JWKSMinInterval != caddy.Duration(5*time.Second) {
		t.Fatalf("parsed %+v", c)
	}
	if err := a.provisionJWTIssuers(zap.NewNop()); err != nil || a.tokenIssuers == nil {
		t.Fatalf("provision: %v", err)
	}
}

func TestJWTIssuerConfigRefusedAtLoad(t *testing.T) {
	for name, src := range map[string]string{
		"no name":        "queen {\n\tjwt_issuer {\n\t}\n}",
		"unknown option": "queen {\n\tjwt_issuer a {\n\t\tsecret s\n\t}\n}",
		"empty audience": "queen {\n\tjwt_issuer a {\n\t\taudience\n\t}\n}",
	} {
		var a App
		if err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	base := func() *JWTIssuerConfig {
		return &JWTIssuerConfig{Name: "a", Issuer: "https://idp.example", Audiences: []string{"q"},
			Clusters: []string{"11111111-2222-4333-8444-555555555555"}}
	}
	for name, mutate := range map[string]func(*JWTIssuerConfig){
		"hmac":            func(c *JWTIssuerConfig) { c.Algorithms = []string{"HS256"} },
		"none":            func(c *JWTIssuerConfig) { c.Algorithms = []string{"none"} },
		"no clusters":     func(c *JWTIssuerConfig) { c.Clusters = nil },
		"no audience":     func(c *JWTIssuerConfig) { c.Audiences = nil },
		"no scope at all": func(c *JWTIssuerConfig) { c.MaxScopes = []string{"write"} },
		"plain http":      func(c *JWTIssuerConfig) { c.Issuer = "http://idp.example" },
	} {
		c := base()
		mutate(c)
		a := App{JWTIssuers: []*JWTIssuerConfig{c}}
		if err := a.provisionJWTIssuers(zap.NewNop()); err == nil {
			t.Errorf("%s: provisioned", name)
		}
	}
	a := App{JWTIssuers: []*JWTIssuerConfig{base(), base()}}
	if err := a.provisionJWTIssuers(zap.NewNop()); err == nil {
		t.Error("the same issuer twice provisioned")
	}
	var none App
	if err := none.provisionJWTIssuers(zap.NewNop()); err != nil || none.tokenIssuers != nil {
		t.Fatalf("no jwt_issuer: %v %v", err, none.tokenIssuers)
	}
}
