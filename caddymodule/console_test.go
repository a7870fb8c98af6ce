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
