package console

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

// testOP is a real OpenID provider (zitadel/oidc's op package) on an
// in-memory storage: discovery, the authorization endpoint with PKCE,
// the token endpoint (client_secret_post), and the key set, all served by
// the library. The test decides only who signs in (its login step), the
// signing keys, and what the storage reports about a request.
type testOP struct {
	t        *testing.T
	srv      *httptest.Server
	st       *opStorage
	jwksHits atomic.Int64
}

const (
	opClientID     = "queengate-console"
	opClientSecret = "op-secret-1234"
)

func newTestOP(t *testing.T) *testOP {
	t.Helper()
	o := &testOP{t: t}
	var handler http.Handler
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			o.jwksHits.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(o.srv.Close)
	o.st = &opStorage{
		issuer: o.srv.URL, requests: map[string]*opAuthRequest{}, codes: map[string]string{},
		idLifetime: time.Hour, run: uniq.Add(1), aliases: map[string]string{},
	}
	o.st.rotate(newRSAKey(t))
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: cryptoKey, CodeMethodS256: true, AuthMethodPost: true,
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
func (o *testOP) login(w http.ResponseWriter, r *http.Request) {
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

// signIn queues the user the next login is, then walks the browser from
// the gateway's redirect through the provider until the provider sends it
// back to the gateway: the callback URL the provider chose.
func (o *testOP) signIn(authorize string, u idpUser, tamper func(url.Values)) *url.URL {
	o.t.Helper()
	o.st.mu.Lock()
	o.st.next = u
	o.st.mu.Unlock()
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

// idpUser is who signs in at the provider.
type idpUser struct {
	sub, email string
	verified   bool
	groups     []string
}

// opKey is one signing key of the provider.
type opKey struct {
	id   string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func (k *opKey) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *opKey) Algorithm() jose.SignatureAlgorithm          { return k.alg }
func (k *opKey) ID() string                                  { return k.id }
func (k *opKey) Use() string                                 { return "sig" }

// opPublicKey is an opKey as the key set publishes it.
type opPublicKey struct{ *opKey }

func (k opPublicKey) Key() any { return k.priv.Public() }

// opSigningKey is an opKey as the signer uses it.
type opSigningKey struct{ *opKey }

func (k opSigningKey) Key() any { return k.priv }

var keySeq atomic.Int64

func newRSAKey(t *testing.T) *opKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &opKey{id: fmt.Sprintf("rsa-%d", keySeq.Add(1)), alg: jose.RS256, priv: k}
}

func newECKey(t *testing.T) *opKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &opKey{id: fmt.Sprintf("ec-%d", keySeq.Add(1)), alg: jose.ES256, priv: k}
}

// opAuthRequest is one authorization request the provider holds.
type opAuthRequest struct {
	id       string
	req      *oidc.AuthRequest
	user     idpUser
	done     bool
	authTime time.Time
	run      int64
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
func (a *opAuthRequest) GetSubject() string                 { return fmt.Sprintf("%s-run%d", a.user.sub, a.run) }
func (a *opAuthRequest) Done() bool                         { return a.done }

// opClient is the gateway, registered as a confidential web client.
type opClient struct{ st *opStorage }

func (c opClient) GetID() string                       { return opClientID }
func (c opClient) RedirectURIs() []string              { return c.st.redirectURIs() }
func (c opClient) PostLogoutRedirectURIs() []string    { return nil }
func (c opClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c opClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodPost }
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
	keys      []*opKey // keys[0] signs; all are published
	requests  map[string]*opAuthRequest
	codes     map[string]string // code -> request id
	next      idpUser
	// aliases are other ids the client is known by; the provider issues
	// its tokens to the client's own id whichever one the request used.
	aliases    map[string]string
	idLifetime time.Duration
	run        int64 // makes subjects unique per test run: see GetSubject
	seq        int
}

// rotate makes k the signing key and the only published one.
func (s *opStorage) rotate(k *opKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = []*opKey{k}
}

func (s *opStorage) allowRedirect(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.redirects = append(s.redirects, u)
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
	a := &opAuthRequest{id: fmt.Sprintf("ar-%d", s.seq), req: req, run: s.run}
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
	return opSigningKey{s.keys[0]}, nil
}

func (s *opStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256, jose.ES256}, nil
}

func (s *opStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, opPublicKey{k})
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
	if s.canonical(id) != opClientID {
		return nil, errOPNotFound
	}
	return opClient{s}, nil
}

func (s *opStorage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if s.canonical(id) != opClientID || secret != opClientSecret {
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
	info.Email = a.user.email
	info.EmailVerified = oidc.Bool(a.user.verified)
	if a.user.groups != nil {
		info.AppendClaims("groups", a.user.groups)
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
