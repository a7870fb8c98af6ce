package console

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// grant is what the fake provider's user consented to for one code.
type grant struct {
	challenge, redirect, nonce string
	sub, email, hd             string
	verified                   any // Google email_verified
	githubEmails               []map[string]any
}

// fakeProvider plays Google (OIDC with a JWKS) and GitHub (token, user,
// e-mails) for one client, checking state-independent parts itself: the
// client's credentials, the redirect URI and the PKCE verifier.
type fakeProvider struct {
	t        *testing.T
	srv      *httptest.Server
	key      *rsa.PrivateKey
	mu       sync.Mutex
	codes    map[string]grant
	tokens   map[string]grant
	requests []url.Values
	run      int64 // makes its subjects unique: see subject
	// secrets are the client secrets the provider accepts; nil means
	// testClientSecret alone. Providers hold two during a rotation.
	secrets map[string]bool
}

// acceptsSecret reports whether the provider takes secret as the client's.
func (p *fakeProvider) acceptsSecret(secret string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.secrets == nil {
		return secret == testClientSecret
	}
	return p.secrets[secret]
}

// subject is the user id the provider reports for a grant's sub, unique to
// this provider (digits stay digits: GitHub's ids are numbers), so that a
// test run again (-count=N) on the same database meets no identity linked
// by the run before.
func (p *fakeProvider) subject(sub string) string {
	if n, err := strconv.ParseInt(sub, 10, 64); err == nil {
		return strconv.FormatInt(p.run*1_000_000+n, 10)
	}
	return fmt.Sprintf("%s-run%d", sub, p.run)
}

const (
	testClientID     = "client-123"
	testClientSecret = "secret-456"
)

var testRSAKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func newFakeProvider(t *testing.T) *fakeProvider {
	p := &fakeProvider{t: t, key: testRSAKey(), codes: map[string]grant{}, tokens: map[string]grant{}, run: uniq.Add(1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /user", p.user)
	mux.HandleFunc("GET /user/emails", p.emails)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProvider) config() *ProviderConfig {
	return &ProviderConfig{
		ClientID: testClientID, ClientSecret: testClientSecret,
		AuthURL: p.srv.URL + "/authorize", TokenURL: p.srv.URL + "/token",
		JWKSURL: p.srv.URL + "/jwks", UserInfoURL: p.srv.URL + "/user", EmailsURL: p.srv.URL + "/user/emails",
	}
}

func (p *fakeProvider) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f := r.PostForm
	p.mu.Lock()
	p.requests = append(p.requests, f)
	g, ok := p.codes[f.Get("code")]
	delete(p.codes, f.Get("code"))
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case !ok:
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	case f.Get("grant_type") != "authorization_code" || f.Get("client_id") != testClientID || !p.acceptsSecret(f.Get("client_secret")):
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	case f.Get("redirect_uri") != g.redirect:
		http.Error(w, `{"error":"invalid_grant","error_description":"redirect_uri"}`, http.StatusBadRequest)
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		http.Error(w, `{"error":"invalid_grant","error_description":"PKCE verification failed"}`, http.StatusBadRequest)
		return
	}
	access := "at-" + f.Get("code")
	p.mu.Lock()
	p.tokens[access] = g
	p.mu.Unlock()
	out := map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": 3600}
	if g.sub != "" {
		claims := jwt.MapClaims{
			"iss": "https://accounts.google.com", "aud": testClientID, "sub": p.subject(g.sub), "email": g.email,
			"email_verified": g.verified, "nonce": g.nonce, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
		}
		if g.hd != "" {
			claims["hd"] = g.hd
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = "test-kid"
		signed, err := tok.SignedString(p.key)
		if err != nil {
			p.t.Error(err)
		}
		out["id_token"] = signed
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (p *fakeProvider) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := p.key.PublicKey
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "test-kid", "alg": "RS256", "use": "sig",
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

func (p *fakeProvider) grantOf(r *http.Request) (grant, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	return g, ok && r.Header.Get("User-Agent") != ""
}

func (p *fakeProvider) user(w http.ResponseWriter, r *http.Request) {
	g, ok := p.grantOf(r)
	if !ok {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	_, _ = w.Write([]byte(`{"id": ` + p.subject(g.sub) + `, "login": "octo"}`))
}

func (p *fakeProvider) emails(w http.ResponseWriter, r *http.Request) {
	g, ok := p.grantOf(r)
	if !ok {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	_ = json.NewEncoder(w).Encode(g.githubEmails)
}

// flow is one sign-in a browser started.
type flow struct {
	state, challenge, nonce, redirect string
	cookie                            string // the queen_oauth cookie, "name=value"
	authorize                         url.Values
}

// oauthStart follows GET /auth/<provider> as a browser.
func (e *env) oauthStart(host, provider, next string) flow {
	e.t.Helper()
	r := e.do(req{method: "GET", host: host, path: "/auth/" + provider + "?next=" + url.QueryEscape(next)}).want(302, "")
	loc, err := url.Parse(r.Header().Get("Location"))
	if err != nil {
		e.t.Fatal(err)
	}
	q := loc.Query()
	f := flow{state: q.Get("state"), challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri"), authorize: q}
	if q.Get("code_challenge_method") != "S256" || f.challenge == "" || f.state == "" || q.Get("client_id") != testClientID || q.Get("response_type") != "code" {
		e.t.Fatalf("authorize URL %s", loc)
	}
	for _, c := range (&http.Response{Header: r.Header()}).Cookies() {
		if c.Name == flowCookie {
			if !c.HttpOnly || c.MaxAge <= 0 {
				e.t.Fatalf("flow cookie %+v", c)
			}
			f.cookie = c.Name + "=" + c.Value
		}
	}
	if f.cookie == "" {
		e.t.Fatal("no flow cookie")
	}
	return f
}

// callback comes back from the provider with code (and the flow cookie,
// unless cookie is "-").
func (e *env) callback(host, provider, code, state, cookie string) resp {
	e.t.Helper()
	hdr := map[string]string{}
	if cookie != "-" {
		hdr["Cookie"] = cookie
	}
	return e.do(req{method: "GET", host: host, path: "/auth/" + provider + "/callback?code=" + url.QueryEscape(code) + "&state=" + url.QueryEscape(state), header: hdr})
}

func TestOAuthGoogle(t *testing.T) {
	p := newFakeProvider(t)
	e := newEnv(t, func(o *Options) { o.Google = p.config() })
	w := e.world()
	uid, email := e.user(w.tenantID, "")
	e.grant(w.clusterID, email, "viewer")

	// The login page offers Google.
	if page := e.do(req{method: "GET", host: w.host, path: "/auth/login?next=/console/"}).Body.String(); !strings.Contains(page, "/auth/google?next=%2Fconsole%2F") {
		t.Fatalf("no Google button: %s", page)
	}
	f := e.oauthStart(w.host, "google", "/console/")
	if f.redirect != "http://"+w.host+"/auth/google/callback" || f.nonce == "" || f.authorize.Get("scope") != "openid email profile" {
		t.Fatalf("authorize %v", f.authorize)
	}
	p.codes["c1"] = grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: strings.ToUpper(email), verified: true}
	r := e.callback(w.host, "google", "c1", f.state, f.cookie).want(303, "")
	if r.Header().Get("Location") != "/console/" {
		t.Fatalf("redirect %q", r.Header().Get("Location"))
	}
	c := sessionCookie(t, r)
	if claims, err := e.keys.Verify(c.Value); err != nil || claims.UserID != uid {
		t.Fatalf("session %+v %v", claims, err)
	}
	// The identity was linked, and audited.
	if e.scalar(`SELECT user_id::text FROM queen_proxy.identities WHERE provider = 'google' AND provider_id = $1`, p.subject("g-1")) != uid {
		t.Fatal("identity not linked")
	}
	if e.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'identity_linked' AND actor_id = $1::uuid`, uid) != "1" {
		t.Fatal("link not audited")
	}
	if got := p.requests[len(p.requests)-1]; got.Get("code_verifier") == "" {
		t.Fatalf("no PKCE verifier sent: %v", got)
	}
	// The same flow cannot be replayed: the code is gone, and so is the
	// flow cookie the browser had (the callback cleared it).
	e.callback(w.host, "google", "c1", f.state, "-").want(400, "invalid_state")
	// A later sign-in finds the user by the identity even if the e-mail
	// changed at Google.
	f = e.oauthStart(w.host, "google", "/")
	p.codes["c2"] = grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: "renamed@else.test", verified: "true"}
	if claims, _ := e.keys.Verify(sessionCookie(t, e.callback(w.host, "google", "c2", f.state, f.cookie).want(303, "")).Value); claims.UserID != uid {
		t.Fatal("the linked identity did not sign in as its user")
	}

	// Refusals.
	cases := []struct {
		name   string
		g      func(f flow) grant
		state  func(f flow) string
		cookie func(f flow) string
		status int
		code   string
	}{
		{"unknown user", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-new", email: "stranger@acme.test", verified: true}
		}, nil, nil, 403, "not_provisioned"},
		{"unverified e-mail", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-3", email: email, verified: false}
		}, nil, nil, 403, "email_unverified"},
		{"nonce mismatch", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: "other", sub: "g-1", email: email, verified: true}
		}, nil, nil, 400, "invalid_state"},
		{"forged state", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: email, verified: true}
		}, func(f flow) string { return f.state[:len(f.state)-2] + "xx" }, nil, 400, "invalid_state"},
		{"no flow cookie", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: email, verified: true}
		}, nil, func(flow) string { return "-" }, 400, "invalid_state"},
		{"another browser's flow cookie", func(f flow) grant {
			return grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: email, verified: true}
		}, nil, func(flow) string { return e.oauthStart(w.host, "google", "/").cookie }, 400, "invalid_state"},
		{"wrong PKCE verifier", func(f flow) grant {
			return grant{challenge: "not-the-challenge", redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: email, verified: true}
		}, nil, nil, 502, "bad_gateway"},
	}
	for i, c := range cases {
		f := e.oauthStart(w.host, "google", "/")
		code := "bad-" + string(rune('a'+i))
		p.codes[code] = c.g(f)
		state, cookie := f.state, f.cookie
		if c.state != nil {
			state = c.state(f)
		}
		if c.cookie != nil {
			cookie = c.cookie(f)
		}
		r := e.callback(w.host, "google", code, state, cookie)
		if r.Code != c.status {
			t.Fatalf("%s: status %d, want %d: %s", c.name, r.Code, c.status, r.Body.String())
		}
		r.want(c.status, c.code)
		if len((&http.Response{Header: r.Header()}).Cookies()) > 1 {
			t.Fatalf("%s: set a session cookie", c.name)
		}
	}
	// An expired state.
	f = e.oauthStart(w.host, "google", "/")
	e.advance(6 * time.Minute)
	p.codes["late"] = grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-1", email: email, verified: true}
	e.callback(w.host, "google", "late", f.state, f.cookie).want(400, "invalid_state")
	e.clock.Store(0)
	// The provider said no.
	e.do(req{method: "GET", host: w.host, path: "/auth/google/callback?error=access_denied&state=x"}).want(400, "invalid_request")
	// Browsers get a page, not JSON.
	r = e.do(req{method: "GET", host: w.host, path: "/auth/google/callback?error=access_denied", header: map[string]string{"Accept": "text/html"}})
	if r.Code != 400 || !strings.Contains(r.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("browser refusal: %d %s", r.Code, r.Header().Get("Content-Type"))
	}
	// GitHub is not configured here.
	e.do(req{method: "GET", host: w.host, path: "/auth/github"}).want(404, "not_configured")
}

func TestOAuthGoogleDomainsAndAutoprovision(t *testing.T) {
	p := newFakeProvider(t)
	var tenantSlug string
	e := newEnv(t)
	tenantID, slug := e.tenant()
	tenantSlug = slug
	c1, host := e.cluster(tenantID)
	c2, _ := e.cluster(tenantID)
	cfg := p.config()
	cfg.AllowedDomains = []string{"acme.test"}
	e = newEnv(t, func(o *Options) {
		o.Google = cfg
		o.Autoprovision = &AutoprovisionConfig{Tenant: tenantSlug, Role: "producer"}
		o.PublicURL = "https://login." + baseDomain + "/"
	})
	f := e.oauthStart(host, "google", "/console/")
	if f.redirect != "https://login."+baseDomain+"/auth/google/callback" || f.authorize.Get("hd") != "acme.test" {
		t.Fatalf("authorize %v", f.authorize)
	}
	p.codes["other-domain"] = grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-9", email: "x@gmail.test", verified: true}
	e.callback(host, "google", "other-domain", f.state, f.cookie).want(403, "domain_not_allowed")

	newEmail := name("auto") + "@acme.test"
	f = e.oauthStart(host, "google", "/console/")
	p.codes["new"] = grant{challenge: f.challenge, redirect: f.redirect, nonce: f.nonce, sub: "g-10", email: newEmail, verified: true, hd: "acme.test"}
	r := e.callback(host, "google", "new", f.state, f.cookie).want(303, "")
	claims, err := e.keys.Verify(sessionCookie(t, r).Value)
	if err != nil {
		t.Fatal(err)
	}
	var tenant string
	var hash *string
	if err := e.pool.QueryRow(e.ctx(), `SELECT tenant_id::text, password_hash FROM queen_proxy.users WHERE id = $1::uuid AND email = $2`,
		claims.UserID, newEmail).Scan(&tenant, &hash); err != nil || tenant != tenantID || hash != nil {
		t.Fatalf("provisioned user: %s %v %v", tenant, hash, err)
	}
	for _, cl := range []string{c1, c2} {
		if role := e.scalar(`SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid`, claims.UserID, cl); role != "producer" {
			t.Fatalf("role on %s = %s", cl, role)
		}
	}
	if e.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'signup' AND actor_id = $1::uuid`, claims.UserID) != "1" {
		t.Fatal("signup not audited")
	}
	if e.scalar(`SELECT count(*)::text FROM queen_proxy.identities WHERE user_id = $1::uuid AND provider = 'google' AND provider_id = $2`, claims.UserID, p.subject("g-10")) != "1" {
		t.Fatal("identity not recorded")
	}
	e.get(host, "/api/console/overview", sessionCookie(t, r).Value).want(200, "")
}

func TestOAuthGitHub(t *testing.T) {
	p := newFakeProvider(t)
	e := newEnv(t, func(o *Options) { o.GitHub = p.config() })
	w := e.world()
	uid, email := e.user(w.tenantID, "")
	e.grant(w.clusterID, email, "admin")
	f := e.oauthStart(w.host, "github", "/console/keys")
	if f.authorize.Get("scope") != "user:email" || f.nonce != "" {
		t.Fatalf("authorize %v", f.authorize)
	}
	p.codes["gh1"] = grant{challenge: f.challenge, redirect: f.redirect, sub: "4242", githubEmails: []map[string]any{
		{"email": "old@elsewhere.test", "primary": false, "verified": true},
		{"email": email, "primary": true, "verified": true},
	}}
	r := e.callback(w.host, "github", "gh1", f.state, f.cookie).want(303, "")
	if r.Header().Get("Location") != "/console/keys" {
		t.Fatalf("redirect %q", r.Header().Get("Location"))
	}
	if claims, err := e.keys.Verify(sessionCookie(t, r).Value); err != nil || claims.UserID != uid {
		t.Fatalf("session %+v %v", claims, err)
	}
	if e.scalar(`SELECT user_id::text FROM queen_proxy.identities WHERE provider = 'github' AND provider_id = $1`, p.subject("4242")) != uid {
		t.Fatal("identity not linked")
	}
	f = e.oauthStart(w.host, "github", "/")
	p.codes["gh2"] = grant{challenge: f.challenge, redirect: f.redirect, sub: "5151", githubEmails: []map[string]any{
		{"email": email, "primary": true, "verified": false},
	}}
	e.callback(w.host, "github", "gh2", f.state, f.cookie).want(403, "email_unverified")
	// A Google flow cookie does not finish a GitHub sign-in.
	e2 := newEnv(t, func(o *Options) { o.GitHub = p.config(); o.Google = p.config() })
	g := e2.oauthStart(w.host, "google", "/")
	gh := e2.oauthStart(w.host, "github", "/")
	p.codes["gh3"] = grant{challenge: gh.challenge, redirect: gh.redirect, sub: "4242", githubEmails: []map[string]any{{"email": email, "primary": true, "verified": true}}}
	e2.callback(w.host, "github", "gh3", gh.state, g.cookie).want(400, "invalid_state")
}

// TestOAuthDoesNotLinkToASquattedAccount: an account a cluster admin made
// in the console for an address, never signed in to, does not capture the
// address's owner when they sign in with GitHub (verified e-mail), even
// with autoprovision on; an account an operator or the control plane made,
// or one signed in to before, is linked.
func TestOAuthDoesNotLinkToASquattedAccount(t *testing.T) {
	p := newFakeProvider(t)
	e := newEnv(t, func(o *Options) {
		o.GitHub = p.config()
		o.Autoprovision = &AutoprovisionConfig{Tenant: "nonexistent-tenant", Role: "viewer"}
	})
	w := e.world()
	signIn := func(code, sub, email string) resp {
		f := e.oauthStart(w.host, "github", "/console/")
		p.codes[code] = grant{challenge: f.challenge, redirect: f.redirect, sub: sub, githubEmails: []map[string]any{
			{"email": email, "primary": true, "verified": true},
		}}
		return e.callback(w.host, "github", code, f.state, f.cookie)
	}
	linked := func(sub string) string {
		return e.scalar(`SELECT coalesce((SELECT user_id::text FROM queen_proxy.identities WHERE provider = 'github' AND provider_id = $1), '')`, p.subject(sub))
	}

	squatted, squattedEmail := e.user(w.tenantID, "")
	e.exec(`SELECT queen_proxy.set_user_origin($1::uuid, 'console', $2::uuid)`, squatted, w.users["admin"])
	e.grant(w.clusterID, squattedEmail, "viewer")
	signIn("s1", "7001", squattedEmail).want(403, "account_unclaimed")
	if got := linked("7001"); got != "" {
		t.Fatalf("the owner's GitHub identity was linked to the squatted account %s", got)
	}
	if got := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, squattedEmail); got != "1" {
		t.Fatalf("%s accounts for the address, want the one", got)
	}

	for i, origin := range []string{"operator", "control_plane"} {
		uid, email := e.user(w.tenantID, "")
		e.exec(`SELECT queen_proxy.set_user_origin($1::uuid, $2, NULL)`, uid, origin)
		sub := fmt.Sprint(7100 + i)
		signIn("o-"+origin, sub, email).want(303, "")
		if got := linked(sub); got != uid {
			t.Fatalf("an account from %s: linked to %q, want %s", origin, got, uid)
		}
	}
	// Signed in to before (its owner was given a password), a console
	// account is its owner's.
	e.exec(`SELECT queen_proxy.record_user_login($1::uuid)`, squatted)
	signIn("s2", "7001", squattedEmail).want(303, "")
	if got := linked("7001"); got != squatted {
		t.Fatalf("a console account signed in to before: linked to %q, want %s", got, squatted)
	}
}
