package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// OIDCProviderConfig configures sign-in through one OpenID Connect
// provider, found from its issuer by discovery.
type OIDCProviderConfig struct {
	// Name identifies the provider: its routes are /auth/oidc/<name> and
	// its identities are recorded as provider "oidc:<name>". Lower-case
	// letters, digits and inner hyphens, at most 32.
	Name string
	// Label is the sign-in button's text (default: the name).
	Label string
	// Issuer is the provider's issuer URL; its discovery document is at
	// <issuer>/.well-known/openid-configuration.
	Issuer       string
	ClientID     string
	ClientSecret string
	// Scopes asked for besides openid and email, which always are
	// (default: profile).
	Scopes []string
	// AllowedDomains, when not empty, are the only e-mail domains
	// accepted.
	AllowedDomains []string
	// RequireVerifiedEmail accepts only tokens whose email_verified is
	// true. Without it a token that does not carry email_verified is
	// accepted for an address in AllowedDomains (which must then be set);
	// a token saying false is refused either way.
	RequireVerifiedEmail bool
	// GroupsClaim names the claim holding the user's groups (a string or
	// an array of strings; a dotted name reads a nested object). Required
	// with Roles.
	GroupsClaim string
	// Roles map groups to cluster roles; at every sign-in through this
	// provider, the user's role on each cluster the lines name is set
	// from the groups.
	Roles []OIDCRoleMapping
}

// OIDCRoleMapping grants Role on Cluster (a cluster slug of the user's
// tenant, or "*" for every cluster of it) to members of Group.
type OIDCRoleMapping struct {
	Group   string
	Cluster string
	Role    string
}

// oidcNameRule is the rule of a provider's name, as the schema's
// identity_provider_valid has it after "oidc:".
var oidcNameRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

var clusterSlugRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// oidcSettings are what a generic provider has beyond ProviderConfig.
type oidcSettings struct {
	issuer          string
	scopes          []string
	requireVerified bool
	groupsClaim     string
	roles           []OIDCRoleMapping
	disc            discoveryCache
}

// CheckOIDCProvider reports what is wrong with a provider's configuration
// (nil when nothing is): the rules New applies, for configuration parsers
// to say so early.
func CheckOIDCProvider(c OIDCProviderConfig) error {
	_, err := newOIDC(c)
	return err
}

// newOIDC checks one provider's configuration.
func newOIDC(c OIDCProviderConfig) (*oauthProvider, error) {
	// "callback" would read as the callback of a provider named "".
	if !oidcNameRule.MatchString(c.Name) || c.Name == "callback" {
		return nil, fmt.Errorf("console: oidc provider name %q is not lower-case letters, digits and inner hyphens (at most 32)", c.Name)
	}
	where := "console: oidc " + c.Name
	issuer, err := url.Parse(c.Issuer)
	if err != nil || (issuer.Scheme != "https" && issuer.Scheme != "http") || issuer.Host == "" ||
		issuer.RawQuery != "" || issuer.Fragment != "" || issuer.User != nil {
		return nil, fmt.Errorf("%s: issuer %q is not an http(s) URL without query or fragment", where, c.Issuer)
	}
	if c.ClientID == "" || c.ClientSecret == "" {
		return nil, fmt.Errorf("%s: client_id and client_secret are required", where)
	}
	domains, err := domainSet(c.AllowedDomains, where)
	if err != nil {
		return nil, err
	}
	if !c.RequireVerifiedEmail && len(domains) == 0 {
		return nil, fmt.Errorf("%s: needs allowed_domains or require_verified_email (an address the provider does not say it verified is accepted only within allowed domains)", where)
	}
	// The sign-in needs the e-mail, so openid and email are always asked
	// for; given scopes replace only the default profile.
	scopes := []string{"openid", "email"}
	if len(c.Scopes) == 0 {
		scopes = append(scopes, "profile")
	}
	for _, sc := range c.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			return nil, fmt.Errorf("%s: scope %q is not a scope token", where, sc)
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if len(c.Roles) > 0 && c.GroupsClaim == "" {
		return nil, fmt.Errorf("%s: role lines need groups_claim", where)
	}
	if c.GroupsClaim != "" && len(c.Roles) == 0 {
		return nil, fmt.Errorf("%s: groups_claim needs at least one role line", where)
	}
	for _, m := range c.Roles {
		if m.Group == "" {
			return nil, fmt.Errorf("%s: a role line needs a group", where)
		}
		if m.Cluster != "*" && !clusterSlugRule.MatchString(m.Cluster) {
			return nil, fmt.Errorf("%s: role %s: %q is not a cluster slug or *", where, m.Group, m.Cluster)
		}
		if tenancy.ParseRole(m.Role) == tenancy.RoleNone {
			return nil, fmt.Errorf("%s: role %s: %q is not admin, producer, consumer or viewer", where, m.Group, m.Role)
		}
	}
	label := c.Label
	if label == "" {
		label = c.Name
	}
	p := &oauthProvider{
		kind: "oidc", name: "oidc:" + c.Name, path: "oidc/" + c.Name, label: label,
		cfg:     ProviderConfig{ClientID: c.ClientID, ClientSecret: c.ClientSecret},
		domains: domains,
		oidc: &oidcSettings{
			issuer: c.Issuer, scopes: scopes, requireVerified: c.RequireVerifiedEmail,
			groupsClaim: c.GroupsClaim, roles: slices.Clone(c.Roles),
		},
	}
	return p, nil
}

// domainSet reads allowed e-mail domains.
func domainSet(list []string, where string) (map[string]bool, error) {
	domains := map[string]bool{}
	for _, d := range list {
		d = strings.ToLower(strings.TrimSpace(d))
		if d == "" || strings.ContainsAny(d, "@/ ") {
			return nil, fmt.Errorf("%s: allowed domain %q is not a domain", where, d)
		}
		domains[d] = true
	}
	return domains, nil
}

// discoveryTTL is how long a discovery document is used before asking
// again; discoveryRetryGap is the least time between attempts after a
// failure, so a provider that is down is not asked at every click.
const (
	discoveryTTL      = time.Hour
	discoveryRetryGap = 10 * time.Second
)

// discoveryDoc is what the gateway reads of a provider's discovery
// document.
type discoveryDoc struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	JWKSURI               string   `json:"jwks_uri"`
	IDTokenAlgs           []string `json:"id_token_signing_alg_values_supported"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
	TokenAuthMethods      []string `json:"token_endpoint_auth_methods_supported"`
	// algs is IDTokenAlgs within idTokenAlgs.
	algs []string
	// authStyle is how the client secret goes to the token endpoint.
	authStyle oauth2.AuthStyle
}

// parseDiscovery reads a discovery document and checks it against the
// configured issuer: the issuer exactly, endpoints that are absolute
// http(s) URLs (https when the issuer is), at least one signature
// algorithm the gateway accepts (RS256 when the document names none, as
// the specification makes it the default), S256 among the PKCE methods
// when the document lists them, and a way to send the client secret:
// client_secret_basic (the specification's default when the document
// names none), else client_secret_post.
func parseDiscovery(body []byte, issuer string) (*discoveryDoc, error) {
	var d discoveryDoc
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("discovery document: %w", err)
	}
	if d.Issuer != issuer {
		return nil, fmt.Errorf("discovery document names issuer %q, not %q", d.Issuer, issuer)
	}
	secure := strings.HasPrefix(issuer, "https://")
	for _, e := range []struct{ name, u string }{
		{"authorization_endpoint", d.AuthorizationEndpoint}, {"token_endpoint", d.TokenEndpoint}, {"jwks_uri", d.JWKSURI},
	} {
		u, err := url.Parse(e.u)
		if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" || (u.Scheme != "https" && (secure || u.Scheme != "http")) {
			return nil, fmt.Errorf("discovery document: %s %q is not an acceptable URL", e.name, e.u)
		}
	}
	if d.IDTokenAlgs == nil {
		d.IDTokenAlgs = []string{"RS256"}
	}
	for _, a := range d.IDTokenAlgs {
		if slices.Contains(idTokenAlgs, a) && !slices.Contains(d.algs, a) {
			d.algs = append(d.algs, a)
		}
	}
	if len(d.algs) == 0 {
		return nil, fmt.Errorf("discovery document: no id_token algorithm the gateway accepts among %v", d.IDTokenAlgs)
	}
	if d.CodeChallengeMethods != nil && !slices.Contains(d.CodeChallengeMethods, "S256") {
		return nil, errors.New("discovery document: the provider does not offer PKCE with S256")
	}
	switch {
	case d.TokenAuthMethods == nil || slices.Contains(d.TokenAuthMethods, "client_secret_basic"):
		d.authStyle = oauth2.AuthStyleInHeader
	case slices.Contains(d.TokenAuthMethods, "client_secret_post"):
		d.authStyle = oauth2.AuthStyleInParams
	default:
		return nil, fmt.Errorf("discovery document: the token endpoint takes neither client_secret_basic nor client_secret_post (it names %v)", d.TokenAuthMethods)
	}
	return &d, nil
}

// discoveryCache keeps a provider's discovery document and the key set it
// names.
type discoveryCache struct {
	mu      sync.Mutex
	doc     *discoveryDoc
	jwks    *jwksCache
	fetched time.Time
	tried   time.Time
	lastErr error
}

// endpoints of a provider for one sign-in.
type endpoints struct {
	authURL, tokenURL string
	authStyle         oauth2.AuthStyle
	jwks              *jwksCache
	rules             idTokenRules
}

// resolve returns the provider's endpoints: fixed for Google, from the
// discovery document for a generic provider. A document past its TTL is
// fetched again; while that fails the old one is used.
func (p *oauthProvider) resolve(ctx context.Context, client *http.Client, now time.Time) (endpoints, error) {
	if p.oidc == nil {
		return endpoints{authURL: p.cfg.AuthURL, tokenURL: p.cfg.TokenURL, authStyle: oauth2.AuthStyleInParams, jwks: p.jwks, rules: idTokenRules{
			issuers: []string{"https://accounts.google.com", "accounts.google.com"}, audience: p.cfg.ClientID, algs: []string{"RS256"},
		}}, nil
	}
	c := &p.oidc.disc
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := c.doc != nil && now.Sub(c.fetched) <= discoveryTTL
	if !fresh && (c.lastErr == nil || now.Sub(c.tried) >= discoveryRetryGap) {
		c.tried = now
		doc, err := fetchDiscovery(ctx, client, p.oidc.issuer)
		c.lastErr = err
		if err == nil {
			if c.jwks == nil || c.jwks.url != doc.JWKSURI {
				c.jwks = &jwksCache{url: doc.JWKSURI}
			}
			c.doc, c.fetched = doc, now
		}
	}
	if c.doc == nil {
		return endpoints{}, c.lastErr
	}
	return endpoints{authURL: c.doc.AuthorizationEndpoint, tokenURL: c.doc.TokenEndpoint, authStyle: c.doc.authStyle, jwks: c.jwks, rules: idTokenRules{
		issuers: []string{p.oidc.issuer}, audience: p.cfg.ClientID, algs: c.doc.algs,
	}}, nil
}

func fetchDiscovery(ctx context.Context, client *http.Client, issuer string) (*discoveryDoc, error) {
	body, err := providerGet(ctx, client, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration")
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	return parseDiscovery(body, issuer)
}

// checkEmail applies the provider's e-mail rule to a verified token: the
// address must be there; Google and a provider with require_verified_email
// need email_verified true; a token saying false is always refused; and
// with allowed domains, the address's domain (or Google's hd) must be one.
func (p *oauthProvider) checkEmail(claims *idClaims) (string, *apierror.Error) {
	if claims.Subject == "" || claims.Email == "" {
		return "", invalid("the provider sent no subject or e-mail")
	}
	needVerified := p.oidc == nil || p.oidc.requireVerified
	if claims.saysUnverified() || (needVerified && !claims.verified()) {
		return "", apiErr(http.StatusForbidden, apierror.EmailUnverified, "the e-mail address is not verified")
	}
	email := strings.ToLower(strings.TrimSpace(claims.Email))
	local, domain, ok := strings.Cut(email, "@")
	if !ok || local == "" || domain == "" || strings.Contains(domain, "@") {
		return "", invalid("the provider sent an e-mail address that is not one")
	}
	if len(p.domains) > 0 {
		hd := ""
		if p.oidc == nil {
			hd = strings.ToLower(claims.HostedDomain)
		}
		if !p.domains[hd] && !p.domains[domain] {
			return "", apiErr(http.StatusForbidden, apierror.DomainNotAllowed, "this account's domain is not allowed")
		}
	}
	return email, nil
}

// applyRoleMapping sets the user's roles on the clusters the provider's
// role lines name, within the user's tenant: each such cluster gets the
// most capable role a group of the user maps to, and loses the user's role
// when none does. Roles on clusters no line names are left alone. The
// changes are audited by grant_cluster_role and revoke_cluster_role.
func (s *Surface) applyRoleMapping(ctx context.Context, p *oauthProvider, userID string, groups []string) error {
	if p.oidc == nil || len(p.oidc.roles) == 0 {
		return nil
	}
	var changed []string
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		changed = changed[:0]
		var email string
		if err := tx.QueryRow(ctx, `SELECT email FROM queen_proxy.users WHERE id = $1::uuid FOR UPDATE`, userID).Scan(&email); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT c.id::text, c.slug, coalesce(cr.role, '')
			FROM queen_proxy.clusters c JOIN queen_proxy.users u ON u.tenant_id = c.tenant_id
			LEFT JOIN queen_proxy.cluster_roles cr ON cr.cluster_id = c.id AND cr.user_id = u.id
			WHERE u.id = $1::uuid ORDER BY c.slug`, userID)
		if err != nil {
			return err
		}
		type clusterRole struct{ id, slug, role string }
		clusters, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (clusterRole, error) {
			var c clusterRole
			return c, row.Scan(&c.id, &c.slug, &c.role)
		})
		if err != nil {
			return err
		}
		for _, c := range clusters {
			named, want := false, tenancy.RoleNone
			for _, m := range p.oidc.roles {
				if m.Cluster != "*" && m.Cluster != c.slug {
					continue
				}
				named = true
				if r := tenancy.ParseRole(m.Role); slices.Contains(groups, m.Group) && (want == tenancy.RoleNone || r < want) {
					want = r
				}
			}
			if !named || want.String() == c.role || (want == tenancy.RoleNone && c.role == "") {
				continue
			}
			// As the console's member routes do: the cluster's roles are
			// locked, and its last admin is not demoted (an operator
			// settles that), so a group change cannot orphan a cluster.
			if _, err := lockRoles(ctx, tx, c.id); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT role FROM queen_proxy.cluster_roles
				WHERE cluster_id = $1::uuid AND user_id = $2::uuid), '')`, c.id, userID).Scan(&c.role); err != nil {
				return err
			}
			next := ""
			if want != tenancy.RoleNone {
				next = want.String()
			}
			if next == c.role {
				continue
			}
			if last, err := lastAdmin(ctx, tx, c.id, c.role, next); err != nil {
				return err
			} else if last {
				s.o.Log.Warn("the provider's groups no longer make this user an admin, but the cluster has no other admin; the role is kept",
					zap.String("provider", p.name), zap.String("user_id", userID), zap.String("cluster", c.slug))
				continue
			}
			switch {
			case want == tenancy.RoleNone:
				_, err = tx.Exec(ctx, `SELECT queen_proxy.revoke_cluster_role($1::uuid, $2)`, c.id, email)
			default:
				_, err = tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, c.id, email, want.String())
			}
			if err != nil {
				return err
			}
			changed = append(changed, c.id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("role mapping: %w", err)
	}
	for _, id := range changed {
		s.o.Identities.InvalidateCluster(id)
		if s.o.OnClusterChanged != nil {
			s.o.OnClusterChanged(id)
		}
	}
	if len(changed) > 0 {
		s.o.Log.Info("roles set from the provider's groups", zap.String("provider", p.name),
			zap.String("user_id", userID), zap.Int("clusters_changed", len(changed)))
	}
	return nil
}
