package caddymodule

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestIdentityUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url x
		identity {
			public_url https://login.eu1.example.com
			cookie_domain eu1.example.com
			cors_origins https://a.example https://b.example
			operator_api
			state_secret {env.STATE}
			login_rate {
				free_failures_ip 20
				free_failures_account 3
				backoff_base 2s
				lockout 30m
				window 1h
				max_tracked 5000
			}
			google {
				client_id gid
				client_secret {env.GSECRET}
				allowed_domains acme.com acme.org
				auth_url http://127.0.0.1:1/auth
				token_url http://127.0.0.1:1/token
				jwks_url http://127.0.0.1:1/jwks
			}
			github {
				client_id hid
				client_secret hsecret
				auth_url http://127.0.0.1:2/authorize
				token_url http://127.0.0.1:2/token
				userinfo_url http://127.0.0.1:2/user
				emails_url http://127.0.0.1:2/user/emails
			}
			autoprovision {
				tenant acme
				role producer
			}
			bootstrap {
				tenant acme
				cluster acme-prod
				email admin@acme.com
				password {env.PW}
				plan pro
				cell eu1-a
				api_key {env.KEY}
			}
		}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	id := a.Identity
	if id == nil || id.PublicURL != "https://login.eu1.example.com" || id.CookieDomain != "eu1.example.com" ||
		len(id.CORSOrigins) != 2 || !id.OperatorAPI || id.StateSecret != "{env.STATE}" {
		t.Fatalf("identity %+v", id)
	}
	l := id.LoginRate
	if l == nil || l.FreeFailuresIP != 20 || l.FreeFailuresAccount != 3 || l.BackoffBase != caddy.Duration(2*time.Second) ||
		l.Lockout != caddy.Duration(30*time.Minute) || l.Window != caddy.Duration(time.Hour) || l.MaxTracked != 5000 {
		t.Fatalf("login_rate %+v", l)
	}
	g, h := id.Google, id.GitHub
	if g == nil || g.ClientID != "gid" || g.ClientSecret != "{env.GSECRET}" || len(g.AllowedDomains) != 2 ||
		g.AuthURL != "http://127.0.0.1:1/auth" || g.TokenURL != "http://127.0.0.1:1/token" || g.JWKSURL != "http://127.0.0.1:1/jwks" {
		t.Fatalf("google %+v", g)
	}
	if h == nil || h.ClientID != "hid" || h.UserInfoURL != "http://127.0.0.1:2/user" || h.EmailsURL != "http://127.0.0.1:2/user/emails" {
		t.Fatalf("github %+v", h)
	}
	if ap := id.Autoprovision; ap == nil || ap.Tenant != "acme" || ap.Role != "producer" {
		t.Fatalf("autoprovision %+v", ap)
	}
	b := id.Bootstrap
	if b == nil || b.Tenant != "acme" || b.Cluster != "acme-prod" || b.Email != "admin@acme.com" || b.Password != "{env.PW}" ||
		b.Plan != "pro" || b.Cell != "eu1-a" || b.APIKey != "{env.KEY}" {
		t.Fatalf("bootstrap %+v", b)
	}
	// The JSON form round-trips.
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"identity"`, `"public_url"`, `"login_rate"`, `"free_failures_ip"`, `"allowed_domains"`, `"userinfo_url"`, `"autoprovision"`, `"bootstrap"`, `"api_key"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("JSON lacks %s: %s", field, raw)
		}
	}
}

func TestIdentityCaddyfileErrors(t *testing.T) {
	for input, want := range map[string]string{
		`identity { nope }`:                   `unknown option "nope"`,
		`identity extra`:                      "wrong argument count",
		`identity { public_url ftp://x }`:     "not an http(s) URL",
		`identity { google { client_id x } }`: "google needs client_id and client_secret",
		`identity { github { client_id x; client_secret y; jwks_url http://x } }`:                       "jwks_url is for google only",
		`identity { google { client_id x; client_secret y; emails_url http://x } }`:                     "emails_url is for github only",
		`identity { github { client_id x; client_secret y; allowed_domains a.com } }`:                   "allowed_domains is for google only",
		`identity { google { client_id x; client_secret y; token_url not-a-url } }`:                     "not an http(s) URL",
		`identity { autoprovision { role viewer } }`:                                                    "autoprovision needs a tenant",
		`identity { autoprovision { tenant a; role owner } }`:                                           `role "owner"`,
		`identity { bootstrap { email a@b.c } }`:                                                        "bootstrap needs a tenant",
		`identity { bootstrap { tenant a; colour blue } }`:                                              `bootstrap: unknown option "colour"`,
		`identity { login_rate { free_failures_ip 0 } }`:                                                "not a positive integer",
		`identity { login_rate { lockout soon } }`:                                                      "not a duration",
		`identity { operator_api yes }`:                                                                 "wrong argument count",
		`identity { google { client_id x; client_secret y }; google { client_id x; client_secret y } }`: "google given twice",
		`identity { } identity { }`:                                                                     "identity given twice",
	} {
		// One option per line, braces where the Caddyfile wants them.
		text := strings.NewReplacer("; ", "\n", "{ ", "{\n", " }", "\n}").Replace(input)
		d := caddyfile.NewTestDispenser("queen {\n database_url x\n " + text + "\n}")
		var a App
		err := a.UnmarshalCaddyfile(d)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", input, err, want)
		}
	}
}

func TestIdentityValidate(t *testing.T) {
	a := &App{Sessions: &SessionConfig{HS256Secret: "x"}}
	for name, c := range map[string]*IdentityConfig{
		"bad public url":     {PublicURL: "nope"},
		"provider no id":     {Google: &OAuthProviderConfig{ClientSecret: "s"}},
		"autoprovision":      {Autoprovision: &AutoprovisionConfig{}},
		"autoprovision role": {Autoprovision: &AutoprovisionConfig{Tenant: "a", Role: "root"}},
		"bootstrap":          {Bootstrap: &BootstrapConfig{}},
	} {
		if err := c.validate(a); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (&IdentityConfig{Google: &OAuthProviderConfig{ClientID: "i", ClientSecret: "s"}}).validate(&App{}); err == nil ||
		!strings.Contains(err.Error(), "session keys") {
		t.Fatalf("OAuth without sessions: %v", err)
	}
	if err := (&IdentityConfig{}).validate(&App{}); err != nil {
		t.Fatalf("an empty identity block: %v", err)
	}
}

func TestRequestIsHTTPS(t *testing.T) {
	r := httptest.NewRequest("GET", "http://x/", nil)
	if requestIsHTTPS(r) {
		t.Fatal("plain request is https")
	}
	r.Header.Set("X-Forwarded-Proto", "https")
	if requestIsHTTPS(r) {
		t.Fatal("an untrusted X-Forwarded-Proto counted")
	}
	vars := map[string]any{caddyhttp.TrustedProxyVarKey: true}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	if !requestIsHTTPS(r) {
		t.Fatal("a trusted proxy's X-Forwarded-Proto did not count")
	}
	r = httptest.NewRequest("GET", "https://x/", nil)
	r.TLS = &tls.ConnectionState{}
	if !requestIsHTTPS(r) {
		t.Fatal("TLS request is not https")
	}
}

func TestIdentityOIDCCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url x
		identity {
			oidc okta {
				label "Acme SSO"
				issuer https://acme.okta.example/oauth2/default
				client_id {env.OKTA_ID}
				client_secret {env.OKTA_SECRET}
				scopes groups offline
				allowed_domains acme.com
				require_verified_email
				groups_claim groups
				role queue-admins acme-prod admin
				role everyone * viewer
			}
			oidc keycloak {
				issuer https://sso.acme.example/realms/acme
				client_id console
				client_secret s
				allowed_domains acme.com acme.org
			}
		}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	ps := a.Identity.OIDC
	if len(ps) != 2 {
		t.Fatalf("oidc %+v", ps)
	}
	o := ps[0]
	if o.Name != "okta" || o.Label != "Acme SSO" || o.Issuer != "https://acme.okta.example/oauth2/default" ||
		o.ClientID != "{env.OKTA_ID}" || o.ClientSecret != "{env.OKTA_SECRET}" || strings.Join(o.Scopes, " ") != "groups offline" ||
		strings.Join(o.AllowedDomains, " ") != "acme.com" || !o.RequireVerifiedEmail || o.GroupsClaim != "groups" ||
		len(o.Roles) != 2 || o.Roles[0] != (OIDCRoleConfig{Group: "queue-admins", Cluster: "acme-prod", Role: "admin"}) ||
		o.Roles[1] != (OIDCRoleConfig{Group: "everyone", Cluster: "*", Role: "viewer"}) {
		t.Fatalf("okta %+v", o)
	}
	if k := ps[1]; k.Name != "keycloak" || k.RequireVerifiedEmail || len(k.AllowedDomains) != 2 {
		t.Fatalf("keycloak %+v", k)
	}
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	var back App
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Identity.OIDC; len(got) != 2 || got[0].Roles[1].Cluster != "*" || !got[0].RequireVerifiedEmail {
		t.Fatalf("JSON round trip: %s", raw)
	}
	// The console takes it, placeholders expanded.
	c := o.console(func(s, _ string) string { return strings.ReplaceAll(s, "{env.OKTA_ID}", "real-id") })
	if c.ClientID != "real-id" || len(c.Roles) != 2 || c.Roles[0].Role != "admin" {
		t.Fatalf("console config %+v", c)
	}
}

func TestIdentityOIDCCaddyfileErrors(t *testing.T) {
	const ok = "issuer https://i.example; client_id x; client_secret y; require_verified_email"
	for input, want := range map[string]string{
		`identity { oidc { issuer https://i.example } }`:                                               "oidc needs a name",
		`identity { oidc a b { ` + ok + ` } }`:                                                         "wrong argument count",
		`identity { oidc Okta { ` + ok + ` } }`:                                                        "not lower-case letters",
		`identity { oidc okta { ` + ok + `; colour blue } }`:                                           `oidc okta: unknown option "colour"`,
		`identity { oidc okta { issuer ftp://i.example; client_id x; client_secret y } }`:              "not an http(s) URL",
		`identity { oidc okta { issuer https://i.example; client_secret y; require_verified_email } }`: "client_id and client_secret are required",
		`identity { oidc okta { issuer https://i.example; client_id x; client_secret y } }`:            "needs allowed_domains or require_verified_email",
		`identity { oidc okta { ` + ok + `; role admins * admin } }`:                                   "role lines need groups_claim",
		`identity { oidc okta { ` + ok + `; groups_claim groups } }`:                                   "groups_claim needs at least one role line",
		`identity { oidc okta { ` + ok + `; groups_claim g; role admins * owner } }`:                   `"owner" is not admin`,
		`identity { oidc okta { ` + ok + `; groups_claim g; role admins Prod_1 admin } }`:              "not a cluster slug",
		`identity { oidc okta { ` + ok + `; groups_claim g; role admins admin } }`:                     "role needs <group> <cluster-slug|*> <role>",
		`identity { oidc okta { ` + ok + `; require_verified_email yes } }`:                            "wrong argument count",
		`identity { oidc okta { ` + ok + ` }; oidc okta { ` + ok + ` } }`:                              "oidc okta given twice",
	} {
		text := strings.NewReplacer("; ", "\n", "{ ", "{\n", " }", "\n}").Replace(input)
		d := caddyfile.NewTestDispenser("queen {\n database_url x\n " + text + "\n}")
		var a App
		err := a.UnmarshalCaddyfile(d)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", input, err, want)
		}
	}
	// The JSON form is held to the same rules.
	a := &App{Sessions: &SessionConfig{HS256Secret: "x"}}
	good := &OIDCProviderConfig{Name: "okta", Issuer: "https://i.example", ClientID: "x", ClientSecret: "y", RequireVerifiedEmail: true}
	if err := (&IdentityConfig{OIDC: []*OIDCProviderConfig{good}}).validate(a); err != nil {
		t.Fatalf("a good provider: %v", err)
	}
	for name, c := range map[string]*IdentityConfig{
		"twice":       {OIDC: []*OIDCProviderConfig{good, good}},
		"no rule":     {OIDC: []*OIDCProviderConfig{{Name: "okta", Issuer: "https://i.example", ClientID: "x", ClientSecret: "y"}}},
		"bad issuer":  {OIDC: []*OIDCProviderConfig{{Name: "okta", Issuer: "https://i.example/?q=1", ClientID: "x", ClientSecret: "y", RequireVerifiedEmail: true}}},
		"empty entry": {OIDC: []*OIDCProviderConfig{nil}},
	} {
		if err := c.validate(a); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (&IdentityConfig{OIDC: []*OIDCProviderConfig{good}}).validate(&App{}); err == nil || !strings.Contains(err.Error(), "session keys") {
		t.Fatalf("OIDC without sessions: %v", err)
	}
}
