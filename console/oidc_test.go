package console

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/testidp"
)

// oidcFlow is one generic-OIDC sign-in a browser started at the gateway.
type oidcFlow struct {
	authorize string // where the gateway sent the browser
	cookie    string // the flow cookie, "name=value"
}

func (e *env) oidcStart(host, provider, next string) oidcFlow {
	e.t.Helper()
	r := e.do(req{method: "GET", host: host, path: "/auth/oidc/" + provider + "?next=" + url.QueryEscape(next)}).want(302, "")
	f := oidcFlow{authorize: r.Header().Get("Location")}
	for _, c := range (&http.Response{Header: r.Header()}).Cookies() {
		if c.Name == flowCookie {
			f.cookie = c.Name + "=" + c.Value
		}
	}
	if f.cookie == "" {
		e.t.Fatal("no flow cookie")
	}
	return f
}

// oidcFinish sends the browser the provider redirected back to the
// gateway's callback.
func (e *env) oidcFinish(back *url.URL, cookie string) resp {
	e.t.Helper()
	hdr := map[string]string{"Cookie": cookie}
	return e.do(req{method: "GET", host: back.Host, path: back.RequestURI(), header: hdr})
}

// noSession fails when a response set a session cookie.
func noSession(t *testing.T, what string, r resp) {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header()}).Cookies() {
		if c.Name == "queen_session" && c.Value != "" {
			t.Fatalf("%s: a session cookie was set", what)
		}
	}
}

// TestOIDCSignIn signs in through a real OpenID provider found by
// discovery: a new user is provisioned with roles from its groups and can
// use the console; a rotated signing key is fetched once; and each of the
// token's checks refuses with a clear error and no session.
func TestOIDCSignIn(t *testing.T) {
	idp := testidp.New(t)
	e0 := newEnv(t)
	tenantID, tenantSlug := e0.tenant()
	c1, host := e0.cluster(tenantID)
	c2, host2 := e0.cluster(tenantID)
	slug2 := strings.TrimSuffix(host2, "."+baseDomain)
	e := newEnv(t, func(o *Options) {
		o.OIDC = []OIDCProviderConfig{{
			Name: "corp", Label: "Corp SSO", Issuer: idp.URL, ClientID: testidp.ClientID, ClientSecret: testidp.ClientSecret,
			AllowedDomains: []string{"acme.test"}, RequireVerifiedEmail: true, GroupsClaim: "groups",
			Roles: []OIDCRoleMapping{
				{Group: "queue-readers", Cluster: "*", Role: "viewer"},
				{Group: "queue-admins", Cluster: slug2, Role: "admin"},
			},
		}, {
			// The same client under another id the provider knows it by:
			// its tokens are for the client's own id, not this one.
			Name: "alias", Issuer: idp.URL, ClientID: "console-alias", ClientSecret: testidp.ClientSecret,
			AllowedDomains: []string{"acme.test"}, RequireVerifiedEmail: true,
		}}
		o.Autoprovision = &AutoprovisionConfig{Tenant: tenantSlug, Role: "consumer"}
	})
	idp.Alias("console-alias")
	idp.AllowRedirect("http://" + host + "/auth/oidc/corp/callback")
	idp.AllowRedirect("http://" + host + "/auth/oidc/alias/callback")

	// The login page lists the provider.
	if page := e.do(req{method: "GET", host: host, path: "/auth/login?next=/console/"}).Body.String(); !strings.Contains(page, "Corp SSO") ||
		!strings.Contains(page, "/auth/oidc/corp?next=%2Fconsole%2F") {
		t.Fatalf("no Corp SSO button: %s", page)
	}

	email := name("alice") + "@acme.test"
	alice := testidp.User{Subject: name("alice"), Email: email, Verified: true, Groups: []string{"queue-readers", "queue-admins"}}
	f := e.oidcStart(host, "corp", "/console/")
	auth, _ := url.Parse(f.authorize)
	q := auth.Query()
	if !strings.HasPrefix(f.authorize, idp.URL+"/authorize?") || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" || q.Get("scope") != "openid email profile" {
		t.Fatalf("authorize URL %s", f.authorize)
	}
	back := idp.SignIn(f.authorize, alice, nil)
	r := e.oidcFinish(back, f.cookie).want(303, "")
	if r.Header().Get("Location") != "/console/" {
		t.Fatalf("redirect %q", r.Header().Get("Location"))
	}
	claims, err := e.keys.Verify(sessionCookie(t, r).Value)
	if err != nil {
		t.Fatal(err)
	}
	uid := claims.UserID
	sub := alice.Subject
	if got := e.scalar(`SELECT count(*)::text FROM queen_proxy.users u JOIN queen_proxy.identities i ON i.user_id = u.id
		WHERE u.id = $1::uuid AND u.email = $2 AND u.tenant_id = $3::uuid AND i.provider = 'oidc:corp' AND i.provider_id = $4`,
		uid, email, tenantID, sub); got != "1" {
		t.Fatalf("provisioned user with its oidc:corp identity: %s rows", got)
	}
	if e.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'signup' AND actor_id = $1::uuid
		AND meta->>'provider' = 'oidc:corp'`, uid) != "1" {
		t.Fatal("signup not audited")
	}
	// Roles: the groups' on the clusters their lines name (admin beats
	// viewer on c2), the autoprovisioned consumer replaced on c1.
	roleOn := func(cl string) string {
		return e.scalar(`SELECT coalesce((SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid), '')`, uid, cl)
	}
	if roleOn(c1) != "viewer" || roleOn(c2) != "admin" {
		t.Fatalf("roles %q on c1, %q on c2; want viewer, admin", roleOn(c1), roleOn(c2))
	}
	// The session works.
	e.get(host, "/api/console/overview", sessionCookie(t, r).Value).want(200, "")
	hits := idp.JWKSHits.Load()
	if hits != 1 {
		t.Fatalf("key set fetched %d times, want 1", hits)
	}

	// Groups changed at the provider: the next sign-in sets the roles
	// from them (c2 drops to the '*' line's viewer; without any group,
	// the user has no role on either).
	signInAt := func(provider string, u testidp.User, tamper func(url.Values)) resp {
		t.Helper()
		f := e.oidcStart(host, provider, "/console/")
		return e.oidcFinish(idp.SignIn(f.authorize, u, tamper), f.cookie)
	}
	signIn := func(u testidp.User, tamper func(url.Values)) resp {
		t.Helper()
		return signInAt("corp", u, tamper)
	}
	// c2 needs another admin, or its last admin is kept.
	_, otherEmail := e.user(tenantID, "")
	e.grant(c2, otherEmail, "admin")
	alice.Groups = []string{"queue-readers"}
	signIn(alice, nil).want(303, "")
	if roleOn(c1) != "viewer" || roleOn(c2) != "viewer" {
		t.Fatalf("after the groups change: %q on c1, %q on c2; want viewer, viewer", roleOn(c1), roleOn(c2))
	}
	alice.Groups = nil
	signIn(alice, nil).want(303, "")
	if roleOn(c1) != "" || roleOn(c2) != "" {
		t.Fatalf("without groups: %q on c1, %q on c2; want none", roleOn(c1), roleOn(c2))
	}
	if e.countOps(c2, "cluster_role_revoked", "control_plane") < 1 {
		t.Fatal("role revocation not audited")
	}
	alice.Groups = []string{"queue-readers"}

	// The provider rotates its key, to another algorithm. The first
	// sign-in after it fetches the set again (once); right after a fetch,
	// an unknown key is refused without asking the provider again.
	e.advance(jwksRefetchGap + time.Second)
	idp.Rotate(testidp.NewECKey(t))
	signIn(alice, nil).want(303, "")
	if got := idp.JWKSHits.Load(); got != hits+1 {
		t.Fatalf("key set fetched %d times after the rotation, want %d", got, hits+1)
	}
	idp.Rotate(testidp.NewRSAKey(t))
	r = signIn(alice, nil).want(401, "unauthorized")
	noSession(t, "a key rotated within the refetch gap", r)
	if got := idp.JWKSHits.Load(); got != hits+1 {
		t.Fatalf("an unknown key within the gap fetched the set (%d fetches, want %d)", got, hits+1)
	}
	e.advance(jwksRefetchGap + time.Second)
	signIn(alice, nil).want(303, "")

	// Refusals: each with its clear error, no session, nothing created.
	users := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE tenant_id = $1::uuid`, tenantID)
	cases := []struct {
		name     string
		provider string
		user     testidp.User
		setup    func()
		tamper   func(url.Values)
		status   int
		code     string
		message  string
	}{
		{name: "wrong audience", provider: "alias", user: alice,
			status: 401, code: "unauthorized", message: "not for this gateway's client id"},
		{name: "wrong nonce", user: alice, tamper: func(q url.Values) { q.Set("nonce", "attacker-nonce") },
			status: 400, code: "invalid_state", message: "nonce"},
		{name: "expired token", user: alice, setup: func() { idp.SetIDTokenLifetime(-5 * time.Minute) },
			status: 401, code: "unauthorized", message: "expired"},
		{name: "disallowed domain", user: testidp.User{Subject: name("mallory"), Email: name("m") + "@evil.test", Verified: true},
			status: 403, code: "domain_not_allowed", message: "domain"},
		{name: "unverified e-mail", user: testidp.User{Subject: name("bob"), Email: name("bob") + "@acme.test"},
			status: 403, code: "email_unverified", message: "not verified"},
	}
	for _, c := range cases {
		if c.setup != nil {
			c.setup()
		}
		provider := c.provider
		if provider == "" {
			provider = "corp"
		}
		r := signInAt(provider, c.user, c.tamper)
		idp.SetIDTokenLifetime(time.Hour)
		if r.Code != c.status {
			t.Fatalf("%s: status %d, want %d: %s", c.name, r.Code, c.status, r.Body.String())
		}
		r.want(c.status, c.code)
		if msg, _ := r.json()["error"].(string); !strings.Contains(msg, c.message) {
			t.Fatalf("%s: error %q does not say %q", c.name, msg, c.message)
		}
		noSession(t, c.name, r)
	}
	if got := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE tenant_id = $1::uuid`, tenantID); got != users {
		t.Fatalf("refused sign-ins created users: %s, was %s", got, users)
	}

	// A replayed code: the provider refuses the second exchange. The
	// replay comes with a fresh flow of the same browser (its own state
	// and cookie), as an attacker holding a stolen code would need.
	f = e.oidcStart(host, "corp", "/")
	back = idp.SignIn(f.authorize, alice, nil)
	e.oidcFinish(back, f.cookie).want(303, "")
	f2 := e.oidcStart(host, "corp", "/")
	auth2, _ := url.Parse(f2.authorize)
	replay := *back
	rq := replay.Query()
	rq.Set("state", auth2.Query().Get("state"))
	replay.RawQuery = rq.Encode()
	r = e.oidcFinish(&replay, f2.cookie).want(400, "invalid_request")
	if msg, _ := r.json()["error"].(string); !strings.Contains(msg, "already used") {
		t.Fatalf("replayed code: error %q", msg)
	}
	noSession(t, "replayed code", r)
	// The same callback again, as the browser's back button sends it: its
	// flow cookie is gone.
	e.oidcFinish(back, "").want(400, "invalid_state")

	// An unknown provider name is not configured; a POST is refused.
	e.do(req{method: "GET", host: host, path: "/auth/oidc/nope"}).want(404, "not_configured")
	e.do(req{method: "POST", host: host, path: "/auth/oidc/corp", header: map[string]string{"Origin": "http://" + host}}).want(405, "invalid_request")
}

// TestOIDCUnverifiedWithinDomains: a provider without
// require_verified_email accepts a token that does not say the address is
// verified only for an address in its allowed domains; and a provider
// whose discovery document names another issuer is not used.
func TestOIDCUnverifiedWithinDomains(t *testing.T) {
	idp := testidp.New(t)
	e := newEnv(t, func(o *Options) {
		o.OIDC = []OIDCProviderConfig{
			{Name: "entra", Issuer: idp.URL, ClientID: testidp.ClientID, ClientSecret: testidp.ClientSecret, AllowedDomains: []string{"acme.test"}},
			{Name: "slash", Issuer: idp.URL + "/", ClientID: testidp.ClientID, ClientSecret: testidp.ClientSecret, RequireVerifiedEmail: true},
		}
	})
	w := e.world()
	uid, email := e.user(w.tenantID, "")
	e.exec(`SELECT queen_proxy.set_user_origin($1::uuid, 'operator', NULL)`, uid)
	e.grant(w.clusterID, email, "viewer")
	idp.AllowRedirect("http://" + w.host + "/auth/oidc/entra/callback")

	f := e.oidcStart(w.host, "entra", "/")
	r := e.oidcFinish(idp.SignIn(f.authorize, testidp.User{Subject: name("u1"), Email: email}, nil), f.cookie).want(303, "")
	if claims, err := e.keys.Verify(sessionCookie(t, r).Value); err != nil || claims.UserID != uid {
		t.Fatalf("session %+v %v", claims, err)
	}
	if e.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'identity_linked' AND actor_id = $1::uuid
		AND meta->>'provider' = 'oidc:entra'`, uid) != "1" {
		t.Fatal("link not audited")
	}
	f = e.oidcStart(w.host, "entra", "/")
	r = e.oidcFinish(idp.SignIn(f.authorize, testidp.User{Subject: name("u2"), Email: name("x") + "@elsewhere.test"}, nil), f.cookie)
	r.want(403, "domain_not_allowed")
	noSession(t, "an unverified address outside the domains", r)

	// The issuer configured with a trailing slash is not the one the
	// provider's document names: the sign-in does not start.
	r = e.do(req{method: "GET", host: w.host, path: "/auth/oidc/slash"}).want(502, "bad_gateway")
	noSession(t, "a provider whose discovery names another issuer", r)
}

// TestOIDCDiscoveryFetchRate: a provider whose discovery document cannot
// be read is asked again at most every discoveryRetryGap, and a document
// once read is used for discoveryTTL, then read again, and kept while the
// provider cannot be read.
func TestOIDCDiscoveryFetchRate(t *testing.T) {
	idp := testidp.New(t)
	var hits atomic.Int64
	var down atomic.Bool
	down.Store(true)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/openid-configuration" {
			hits.Add(1)
			if down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			// The provider's own document, naming this front as issuer.
			resp, err := http.Get(idp.URL + r.URL.Path)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			_, _ = w.Write(bytes.ReplaceAll(body, []byte(`"issuer":"`+idp.URL+`"`), []byte(`"issuer":"http://`+r.Host+`"`)))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(front.Close)
	e := newEnv(t, func(o *Options) {
		o.OIDC = []OIDCProviderConfig{{Name: "corp", Issuer: front.URL, ClientID: testidp.ClientID, ClientSecret: testidp.ClientSecret,
			RequireVerifiedEmail: true}}
	})
	w := e.world()
	start := func() resp { return e.do(req{method: "GET", host: w.host, path: "/auth/oidc/corp"}) }
	start().want(502, "bad_gateway")
	start().want(502, "bad_gateway")
	if got := hits.Load(); got != 1 {
		t.Fatalf("discovery asked %d times within the retry gap, want 1", got)
	}
	down.Store(false)
	start().want(502, "bad_gateway")
	e.advance(discoveryRetryGap + time.Second)
	start().want(302, "")
	start().want(302, "")
	if got := hits.Load(); got != 2 {
		t.Fatalf("discovery asked %d times, want 2 (one failure, one success, then the cached document)", got)
	}
	// Past its TTL the document is read again; while that fails, the old
	// one is used.
	down.Store(true)
	e.advance(discoveryTTL + time.Second)
	start().want(302, "")
	if got := hits.Load(); got != 3 {
		t.Fatalf("discovery asked %d times after the TTL, want 3", got)
	}
	t.Logf("discovery: cached %v, asked again after a failure at most every %v", discoveryTTL, discoveryRetryGap)
}

// TestOIDCEmailRule: the e-mail rule of each kind of provider, on the
// claims a verified token can carry.
func TestOIDCEmailRule(t *testing.T) {
	google, err := newGoogle(&ProviderConfig{ClientID: "i", ClientSecret: "s", AllowedDomains: []string{"acme.test"}})
	if err != nil {
		t.Fatal(err)
	}
	strict, err := newOIDC(OIDCProviderConfig{Name: "strict", Issuer: "https://i.example", ClientID: "i", ClientSecret: "s", RequireVerifiedEmail: true})
	if err != nil {
		t.Fatal(err)
	}
	domains, err := newOIDC(OIDCProviderConfig{Name: "domains", Issuer: "https://i.example", ClientID: "i", ClientSecret: "s", AllowedDomains: []string{"Acme.Test"}})
	if err != nil {
		t.Fatal(err)
	}
	claims := func(email string, verified any, hd string) *idClaims {
		c := &idClaims{Email: email, EmailVerified: verified, HostedDomain: hd}
		c.Subject = "sub"
		return c
	}
	for _, c := range []struct {
		name   string
		p      *oauthProvider
		claims *idClaims
		code   string // "" accepted
	}{
		{"google verified", google, claims("A@Acme.test", true, ""), ""},
		{"google by hd", google, claims("a@other.test", true, "acme.test"), ""},
		{"google unverified", google, claims("a@acme.test", false, ""), "email_unverified"},
		{"google silent", google, claims("a@acme.test", nil, ""), "email_unverified"},
		{"google other domain", google, claims("a@other.test", true, ""), "domain_not_allowed"},
		{"strict verified", strict, claims("a@any.test", true, ""), ""},
		{"strict verified as a string", strict, claims("a@any.test", "true", ""), ""},
		{"strict silent", strict, claims("a@any.test", nil, ""), "email_unverified"},
		{"strict false as a string", strict, claims("a@any.test", "false", ""), "email_unverified"},
		{"domains silent inside", domains, claims("a@acme.test", nil, ""), ""},
		{"domains says false inside", domains, claims("a@acme.test", false, ""), "email_unverified"},
		{"domains silent outside", domains, claims("a@other.test", nil, ""), "domain_not_allowed"},
		{"domains ignores hd", domains, claims("a@other.test", true, "acme.test"), "domain_not_allowed"},
		{"no e-mail", strict, claims("", true, ""), "invalid_request"},
		{"not an address", strict, claims("a@", true, ""), "invalid_request"},
		{"two at signs", domains, claims("a@b@acme.test", true, ""), "invalid_request"},
	} {
		email, e := c.p.checkEmail(c.claims)
		switch {
		case c.code == "" && e != nil:
			t.Errorf("%s: refused: %v", c.name, e.Message)
		case c.code == "" && email != strings.ToLower(c.claims.Email):
			t.Errorf("%s: e-mail %q", c.name, email)
		case c.code != "" && (e == nil || string(e.Code) != c.code):
			t.Errorf("%s: %v, want %s", c.name, e, c.code)
		}
	}
}

// TestOIDCGroupsClaim: a groups claim is read as a list or a single
// string, by its exact name first, then as a dotted path.
func TestOIDCGroupsClaim(t *testing.T) {
	c := &idClaims{}
	if err := json.Unmarshal([]byte(`{"groups":["a","b"],"role":"admin","realm_access":{"roles":["x"]},
		"https://acme.example/groups":["ns"],"n":7,"mixed":["a",1]}`), &c.raw); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"groups": "a,b", "role": "admin", "realm_access.roles": "x", "https://acme.example/groups": "ns",
		"n": "", "mixed": "", "missing": "", "realm_access.missing": "", "groups.x": "",
	} {
		if got := strings.Join(c.stringsClaim(name), ","); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}
