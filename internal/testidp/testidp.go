// Package testidp is a real OpenID provider for tests: zitadel/oidc's op
// package (discovery, the authorization endpoint with PKCE, the token
// endpoint with client_secret_basic, the key set) on an in-memory storage.
// The test decides only who signs in (the provider's login step signs in
// the user it is given), the signing keys, the id_token lifetime, and
// other ids the client is known by.
//
// This package is for _test.go files only.
package testidp

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Provider is one running provider with one registered confidential
// client (ClientID, ClientSecret).
type Provider struct {
	// URL is the issuer (http://127.0.0.1:<port>, no trailing slash).
	URL string
	// JWKSHits counts the requests for the key set.
	JWKSHits atomic.Int64
	t        testing.TB
	srv      *httptest.Server
	st       *opStorage
}

// The client the provider knows.
const (
	ClientID     = "queengate-console"
	ClientSecret = "op-secret-1234"
)

// New starts a provider, stopped when the test ends. It signs with an
// RSA key (RS256) and offers RS256 and ES256.
func New(t testing.TB) *Provider {
	t.Helper()
	o := &Provider{t: t}
	var handler http.Handler
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			o.JWKSHits.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(o.srv.Close)
	o.URL = o.srv.URL
	o.st = &opStorage{
		issuer: o.srv.URL, requests: map[string]*opAuthRequest{}, codes: map[string]string{},
		idLifetime: time.Hour, aliases: map[string]string{},
	}
	o.Rotate(NewRSAKey(t))
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: cryptoKey, CodeMethodS256: true,
	}, o.st, op.StaticIssuer(o.srv.URL), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", o.login)
	mux.Handle("/", provider)
	handler = mux
	return o
}

// login is the provider's sign-in step: the user the test queued
// "authenticates" and the browser goes back to the library's callback,
// which answers the client's redirect URI with a code.
func (o *Provider) login(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	o.st.mu.Lock()
	req, ok := o.st.requests[id]
	if ok {
		req.user, req.done, req.authTime = o.st.next, true, time.Now()
	}
	o.st.mu.Unlock()
	if !ok {
		http.Error(w, "unknown auth request", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, o.srv.URL+"/authorize/callback?id="+url.QueryEscape(id), http.StatusFound)
}

// Next makes u the user the provider's login step signs in from now on
// (a browser walking the flow itself needs nothing else).
func (o *Provider) Next(u User) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	o.st.next = u
}

// AllowRedirect registers a redirect URI of the client.
func (o *Provider) AllowRedirect(uri string) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	o.st.redirects = append(o.st.redirects, uri)
}

// Alias makes the provider know the client also as id: requests may name
// it so, and tokens are still issued to ClientID.
func (o *Provider) Alias(id string) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	o.st.aliases[id] = ClientID
}

// SetIDTokenLifetime sets the life of the id_tokens issued from now on
// (negative: born expired).
func (o *Provider) SetIDTokenLifetime(d time.Duration) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	o.st.idLifetime = d
}

// Rotate makes k the signing key and the only published one.
func (o *Provider) Rotate(k *Key) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	o.st.keys = []*Key{k}
}

// SignIn walks a browser's way from authorize (the authorization URL a
// client sent it to, changed by tamper when not nil) through the
// provider, u signing in, until the provider sends it elsewhere: it
// returns that URL (the client's redirect URI with code and state).
func (o *Provider) SignIn(authorize string, u User, tamper func(url.Values)) *url.URL {
	o.t.Helper()
	o.Next(u)
	loc, err := url.Parse(authorize)
	if err != nil {
		o.t.Fatal(err)
	}
	if tamper != nil {
		q := loc.Query()
		tamper(q)
		loc.RawQuery = q.Encode()
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for range 10 {
		if !strings.HasPrefix(loc.String(), o.srv.URL+"/") {
			return loc
		}
		resp, err := client.Get(loc.String())
		if err != nil {
			o.t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
			o.t.Fatalf("provider answered %s with %d", loc, resp.StatusCode)
		}
		if loc, err = loc.Parse(resp.Header.Get("Location")); err != nil {
			o.t.Fatal(err)
		}
	}
	o.t.Fatal("the provider redirected too often")
	return nil
}

// User is who signs in at the provider: the id_token's sub, email,
// email_verified (left out when false) and groups (left out when nil).
type User struct {
	Subject, Email string
	Verified       bool
	Groups         []string
}

// Key is one signing key of the provider.
type Key struct {
	id   string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// keyParts are what both views of a key share.
type keyParts struct{ k *Key }

func (p keyParts) SignatureAlgorithm() jose.SignatureAlgorithm { return p.k.alg }
func (p keyParts) Algorithm() jose.SignatureAlgorithm          { return p.k.alg }
func (p keyParts) ID() string                                  { return p.k.id }
func (p keyParts) Use() string                                 { return "sig" }

// opPublicKey is a Key as the key set publishes it.
type opPublicKey struct{ keyParts }

func (p opPublicKey) Key() any { return p.k.priv.Public() }

// opSigningKey is a Key as the signer uses it.
type opSigningKey struct{ keyParts }

func (p opSigningKey) Key() any { return p.k.priv }

var keySeq atomic.Int64

// NewRSAKey is a fresh RS256 key.
func NewRSAKey(t testing.TB) *Key {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{id: fmt.Sprintf("rsa-%d", keySeq.Add(1)), alg: jose.RS256, priv: k}
}

// NewECKey is a fresh ES256 key.
func NewECKey(t testing.TB) *Key {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{id: fmt.Sprintf("ec-%d", keySeq.Add(1)), alg: jose.ES256, priv: k}
}

// opAuthRequest is one authorization request the provider holds.
type opAuthRequest struct {
	id       string
	req      *oidc.AuthRequest
	user     User
	done     bool
	authTime time.Time
}

func (a *opAuthRequest) GetID() string          { return a.id }
func (a *opAuthRequest) GetACR() string         { return "" }
func (a *opAuthRequest) GetAMR() []string       { return []string{"pwd"} }
func (a *opAuthRequest) GetAuthTime() time.Time { return a.authTime }
func (a *opAuthRequest) GetClientID() string    { return a.req.ClientID }
func (a *opAuthRequest) GetAudience() []string  { return []string{a.req.ClientID} }
func (a *opAuthRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.req.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.req.CodeChallenge, Method: a.req.CodeChallengeMethod}
}
func (a *opAuthRequest) GetNonce() string                   { return a.req.Nonce }
func (a *opAuthRequest) GetRedirectURI() string             { return a.req.RedirectURI }
func (a *opAuthRequest) GetResponseType() oidc.ResponseType { return a.req.ResponseType }
func (a *opAuthRequest) GetResponseMode() oidc.ResponseMode { return a.req.ResponseMode }
func (a *opAuthRequest) GetScopes() []string                { return a.req.Scopes }
func (a *opAuthRequest) GetState() string                   { return a.req.State }
func (a *opAuthRequest) GetSubject() string                 { return a.user.Subject }
func (a *opAuthRequest) Done() bool                         { return a.done }

// opClient is the gateway, registered as a confidential web client.
type opClient struct{ st *opStorage }

func (c opClient) GetID() string                       { return ClientID }
func (c opClient) RedirectURIs() []string              { return c.st.redirectURIs() }
func (c opClient) PostLogoutRedirectURIs() []string    { return nil }
func (c opClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c opClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c opClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c opClient) GrantTypes() []oidc.GrantType         { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c opClient) LoginURL(id string) string            { return c.st.issuer + "/login?id=" + url.QueryEscape(id) }
func (c opClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c opClient) IDTokenLifetime() time.Duration       { return c.st.lifetime() }
func (c opClient) DevMode() bool                        { return false }
func (c opClient) IsScopeAllowed(string) bool           { return false }
func (c opClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c opClient) ClockSkew() time.Duration             { return 0 }
func (c opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// opStorage is the provider's in-memory state.
type opStorage struct {
	mu        sync.Mutex
	issuer    string
	redirects []string
	keys      []*Key // keys[0] signs; all are published
	requests  map[string]*opAuthRequest
	codes     map[string]string // code -> request id
	next      User
	// aliases are other ids the client is known by; the provider issues
	// its tokens to the client's own id whichever one the request used.
	aliases    map[string]string
	idLifetime time.Duration
	seq        int
}

func (s *opStorage) redirectURIs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.redirects...)
}

func (s *opStorage) lifetime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idLifetime
}

var errOPNotFound = errors.New("not found")

func (s *opStorage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if id, ok := s.aliases[req.ClientID]; ok {
		req.ClientID = id
	}
	a := &opAuthRequest{id: fmt.Sprintf("ar-%d", s.seq), req: req}
	s.requests[a.id] = a
	return a, nil
}

func (s *opStorage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.requests[id]; ok {
		return a, nil
	}
	return nil, errOPNotFound
}

func (s *opStorage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.requests[s.codes[code]]; ok {
		return a, nil
	}
	return nil, errOPNotFound
}

func (s *opStorage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest runs once a code was exchanged: the code is then gone.
func (s *opStorage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

func (s *opStorage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("at-%d", s.seq), time.Now().Add(time.Hour), nil
}

func (s *opStorage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("refresh tokens are not offered")
}

func (s *opStorage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *opStorage) TerminateSession(context.Context, string, string) error { return nil }

func (s *opStorage) RevokeToken(context.Context, string, string, string) *oidc.Error { return nil }

func (s *opStorage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *opStorage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return opSigningKey{keyParts{s.keys[0]}}, nil
}

func (s *opStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256, jose.ES256}, nil
}

func (s *opStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, opPublicKey{keyParts{k}})
	}
	return keys, nil
}

func (s *opStorage) canonical(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.aliases[id]; ok {
		return c
	}
	return id
}

func (s *opStorage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if s.canonical(id) != ClientID {
		return nil, errOPNotFound
	}
	return opClient{s}, nil
}

func (s *opStorage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if s.canonical(id) != ClientID || secret != ClientSecret {
		return errors.New("invalid client")
	}
	return nil
}

func (s *opStorage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest puts the signed-in user's e-mail and groups in
// the id_token.
func (s *opStorage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	a, ok := req.(*opAuthRequest)
	if !ok {
		return errors.New("unexpected request")
	}
	info.Subject = a.GetSubject()
	info.Email = a.user.Email
	info.EmailVerified = oidc.Bool(a.user.Verified)
	if a.user.Groups != nil {
		info.AppendClaims("groups", a.user.Groups)
	}
	return nil
}

func (s *opStorage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return nil
}

func (s *opStorage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return nil
}

func (s *opStorage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *opStorage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errOPNotFound
}

func (s *opStorage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *opStorage) Health(context.Context) error { return nil }
