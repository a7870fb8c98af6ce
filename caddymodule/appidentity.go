package caddymodule

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/queengate/queengate/console"
	"github.com/queengate/queengate/internal/mailer"
	"github.com/queengate/queengate/tenancy"
)

// IdentityConfig configures human sign-in and the console: the login
// endpoints (/auth/*), OAuth providers, the console API and app
// (/api/console/*, /console) and the operator API (/api/operator/*).
// Sessions themselves (keys, cookie name, TTL) are the `session` block's.
type IdentityConfig struct {
	// PublicURL is the external base URL of the sign-in host, such as
	// "https://login.eu1.example.com": OAuth callbacks go to
	// <public_url>/auth/<provider>/callback and its origin may make
	// credentialed writes. Default: none (callbacks go to the host the
	// sign-in started on).
	PublicURL string `json:"public_url,omitempty"`

	// CookieDomain is the Domain of the session cookie, for one sign-in
	// across every cluster host (for example "eu1.example.com"); the
	// cookie is then always Secure. Default: none (a host-only cookie).
	CookieDomain string `json:"cookie_domain,omitempty"`

	// CORSOrigins are the browser origins (or "*") allowed to call the
	// identity, console and operator APIs; listed origins may send
	// cookies and make writes. Default: none (same-origin only).
	CORSOrigins []string `json:"cors_origins,omitempty"`

	// OperatorAPI opens /api/operator/* to live operators (users with the
	// operator bit, with operator_enabled on the queen app). Default off:
	// the routes answer 404.
	OperatorAPI bool `json:"operator_api,omitempty"`

	// StateSecret signs OAuth state (at least 32 bytes; placeholders are
	// expanded). Default: derived from the session's hs256_secret, else
	// random per process (a sign-in then must finish on the gateway
	// process it started on).
	StateSecret string `json:"state_secret,omitempty"`

	// LoginRate tunes the brute-force guard of password logins.
	LoginRate *LoginRateConfig `json:"login_rate,omitempty"`

	// Google enables "Continue with Google" (OpenID Connect).
	Google *OAuthProviderConfig `json:"google,omitempty"`

	// GitHub enables "Continue with GitHub".
	GitHub *OAuthProviderConfig `json:"github,omitempty"`

	// OIDC are OpenID Connect providers (Okta, Entra ID, Keycloak, Auth0,
	// ...), each found from its issuer by discovery and offered as a
	// sign-in button in this order after Google and GitHub.
	OIDC []*OIDCProviderConfig `json:"oidc,omitempty"`

	// Autoprovision creates a user for an OAuth sign-in whose verified
	// e-mail is unknown. Default: such sign-ins are refused
	// (403 not_provisioned).
	Autoprovision *AutoprovisionConfig `json:"autoprovision,omitempty"`

	// Bootstrap creates a tenant, a cluster, its admin and API keys at
	// start when they do not exist.
	Bootstrap *BootstrapConfig `json:"bootstrap,omitempty"`

	// Email sends member invitations, password resets and address
	// verification through an SMTP relay. Default: none of those flows.
	Email *EmailConfig `json:"email,omitempty"`

	once      sync.Once
	onceErr   error
	guard     *console.LoginGuard
	stateKey  []byte
	bootstrap console.BootstrapResult
	mail      *mailer.Mailer
}

// LoginRateConfig tunes the password-login brute-force guard: each client
// address (IPv6: its /64) and each account has some free failures, then
// waits BackoffBase, doubling with every failure, up to Lockout; a
// counter resets after Window without failures.
type LoginRateConfig struct {
	// FreeFailuresIP is the failures one address may make before waiting.
	// Default 10.
	FreeFailuresIP int `json:"free_failures_ip,omitempty"`
	// FreeFailuresAccount is the failures one account may take before
	// waiting. Default 5.
	FreeFailuresAccount int `json:"free_failures_account,omitempty"`
	// BackoffBase is the first wait. Default 1s.
	BackoffBase caddy.Duration `json:"backoff_base,omitempty"`
	// Lockout caps the wait. Default 15m.
	Lockout caddy.Duration `json:"lockout,omitempty"`
	// Window resets a counter after this long without failures.
	// Default 15m.
	Window caddy.Duration `json:"window,omitempty"`
	// MaxTracked caps the addresses and accounts remembered. Default
	// 100000.
	MaxTracked int `json:"max_tracked,omitempty"`
}

// OAuthProviderConfig is one OAuth provider. The endpoint URLs default to
// the provider's real ones; set them only to point at a test double or a
// proxy.
type OAuthProviderConfig struct {
	// ClientID and ClientSecret are the OAuth client's (placeholders are
	// expanded). Both required.
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	// AllowedDomains (Google only): accept only these Workspace domains
	// (hd) or e-mail domains. Default: any verified account.
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	// AuthURL is the authorization endpoint.
	AuthURL string `json:"auth_url,omitempty"`
	// TokenURL is the token endpoint.
	TokenURL string `json:"token_url,omitempty"`
	// UserInfoURL (GitHub only) is the user endpoint.
	UserInfoURL string `json:"userinfo_url,omitempty"`
	// EmailsURL (GitHub only) is the user's e-mails endpoint.
	EmailsURL string `json:"emails_url,omitempty"`
	// JWKSURL (Google only) is where the id_token signing keys are.
	JWKSURL string `json:"jwks_url,omitempty"`
}

// OIDCProviderConfig is one OpenID Connect provider.
type OIDCProviderConfig struct {
	// Name identifies the provider: its routes are /auth/oidc/<name>
	// (the callback /auth/oidc/<name>/callback) and its identities are
	// recorded as oidc:<name>. Lower-case letters, digits and inner
	// hyphens, at most 32. Required.
	Name string `json:"name,omitempty"`
	// Label is the sign-in button's text. Default: the name.
	Label string `json:"label,omitempty"`
	// Issuer is the provider's issuer URL, exactly as its discovery
	// document (<issuer>/.well-known/openid-configuration) names it.
	// Required.
	Issuer string `json:"issuer,omitempty"`
	// ClientID and ClientSecret are the OAuth client's (placeholders are
	// expanded). Both required.
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	// Scopes asked for besides openid and email, which always are.
	// Default: profile.
	Scopes []string `json:"scopes,omitempty"`
	// AllowedDomains: accept only addresses in these domains.
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	// RequireVerifiedEmail: accept only tokens saying email_verified
	// true. Without it, a token that does not carry email_verified is
	// accepted for an address in AllowedDomains, which must then be set.
	RequireVerifiedEmail bool `json:"require_verified_email,omitempty"`
	// GroupsClaim is the claim holding the user's groups (a string or
	// an array of strings; a dotted name reads a nested object).
	// Required with Roles.
	GroupsClaim string `json:"groups_claim,omitempty"`
	// Roles map groups to cluster roles, set at every sign-in through
	// this provider on the clusters they name.
	Roles []OIDCRoleConfig `json:"roles,omitempty"`
}

// OIDCRoleConfig grants Role on Cluster (a cluster slug of the user's
// tenant, or "*" for all of its clusters) to the members of Group.
type OIDCRoleConfig struct {
	Group   string `json:"group,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Role    string `json:"role,omitempty"`
}

// AutoprovisionConfig names where new OAuth users go.
type AutoprovisionConfig struct {
	// Tenant is the slug of the tenant new users join. Required.
	Tenant string `json:"tenant,omitempty"`
	// Role is granted on every cluster of the tenant. Default viewer.
	Role string `json:"role,omitempty"`
}

// BootstrapConfig creates, idempotently at start, a tenant with a cluster,
// its admin and API keys (through bootstrap_tenant); nothing that exists
// is changed.
type BootstrapConfig struct {
	// Tenant is the tenant's slug. Required.
	Tenant string `json:"tenant,omitempty"`
	// Cluster is the cluster's slug. Default: the tenant's.
	Cluster string `json:"cluster,omitempty"`
	// Email is the admin's e-mail. Default "admin@localhost".
	Email string `json:"email,omitempty"`
	// Password is the admin's password, set when the admin is created
	// (placeholders are expanded). Default: none (sign-in through OAuth
	// only, with that e-mail).
	Password string `json:"password,omitempty"`
	// Plan is a new cluster's plan code. Default "dev".
	Plan string `json:"plan,omitempty"`
	// Cell is the slug of a new cluster's cell. Default: the database
	// places it (the least loaded active cell of the plan's class with
	// room, as "caddy queen cluster create" without --cell).
	Cell string `json:"cell,omitempty"`
	// APIKey is a known API key (placeholders are expanded) issued with
	// every scope on the cluster unless it exists.
	APIKey string `json:"api_key,omitempty"`
}

// unmarshal reads an identity block of the queen global option:
//
//	identity {
//		public_url    <url>
//		cookie_domain <domain>
//		cors_origins  <origin...|*>
//		operator_api
//		state_secret  <secret>
//		login_rate {
//			free_failures_ip      <n>
//			free_failures_account <n>
//			backoff_base          <duration>
//			lockout               <duration>
//			window                <duration>
//			max_tracked           <n>
//		}
//		google {
//			client_id       <id>
//			client_secret   <secret>
//			allowed_domains <domain...>
//			auth_url        <url>
//			token_url       <url>
//			jwks_url        <url>
//		}
//		github {
//			client_id     <id>
//			client_secret <secret>
//			auth_url      <url>
//			token_url     <url>
//			userinfo_url  <url>
//			emails_url    <url>
//		}
//		oidc <name> {
//			label                  <text>
//			issuer                 <url>
//			client_id              <id>
//			client_secret          <secret>
//			scopes                 <scope...>
//			allowed_domains        <domain...>
//			require_verified_email
//			groups_claim           <claim>
//			role                   <group> <cluster-slug|*> <admin|producer|consumer|viewer>
//		}
//		autoprovision {
//			tenant <slug>
//			role   <admin|producer|consumer|viewer>
//		}
//		email { … }	(see EmailConfig.unmarshal)
//		bootstrap {
//			tenant   <slug>
//			cluster  <slug>
//			email    <email>
//			password <password>
//			plan     <code>
//			cell     <slug>
//			api_key  <key>
//		}
//	}
func (c *IdentityConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "public_url":
			err = parseString(d, &c.PublicURL)
			if err == nil {
				if u, perr := url.Parse(c.PublicURL); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return d.Errf("queen: identity: public_url %q is not an http(s) URL", c.PublicURL)
				}
			}
		case "cookie_domain":
			err = parseString(d, &c.CookieDomain)
		case "cors_origins":
			origins := d.RemainingArgs()
			if len(origins) == 0 {
				return d.ArgErr()
			}
			c.CORSOrigins = append(c.CORSOrigins, origins...)
		case "operator_api":
			if d.NextArg() {
				return d.ArgErr()
			}
			c.OperatorAPI = true
		case "state_secret":
			err = parseString(d, &c.StateSecret)
		case "login_rate":
			if c.LoginRate != nil {
				return d.Err("queen: identity: login_rate given twice")
			}
			c.LoginRate = new(LoginRateConfig)
			err = c.LoginRate.unmarshal(d)
		case "google", "github":
			p := new(OAuthProviderConfig)
			if opt == "google" {
				if c.Google != nil {
					return d.Err("queen: identity: google given twice")
				}
				c.Google = p
			} else {
				if c.GitHub != nil {
					return d.Err("queen: identity: github given twice")
				}
				c.GitHub = p
			}
			err = p.unmarshal(d, opt)
		case "oidc":
			p := new(OIDCProviderConfig)
			err = p.unmarshal(d)
			if err == nil {
				for _, q := range c.OIDC {
					if q.Name == p.Name {
						return d.Errf("queen: identity: oidc %s given twice", p.Name)
					}
				}
				c.OIDC = append(c.OIDC, p)
			}
		case "autoprovision":
			if c.Autoprovision != nil {
				return d.Err("queen: identity: autoprovision given twice")
			}
			c.Autoprovision = new(AutoprovisionConfig)
			err = c.Autoprovision.unmarshal(d)
		case "email":
			if c.Email != nil {
				return d.Err("queen: identity: email given twice")
			}
			c.Email = new(EmailConfig)
			err = c.Email.unmarshal(d)
		case "bootstrap":
			if c.Bootstrap != nil {
				return d.Err("queen: identity: bootstrap given twice")
			}
			c.Bootstrap = new(BootstrapConfig)
			err = c.Bootstrap.unmarshal(d)
		default:
			return d.Errf("queen: identity: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *LoginRateConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "free_failures_ip":
			err = parseCount(d, &l.FreeFailuresIP)
		case "free_failures_account":
			err = parseCount(d, &l.FreeFailuresAccount)
		case "backoff_base":
			err = parseDuration(d, &l.BackoffBase)
		case "lockout":
			err = parseDuration(d, &l.Lockout)
		case "window":
			err = parseDuration(d, &l.Window)
		case "max_tracked":
			err = parseCount(d, &l.MaxTracked)
		default:
			return d.Errf("queen: identity: login_rate: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *OAuthProviderConfig) unmarshal(d *caddyfile.Dispenser, provider string) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "client_id":
			err = parseString(d, &p.ClientID)
		case "client_secret":
			err = parseString(d, &p.ClientSecret)
		case "allowed_domains":
			if provider != "google" {
				return d.Errf("queen: identity: %s: allowed_domains is for google only", provider)
			}
			domains := d.RemainingArgs()
			if len(domains) == 0 {
				return d.ArgErr()
			}
			p.AllowedDomains = append(p.AllowedDomains, domains...)
		case "auth_url":
			err = parseURL(d, provider, &p.AuthURL)
		case "token_url":
			err = parseURL(d, provider, &p.TokenURL)
		case "userinfo_url", "emails_url":
			if provider != "github" {
				return d.Errf("queen: identity: %s: %s is for github only", provider, opt)
			}
			into := &p.UserInfoURL
			if opt == "emails_url" {
				into = &p.EmailsURL
			}
			err = parseURL(d, provider, into)
		case "jwks_url":
			if provider != "google" {
				return d.Errf("queen: identity: %s: jwks_url is for google only", provider)
			}
			err = parseURL(d, provider, &p.JWKSURL)
		default:
			return d.Errf("queen: identity: %s: unknown option %q", provider, opt)
		}
		if err != nil {
			return err
		}
	}
	if p.ClientID == "" || p.ClientSecret == "" {
		return d.Errf("queen: identity: %s needs client_id and client_secret", provider)
	}
	return nil
}

func (p *OIDCProviderConfig) unmarshal(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.Err("queen: identity: oidc needs a name: oidc <name> { ... }")
	}
	p.Name = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	where := "oidc " + p.Name
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "label":
			err = parseString(d, &p.Label)
		case "issuer":
			err = parseURL(d, where, &p.Issuer)
		case "client_id":
			err = parseString(d, &p.ClientID)
		case "client_secret":
			err = parseString(d, &p.ClientSecret)
		case "scopes":
			scopes := d.RemainingArgs()
			if len(scopes) == 0 {
				return d.ArgErr()
			}
			p.Scopes = append(p.Scopes, scopes...)
		case "allowed_domains":
			domains := d.RemainingArgs()
			if len(domains) == 0 {
				return d.ArgErr()
			}
			p.AllowedDomains = append(p.AllowedDomains, domains...)
		case "require_verified_email":
			if d.NextArg() {
				return d.ArgErr()
			}
			p.RequireVerifiedEmail = true
		case "groups_claim":
			err = parseString(d, &p.GroupsClaim)
		case "role":
			args := d.RemainingArgs()
			if len(args) != 3 {
				return d.Errf("queen: identity: %s: role needs <group> <cluster-slug|*> <role>", where)
			}
			p.Roles = append(p.Roles, OIDCRoleConfig{Group: args[0], Cluster: args[1], Role: args[2]})
		default:
			return d.Errf("queen: identity: %s: unknown option %q", where, opt)
		}
		if err != nil {
			return err
		}
	}
	if err := console.CheckOIDCProvider(p.console(func(s, _ string) string { return s })); err != nil {
		return d.Errf("queen: identity: %v", err)
	}
	return nil
}

// console is the provider as the console takes it, with placeholders
// expanded by expand.
func (p *OIDCProviderConfig) console(expand func(string, string) string) console.OIDCProviderConfig {
	c := console.OIDCProviderConfig{
		Name: p.Name, Label: p.Label, Issuer: p.Issuer,
		ClientID: expand(p.ClientID, ""), ClientSecret: expand(p.ClientSecret, ""),
		Scopes: p.Scopes, AllowedDomains: p.AllowedDomains, RequireVerifiedEmail: p.RequireVerifiedEmail,
		GroupsClaim: p.GroupsClaim,
	}
	for _, r := range p.Roles {
		c.Roles = append(c.Roles, console.OIDCRoleMapping{Group: r.Group, Cluster: r.Cluster, Role: r.Role})
	}
	return c
}

func parseURL(d *caddyfile.Dispenser, provider string, into *string) error {
	opt := d.Val()
	if err := parseString(d, into); err != nil {
		return err
	}
	u, err := url.Parse(*into)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return d.Errf("queen: identity: %s: %s %q is not an http(s) URL", provider, opt, *into)
	}
	return nil
}

func (a *AutoprovisionConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "tenant":
			err = parseString(d, &a.Tenant)
		case "role":
			err = parseString(d, &a.Role)
			if err == nil && tenancy.ParseRole(a.Role) == tenancy.RoleNone {
				return d.Errf("queen: identity: autoprovision: role %q is not admin, producer, consumer or viewer", a.Role)
			}
		default:
			return d.Errf("queen: identity: autoprovision: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	if a.Tenant == "" {
		return d.Err("queen: identity: autoprovision needs a tenant")
	}
	return nil
}

func (b *BootstrapConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "tenant":
			err = parseString(d, &b.Tenant)
		case "cluster":
			err = parseString(d, &b.Cluster)
		case "email":
			err = parseString(d, &b.Email)
		case "password":
			err = parseString(d, &b.Password)
		case "plan":
			err = parseString(d, &b.Plan)
		case "cell":
			err = parseString(d, &b.Cell)
		case "api_key":
			err = parseString(d, &b.APIKey)
		default:
			return d.Errf("queen: identity: bootstrap: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	if b.Tenant == "" {
		return d.Err("queen: identity: bootstrap needs a tenant")
	}
	return nil
}

// validate checks what the JSON form may get wrong.
func (c *IdentityConfig) validate(a *App) error {
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("identity: public_url %q is not an http(s) URL", c.PublicURL)
		}
	}
	if c.Autoprovision != nil && c.Autoprovision.Role != "" && tenancy.ParseRole(c.Autoprovision.Role) == tenancy.RoleNone {
		return fmt.Errorf("identity: autoprovision role %q is not admin, producer, consumer or viewer", c.Autoprovision.Role)
	}
	if c.Autoprovision != nil && c.Autoprovision.Tenant == "" {
		return fmt.Errorf("identity: autoprovision needs a tenant")
	}
	if c.Bootstrap != nil && c.Bootstrap.Tenant == "" {
		return fmt.Errorf("identity: bootstrap needs a tenant")
	}
	for name, p := range map[string]*OAuthProviderConfig{"google": c.Google, "github": c.GitHub} {
		if p != nil && (p.ClientID == "" || p.ClientSecret == "") {
			return fmt.Errorf("identity: %s needs client_id and client_secret", name)
		}
	}
	if c.Email != nil && c.PublicURL == "" {
		return fmt.Errorf("identity: email needs public_url: the links it sends are built from it, never from a request's Host")
	}
	seen := map[string]bool{}
	for _, p := range c.OIDC {
		if p == nil {
			return fmt.Errorf("identity: an oidc entry is empty")
		}
		if seen[p.Name] {
			return fmt.Errorf("identity: oidc %s given twice", p.Name)
		}
		seen[p.Name] = true
		if err := console.CheckOIDCProvider(p.console(func(s, _ string) string { return s })); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if (c.Google != nil || c.GitHub != nil || len(c.OIDC) > 0 || c.Bootstrap != nil || c.Email != nil) && a.Sessions == nil {
		return fmt.Errorf("identity: sign-in needs session keys (a session block in the queen option)")
	}
	return nil
}

// loginGuards keeps each distinct guard configuration's guard across
// reloads, so a reload does not forgive failed logins.
var loginGuards sync.Map // settings -> *console.LoginGuard

// processStateKey signs OAuth state when no secret is configured.
var processStateKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
})

// provision prepares what every gateway's surface shares (the login guard,
// the OAuth state key) and runs the bootstrap, once per configuration.
func (c *IdentityConfig) provision(a *App) error {
	c.once.Do(func() { c.onceErr = c.provisionOnce(a) })
	return c.onceErr
}

func (c *IdentityConfig) provisionOnce(a *App) error {
	if err := c.validate(a); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	cfg := console.LoginGuardConfig{}
	if l := c.LoginRate; l != nil {
		cfg = console.LoginGuardConfig{
			FreeFailuresIP: l.FreeFailuresIP, FreeFailuresAccount: l.FreeFailuresAccount,
			BackoffBase: time.Duration(l.BackoffBase), Lockout: time.Duration(l.Lockout),
			Window: time.Duration(l.Window), MaxTracked: l.MaxTracked,
		}
	}
	key := fmt.Sprintf("%+v", cfg)
	g, _ := loginGuards.LoadOrStore(key, console.NewLoginGuard(cfg))
	c.guard = g.(*console.LoginGuard)
	if c.Email != nil {
		m, err := c.Email.mailer()
		if err != nil {
			return fmt.Errorf("identity: email: %w", err)
		}
		c.mail = m
	}

	switch secret := repl.ReplaceAll(c.StateSecret, ""); {
	case secret != "":
		if len(secret) < 32 {
			return fmt.Errorf("identity: state_secret must be at least 32 bytes")
		}
		c.stateKey = []byte(secret)
	case a.Sessions != nil && a.Sessions.HS256Secret != "":
		sum := sha256.Sum256([]byte("queengate oauth state\x00" + repl.ReplaceAll(a.Sessions.HS256Secret, "")))
		c.stateKey = sum[:]
	default:
		c.stateKey = processStateKey()
	}
	return c.runBootstrap(a)
}

// runBootstrap creates the configured tenant, cluster, admin and keys if
// they are missing.
func (c *IdentityConfig) runBootstrap(a *App) error {
	b := c.Bootstrap
	if b == nil {
		return nil
	}
	repl := caddy.NewReplacer()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Duration(a.DatabaseTimeout))
	defer cancel()
	res, err := console.Bootstrap(ctx, a.backend.pool, console.BootstrapConfig{
		Tenant: b.Tenant, Cluster: b.Cluster, Email: b.Email, Password: repl.ReplaceAll(b.Password, ""),
		Plan: b.Plan, Cell: b.Cell, APIKey: repl.ReplaceAll(b.APIKey, ""),
	})
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	c.bootstrap = res
	log := a.logger.Named("bootstrap")
	log.Info("bootstrap tenant ready",
		zap.String("tenant_id", res.TenantID), zap.String("cluster_id", res.ClusterID),
		zap.String("admin_user_id", res.UserID), zap.Bool("password_set", res.PasswordSet),
		zap.Bool("can_login", res.CanLogin), zap.Bool("known_key_issued", res.KnownKeyIssued))
	if !res.CanLogin {
		log.Warn("the bootstrap admin has no password and no linked sign-in provider, so cannot sign in yet; set bootstrap password, or sign in once through OAuth with that e-mail")
	}
	if res.GeneratedKey != "" {
		if b.APIKey == "" && !res.CanLogin {
			// Nobody can sign in to make a key, and none is configured:
			// this is the only way in, shown this once.
			log.Warn("bootstrap API key issued; it is shown this once", zap.String("api_key", res.GeneratedKey))
		} else {
			log.Info("bootstrap issued an API key named \"bootstrap\" that is not shown; create keys in the console, and revoke it there if unused")
		}
	}
	return nil
}
