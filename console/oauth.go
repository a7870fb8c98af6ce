package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/queengate/queengate/internal/apierror"
)

// ProviderConfig configures one OAuth provider. Empty endpoint URLs take
// the provider's real ones.
type ProviderConfig struct {
	ClientID     string
	ClientSecret string
	// AuthURL and TokenURL are the authorization and token endpoints.
	AuthURL  string
	TokenURL string
	// UserInfoURL (GitHub: the user; Google: unused) and EmailsURL
	// (GitHub: the user's e-mails).
	UserInfoURL string
	EmailsURL   string
	// JWKSURL is where Google's id_token signing keys are (Google only).
	JWKSURL string
	// AllowedDomains, when not empty, are the only Google Workspace
	// domains (hd claim) or e-mail domains accepted (Google only).
	AllowedDomains []string
}

// AutoprovisionConfig makes unknown OAuth users members of a tenant.
type AutoprovisionConfig struct {
	// Tenant is the slug of the tenant new users join.
	Tenant string
	// Role is granted on every cluster of the tenant (default viewer).
	Role string
}

// The providers' real endpoints.
const (
	GoogleAuthURL  = "https://accounts.google.com/o/oauth2/v2/auth"
	GoogleTokenURL = "https://oauth2.googleapis.com/token"
	GoogleJWKSURL  = "https://www.googleapis.com/oauth2/v3/certs"
	GitHubAuthURL  = "https://github.com/login/oauth/authorize"
	GitHubTokenURL = "https://github.com/login/oauth/access_token"
	GitHubUserURL  = "https://api.github.com/user"
	GitHubEmailURL = "https://api.github.com/user/emails"
)

// stateTTL is how long an OAuth round trip may take.
const stateTTL = 5 * time.Minute

// flowCookie binds an OAuth round trip to the browser that started it; it
// holds the state's nonce and the PKCE verifier.
const flowCookie = "queen_oauth"

// oauthProvider is one way to sign in through a provider: Google, GitHub
// or a generic OpenID Connect provider.
type oauthProvider struct {
	kind    string // "google", "github" or "oidc"
	name    string // identities.provider: "google", "github" or "oidc:<name>"
	path    string // its routes, under /auth/: "google", "github" or "oidc/<name>"
	label   string // the sign-in button's text
	cfg     ProviderConfig
	domains map[string]bool
	jwks    *jwksCache    // Google only (a generic provider's comes from discovery)
	oidc    *oidcSettings // generic only
}

func newGoogle(c *ProviderConfig) (*oauthProvider, error) {
	if c == nil || c.ClientID == "" || c.ClientSecret == "" {
		return nil, nil
	}
	domains, err := domainSet(c.AllowedDomains, "console: google")
	if err != nil {
		return nil, err
	}
	p := &oauthProvider{kind: "google", name: "google", path: "google", label: "Google", cfg: *c, domains: domains}
	def(&p.cfg.AuthURL, GoogleAuthURL)
	def(&p.cfg.TokenURL, GoogleTokenURL)
	def(&p.cfg.JWKSURL, GoogleJWKSURL)
	p.jwks = &jwksCache{url: p.cfg.JWKSURL}
	return p, checkURLs(p)
}

func newGitHub(c *ProviderConfig) (*oauthProvider, error) {
	if c == nil || c.ClientID == "" || c.ClientSecret == "" {
		return nil, nil
	}
	p := &oauthProvider{kind: "github", name: "github", path: "github", label: "GitHub", cfg: *c}
	def(&p.cfg.AuthURL, GitHubAuthURL)
	def(&p.cfg.TokenURL, GitHubTokenURL)
	def(&p.cfg.UserInfoURL, GitHubUserURL)
	def(&p.cfg.EmailsURL, GitHubEmailURL)
	return p, checkURLs(p)
}

func def(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func checkURLs(p *oauthProvider) error {
	for _, u := range []string{p.cfg.AuthURL, p.cfg.TokenURL, p.cfg.UserInfoURL, p.cfg.EmailsURL, p.cfg.JWKSURL} {
		if u == "" {
			continue
		}
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "https" && parsed.Scheme != "http") || parsed.Host == "" {
			return fmt.Errorf("console: %s endpoint %q is not an http(s) URL", p.name, u)
		}
	}
	return nil
}

func (p *oauthProvider) config(redirect string, ep endpoints) *oauth2.Config {
	scopes := []string{"openid", "email", "profile"}
	switch {
	case p.kind == "github":
		scopes = []string{"user:email"}
		ep = endpoints{authURL: p.cfg.AuthURL, tokenURL: p.cfg.TokenURL, authStyle: oauth2.AuthStyleInParams}
	case p.oidc != nil:
		scopes = p.oidc.scopes
	}
	return &oauth2.Config{
		ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, RedirectURL: redirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: ep.authURL, TokenURL: ep.tokenURL, AuthStyle: ep.authStyle},
	}
}

// providerEndpoints resolves p's endpoints for one request; a failure is
// the 502 the sign-in answers.
func (s *Surface) providerEndpoints(ctx context.Context, p *oauthProvider) (endpoints, *apierror.Error) {
	if p.kind == "github" {
		return endpoints{}, nil
	}
	ep, err := p.resolve(ctx, s.o.ProviderClient, s.o.Now())
	if err != nil {
		s.o.Log.Warn("provider discovery failed", zap.String("provider", p.name), zap.Error(err))
		return ep, apiErr(http.StatusBadGateway, apierror.BadGateway, "the provider's discovery document could not be read")
	}
	return ep, nil
}

// redirectURL is the provider's callback on this gateway: under the
// public URL when one is configured, else on the request's own origin.
func (s *Surface) redirectURL(r *http.Request, provider string) string {
	base := s.o.PublicURL
	if base == "" {
		base = s.requestOrigin(r)
	}
	return base + "/auth/" + provider + "/callback"
}

// oauthState is what the signed state carries.
type oauthState struct {
	Nonce   string `json:"n"`
	Next    string `json:"x"`
	Expires int64  `json:"e"`
}

func (s *Surface) signState(st oauthState) string {
	body, _ := json.Marshal(st)
	enc := base64.RawURLEncoding.EncodeToString(body)
	mac := hmac.New(sha256.New, s.o.StateKey)
	mac.Write([]byte(enc))
	return enc + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (s *Surface) verifyState(raw string) (oauthState, bool) {
	var st oauthState
	enc, sig, ok := strings.Cut(raw, ".")
	if !ok || len(raw) > 4096 {
		return st, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return st, false
	}
	mac := hmac.New(sha256.New, s.o.StateKey)
	mac.Write([]byte(enc))
	if !hmac.Equal(got, mac.Sum(nil)) {
		return st, false
	}
	body, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || json.Unmarshal(body, &st) != nil {
		return st, false
	}
	if st.Nonce == "" || s.o.Now().Unix() > st.Expires {
		return st, false
	}
	st.Next = SafeNext(st.Next)
	return st, true
}

// oauthStart sends the browser to the provider with a signed state and a
// PKCE challenge; the flow cookie keeps the verifier.
func (s *Surface) oauthStart(w http.ResponseWriter, r *http.Request, p *oauthProvider) {
	if !s.canMint() {
		writeFailure(w, r, errNotConfigured)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	ep, e := s.providerEndpoints(ctx, p)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	var nb [24]byte
	if _, err := rand.Read(nb[:]); err != nil {
		writeFailure(w, r, errInternal)
		return
	}
	nonce := hex.EncodeToString(nb[:])
	verifier := oauth2.GenerateVerifier()
	state := s.signState(oauthState{Nonce: nonce, Next: SafeNext(r.URL.Query().Get("next")),
		Expires: s.o.Now().Add(stateTTL).Unix()})
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if p.kind != "github" {
		opts = append(opts, oauth2.SetAuthURLParam("nonce", nonce))
	}
	if p.kind == "google" {
		opts = append(opts, oauth2.AccessTypeOnline,
			oauth2.SetAuthURLParam("include_granted_scopes", "true"),
			oauth2.SetAuthURLParam("prompt", "select_account"))
		if len(p.domains) == 1 {
			for d := range p.domains {
				opts = append(opts, oauth2.SetAuthURLParam("hd", d))
			}
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: flowCookie, Value: p.name + "." + nonce + "." + verifier, Path: "/auth/",
		MaxAge: int(stateTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.o.IsHTTPS(r),
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, p.config(s.redirectURL(r, p.path), ep).AuthCodeURL(state, opts...), http.StatusFound)
}

func notConfigured(msg string) *apierror.Error {
	return apiErr(http.StatusNotFound, apierror.NotConfigured, msg)
}

func stateRefusal(msg string) *apierror.Error {
	return apiErr(http.StatusBadRequest, apierror.InvalidState, msg)
}

// oauthCallback finishes the round trip: state and flow cookie, the code
// exchange (with the PKCE verifier), the provider's identity, then the
// account and the session.
func (s *Surface) oauthCallback(w http.ResponseWriter, r *http.Request, p *oauthProvider) {
	if !s.canMint() {
		writeFailure(w, r, errNotConfigured)
		return
	}
	q := r.URL.Query()
	// The flow cookie is single use, whatever happens next.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: "/auth/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.o.IsHTTPS(r)})
	if q.Get("error") != "" {
		writeFailure(w, r, invalid("the provider refused the sign-in"))
		return
	}
	st, ok := s.verifyState(q.Get("state"))
	if !ok {
		writeFailure(w, r, stateRefusal("missing, invalid or expired state"))
		return
	}
	verifier, ok := s.flowVerifier(r, p.name, st.Nonce)
	if !ok {
		writeFailure(w, r, stateRefusal("this sign-in was not started in this browser, or was already used"))
		return
	}
	code := q.Get("code")
	if code == "" {
		writeFailure(w, r, invalid("the provider sent no code"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	ep, e := s.providerEndpoints(ctx, p)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, s.o.ProviderClient)
	tok, err := p.config(s.redirectURL(r, p.path), ep).Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		s.o.Log.Warn("oauth code exchange failed", zap.String("provider", p.name), zap.Error(err))
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			// The provider refused the code itself, not our client: used
			// already, expired, or not issued to this sign-in's verifier.
			writeFailure(w, r, invalid("the provider refused the authorization code: it was already used, has expired, or belongs to another sign-in"))
			return
		}
		writeFailure(w, r, apiErr(http.StatusBadGateway, apierror.BadGateway, "the provider's token endpoint failed"))
		return
	}
	var id providerIdentity
	if p.kind == "github" {
		id, e = s.githubIdentity(ctx, p, tok)
	} else {
		id, e = s.idTokenIdentity(ctx, p, ep, tok, st.Nonce)
	}
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	invitation := s.takeInvitationCookie(w, r)
	userID, e := s.resolveAccount(r.Context(), p.name, id, invitation)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	if p.oidc != nil && p.oidc.groupsClaim != "" {
		mctx, mcancel := context.WithTimeout(r.Context(), 10*time.Second)
		err := s.applyRoleMapping(mctx, p, userID, id.Groups)
		mcancel()
		if err != nil {
			s.o.Log.Error("sign-in refused: roles from the provider's groups not applied", zap.String("provider", p.name),
				zap.String("user_id", userID), zap.Error(err))
			writeFailure(w, r, errDatabase)
			return
		}
	}
	s.startSession(w, r, userID, st.Next)
}

// flowVerifier returns the PKCE verifier of the flow this browser started
// for the state's nonce.
func (s *Surface) flowVerifier(r *http.Request, provider, nonce string) (string, bool) {
	c, err := r.Cookie(flowCookie)
	if err != nil {
		return "", false
	}
	parts := strings.SplitN(c.Value, ".", 3)
	if len(parts) != 3 || parts[0] != provider || !hmac.Equal([]byte(parts[1]), []byte(nonce)) || parts[2] == "" {
		return "", false
	}
	return parts[2], true
}

// providerIdentity is who the provider says signed in.
type providerIdentity struct {
	ProviderID string
	Email      string   // verified, lower-cased
	Groups     []string // the generic provider's groups claim, when configured
}

// idTokenIdentity verifies the id_token of a token response (Google, or a
// generic OpenID Connect provider): signature, issuer, audience, expiry,
// the nonce this sign-in sent, then the provider's e-mail rule.
func (s *Surface) idTokenIdentity(ctx context.Context, p *oauthProvider, ep endpoints, tok *oauth2.Token, nonce string) (providerIdentity, *apierror.Error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return providerIdentity{}, apiErr(http.StatusBadGateway, apierror.BadGateway, "the provider sent no id_token")
	}
	claims, err := ep.jwks.verifyIDToken(ctx, s.o.ProviderClient, raw, ep.rules, s.o.Now())
	if err != nil {
		s.o.Log.Warn("id_token refused", zap.String("provider", p.name), zap.Error(err))
		msg := "the provider's identity token did not verify"
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			msg = "the provider's identity token has expired"
		case errors.Is(err, jwt.ErrTokenInvalidAudience):
			msg = "the provider's identity token is not for this gateway's client id"
		}
		return providerIdentity{}, apiErr(http.StatusUnauthorized, apierror.Unauthorized, msg)
	}
	if !hmac.Equal([]byte(claims.Nonce), []byte(nonce)) {
		return providerIdentity{}, stateRefusal("nonce mismatch")
	}
	email, e := p.checkEmail(claims)
	if e != nil {
		return providerIdentity{}, e
	}
	id := providerIdentity{ProviderID: claims.Subject, Email: email}
	if p.oidc != nil && p.oidc.groupsClaim != "" {
		id.Groups = claims.stringsClaim(p.oidc.groupsClaim)
	}
	return id, nil
}

// githubIdentity reads the user and its primary verified e-mail.
func (s *Surface) githubIdentity(ctx context.Context, p *oauthProvider, tok *oauth2.Token) (providerIdentity, *apierror.Error) {
	var user struct {
		ID json.Number `json:"id"`
	}
	if err := s.githubGet(ctx, p.cfg.UserInfoURL, tok.AccessToken, &user); err != nil {
		s.o.Log.Warn("github user lookup failed", zap.Error(err))
		return providerIdentity{}, apiErr(http.StatusBadGateway, apierror.BadGateway, "the provider's user endpoint failed")
	}
	var emails []struct {
		Email    string `json:"email"`
		Primary  bool   `json:"primary"`
		Verified bool   `json:"verified"`
	}
	if err := s.githubGet(ctx, p.cfg.EmailsURL, tok.AccessToken, &emails); err != nil {
		s.o.Log.Warn("github e-mail lookup failed", zap.Error(err))
		return providerIdentity{}, apiErr(http.StatusBadGateway, apierror.BadGateway, "the provider's user endpoint failed")
	}
	id := user.ID.String()
	if id == "" || id == "0" {
		return providerIdentity{}, invalid("the provider sent no user id")
	}
	for _, e := range emails {
		if e.Primary && e.Verified && strings.Contains(e.Email, "@") {
			return providerIdentity{ProviderID: id, Email: strings.ToLower(strings.TrimSpace(e.Email))}, nil
		}
	}
	return providerIdentity{}, apiErr(http.StatusForbidden, apierror.EmailUnverified, "no primary verified e-mail address")
}

func (s *Surface) githubGet(ctx context.Context, u, token string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("User-Agent", "queengate")
	resp, err := s.o.ProviderClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		return errors.New(u + ": undecodable answer")
	}
	return nil
}
