package tenancy

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// jwksServer publishes a key set over real HTTP and counts its fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...jose.JSONWebKey) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		set := jose.JSONWebKeySet{Keys: s.keys}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) publish(keys ...jose.JSONWebKey) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

type signingKey struct {
	priv *rsa.PrivateKey
	kid  string
}

func newSigningKey(t *testing.T, kid string) signingKey {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{priv: priv, kid: kid}
}

func (k signingKey) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: "RS256", Use: "sig"}
}

func (k signingKey) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const (
	testIssuer     = "https://idp.acme.example"
	testClusterID  = "11111111-2222-4333-8444-555555555555"
	otherClusterID = "99999999-2222-4333-8444-555555555555"
)

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func issuerFixture(t *testing.T, srv *jwksServer, clock *testClock) *TokenIssuer {
	t.Helper()
	i, err := NewTokenIssuer(TokenIssuerConfig{
		Name: "acme", Issuer: testIssuer, JWKSURL: srv.URL, Audiences: []string{"queen"},
		Clusters: []string{testClusterID}, JWKSRefresh: time.Minute, JWKSMinInterval: 10 * time.Second,
		Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func goodClaims(now time.Time) map[string]any {
	return map[string]any{
		"iss": testIssuer, "aud": "queen", "sub": "svc-1",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
		"queen_cluster": "acme-prod", "scope": "openid produce consume unknown",
	}
}

func with(c map[string]any, k string, v any) map[string]any {
	out := map[string]any{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func TestTokenIssuerAcceptsAValidToken(t *testing.T) {
	key := newSigningKey(t, "k1")
	srv := newJWKSServer(t, key.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	got, err := iss.Verify(key.sign(t, goodClaims(clock.Now())))
	if err != nil {
		t.Fatalf("valid token refused: %v", err)
	}
	if got.Cluster != "acme-prod" || got.Subject != "svc-1" || got.Scopes != ScopeSet(ScopeProduce|ScopeConsume) {
		t.Fatalf("claims = %+v, want cluster acme-prod, subject svc-1, produce+consume", got)
	}
	if !iss.MaySee(&Cluster{ID: testClusterID}) || iss.MaySee(&Cluster{ID: otherClusterID}) {
		t.Fatal("MaySee must allow exactly the configured cluster ids")
	}
	if iss.Subject() != "jwt:acme" {
		t.Fatalf("subject %q", iss.Subject())
	}
}

// TestTokenIssuerRefusals walks every claim and signature rule: each token
// is refused, with ErrInvalidIssuerToken.
func TestTokenIssuerRefusals(t *testing.T) {
	key := newSigningKey(t, "k1")
	stranger := newSigningKey(t, "k1") // same kid, not published
	srv := newJWKSServer(t, key.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	now := clock.Now()
	good := goodClaims(now)

	pubDER, err := x509.MarshalPKIXPublicKey(&key.priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	jwkJSON, _ := json.Marshal(key.public())

	cases := map[string]string{
		"expired":             key.sign(t, with(good, "exp", now.Add(-time.Minute).Unix())),
		"no exp":              key.sign(t, with(good, "exp", nil)),
		"not yet valid":       key.sign(t, with(good, "nbf", now.Add(10*time.Minute).Unix())),
		"issued in future":    key.sign(t, with(good, "iat", now.Add(10*time.Minute).Unix())),
		"wrong issuer":        key.sign(t, with(good, "iss", "https://evil.example")),
		"wrong audience":      key.sign(t, with(good, "aud", "other-app")),
		"no audience":         key.sign(t, with(good, "aud", nil)),
		"no cluster":          key.sign(t, with(good, "queen_cluster", nil)),
		"cluster not string":  key.sign(t, with(good, "queen_cluster", 7)),
		"scope not strings":   key.sign(t, with(good, "scope", 7)),
		"unpublished key":     stranger.sign(t, good),
		"alg none":            unsignedToken(good, "none", "k1", ""),
		"alg none with sig":   unsignedToken(good, "none", "k1", "c2ln"),
		"HS256 with PEM":      hmacToken(t, good, pubPEM, "k1"),
		"HS256 with JWK":      hmacToken(t, good, jwkJSON, "k1"),
		"HS256 with modulus":  hmacToken(t, good, key.priv.PublicKey.N.Bytes(), "k1"),
		"tampered payload":    tamper(key.sign(t, good)),
		"garbage":             "a.b.c",
		"two dots too many":   key.sign(t, good) + ".x",
		"oversized":           strings.Repeat("a", maxIssuerTokenBytes+1),
		"exp far past leeway": key.sign(t, with(good, "exp", now.Add(-DefaultTokenLeeway-time.Second).Unix())),
	}
	for name, tok := range cases {
		if _, err := iss.Verify(tok); !errors.Is(err, ErrInvalidIssuerToken) {
			t.Errorf("%s: err = %v, want ErrInvalidIssuerToken", name, err)
		}
	}
	// Within the leeway an expired token still passes: the leeway is real.
	if _, err := iss.Verify(key.sign(t, with(good, "exp", now.Add(-DefaultTokenLeeway/2).Unix()))); err != nil {
		t.Errorf("a token expired within the leeway was refused: %v", err)
	}
}

func unsignedToken(claims map[string]any, alg, kid, sig string) string {
	h, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
	p, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "." + sig
}

func hmacToken(t *testing.T, claims map[string]any, secret []byte, kid string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: secret, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	var c map[string]any
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(raw, &c)
	c["queen_cluster"] = "other"
	raw, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(raw)
	return strings.Join(parts, ".")
}

// TestTokenIssuerKeyRotation: a new kid is fetched at once (within the
// fetch rate), a key the provider dropped stops verifying at the next due
// refresh, and unknown kids cannot make the gateway fetch faster than
// JWKSMinInterval.
func TestTokenIssuerKeyRotation(t *testing.T) {
	k1, k2 := newSigningKey(t, "k1"), newSigningKey(t, "k2")
	srv := newJWKSServer(t, k1.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatal(err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches after the first token, want 1", n)
	}

	// Rotation: k2 appears; a k2 token right away is within the minimum
	// interval, so it is refused without a fetch; after it, one fetch.
	srv.publish(k1.public(), k2.public())
	tok2 := k2.sign(t, goodClaims(clock.Now()))
	if _, err := iss.Verify(tok2); err == nil {
		t.Fatal("an unknown kid was accepted within the minimum interval, which means a fetch the rate bound forbids")
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want still 1 within the minimum interval", n)
	}
	clock.add(11 * time.Second)
	if _, err := iss.Verify(k2.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatalf("rotated key refused after the minimum interval: %v", err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// A flood of unknown kids costs no fetch within the interval.
	for range 50 {
		_, _ = iss.Verify(newSigningKeyCached(t).sign(t, goodClaims(clock.Now())))
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after a flood of unknown kids, want 2", n)
	}

	// The provider drops k1: it verifies until the set is due (jwks
	// refresh, 1 minute here), never after.
	srv.publish(k2.public())
	clock.add(30 * time.Second)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatalf("k1 refused before the refresh was due: %v", err)
	}
	clock.add(31 * time.Second)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); !errors.Is(err, ErrInvalidIssuerToken) {
		t.Fatalf("a dropped key still verifies after the refresh bound: %v", err)
	}
	if _, err := iss.Verify(k2.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatalf("k2 refused: %v", err)
	}
}

var floodKey struct {
	once sync.Once
	k    signingKey
}

// newSigningKeyCached is one stranger key with a fresh kid per call (the
// RSA key itself is generated once: generation is slow).
func newSigningKeyCached(t *testing.T) signingKey {
	floodKey.once.Do(func() { floodKey.k = newSigningKey(t, "x") })
	k := floodKey.k
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	k.kid = base64.RawURLEncoding.EncodeToString(b)
	return k
}

// TestTokenIssuerUnreachableProvider: a set that cannot be refreshed
// serves one more refresh period, then every token is refused.
func TestTokenIssuerUnreachableProvider(t *testing.T) {
	k1 := newSigningKey(t, "k1")
	srv := newJWKSServer(t, k1.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	clock.add(90 * time.Second)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatalf("refused within the grace after an unreachable refresh: %v", err)
	}
	clock.add(31 * time.Second)
	if _, err := iss.Verify(k1.sign(t, goodClaims(clock.Now()))); !errors.Is(err, ErrInvalidIssuerToken) {
		t.Fatalf("a set two refresh periods old still verifies: %v", err)
	}
}

func TestTokenIssuerDiscovery(t *testing.T) {
	k1 := newSigningKey(t, "k1")
	keys := newJWKSServer(t, k1.public())
	var issuerURL string
	disc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuerURL, "jwks_uri": keys.URL})
	}))
	defer disc.Close()
	issuerURL = disc.URL
	clock := &testClock{t: time.Now()}
	iss, err := NewTokenIssuer(TokenIssuerConfig{Name: "acme", Issuer: issuerURL, Audiences: []string{"queen"},
		Clusters: []string{testClusterID}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(k1.sign(t, with(goodClaims(clock.Now()), "iss", issuerURL))); err != nil {
		t.Fatalf("token refused after discovery: %v", err)
	}
}

func TestTokenIssuerConfigRefusals(t *testing.T) {
	base := TokenIssuerConfig{Name: "acme", Issuer: testIssuer, Audiences: []string{"q"}, Clusters: []string{testClusterID}}
	cases := map[string]func(*TokenIssuerConfig){
		"no name":            func(c *TokenIssuerConfig) { c.Name = "" },
		"no issuer":          func(c *TokenIssuerConfig) { c.Issuer = "" },
		"session issuer":     func(c *TokenIssuerConfig) { c.Issuer = DefaultSessionIssuer; c.JWKSURL = "https://x.example/k" },
		"no audience":        func(c *TokenIssuerConfig) { c.Audiences = nil },
		"no clusters":        func(c *TokenIssuerConfig) { c.Clusters = nil },
		"cluster slug":       func(c *TokenIssuerConfig) { c.Clusters = []string{"acme-prod"} },
		"alg none":           func(c *TokenIssuerConfig) { c.Algorithms = []string{"none"} },
		"alg HS256":          func(c *TokenIssuerConfig) { c.Algorithms = []string{"RS256", "HS256"} },
		"plain http jwks":    func(c *TokenIssuerConfig) { c.JWKSURL = "http://idp.example/keys" },
		"plain http issuer":  func(c *TokenIssuerConfig) { c.Issuer = "http://idp.example" },
		"huge leeway":        func(c *TokenIssuerConfig) { c.Leeway = time.Hour },
		"tiny refresh":       func(c *TokenIssuerConfig) { c.JWKSRefresh = time.Millisecond },
		"interval > refresh": func(c *TokenIssuerConfig) { c.JWKSRefresh = time.Minute; c.JWKSMinInterval = time.Hour },
	}
	for name, mutate := range cases {
		c := base
		mutate(&c)
		if _, err := NewTokenIssuer(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewTokenIssuer(base); err != nil {
		t.Fatalf("base config refused: %v", err)
	}
	dup := base
	dup.Name = "other"
	if _, err := NewTokenIssuers([]TokenIssuerConfig{base, dup}); err == nil {
		t.Error("two names for one issuer accepted")
	}
}

func TestTokenIssuersRouteByIssuer(t *testing.T) {
	s, err := NewTokenIssuers([]TokenIssuerConfig{{Name: "acme", Issuer: testIssuer, Audiences: []string{"q"}, Clusters: []string{testClusterID}}})
	if err != nil {
		t.Fatal(err)
	}
	tok := unsignedToken(map[string]any{"iss": testIssuer}, "RS256", "k", "c2ln")
	if i := s.For(tok); i == nil || i.Name() != "acme" {
		t.Fatalf("For(token of the issuer) = %v", i)
	}
	for _, other := range []string{
		unsignedToken(map[string]any{"iss": DefaultSessionIssuer}, "EdDSA", "k", "c2ln"),
		"qk_live_abc", "", "a.b", unsignedToken(map[string]any{"iss": testIssuer}, "RS256", "k", ""),
	} {
		if i := s.For(other); i != nil {
			t.Errorf("For(%q) = %s, want nil", other, i.Name())
		}
	}
	var none *TokenIssuers
	if none.For(tok) != nil {
		t.Error("nil issuers routed a token")
	}
}

// TestTokenPrincipalIsAuthorizedAsAKey: a provider's token has exactly an
// API key's rights for its scopes, and never an operator's.
func TestTokenPrincipalIsAuthorizedAsAKey(t *testing.T) {
	routes := []Route{{Class: ClassProduce}, {Class: ClassConsume}, {Class: ClassQueueAdmin}, {Class: ClassRead},
		{Class: ClassGated, Op: GatedRead}, {Class: ClassGated}, {Class: ClassOperator}, {Class: ClassBlocked}}
	for s := ScopeSet(0); s <= AllScopes; s++ {
		for _, r := range routes {
			key := Principal{Kind: PrincipalAPIKey, KeyID: "k", Scopes: s}
			tok := Principal{Kind: PrincipalToken, KeyID: "jwt:acme", Scopes: s}
			if Authorize(&tok, r) != Authorize(&key, r) {
				t.Errorf("scopes %b, route %+v: token %v, key %v", s, r, Authorize(&tok, r), Authorize(&key, r))
			}
		}
	}
	tok := Principal{Kind: PrincipalToken, KeyID: "jwt:acme", UserID: "u"}
	if tok.Subject() != "jwt:acme" {
		t.Errorf("subject %q, want the issuer's id", tok.Subject())
	}
}

// BenchmarkTokenIssuerVerify is the cost of admitting an RS256 token seen
// before (kept verified) with the key set in memory: what a provider's
// token adds to a request over an API key, whose path it does not touch.
// A token's first sight costs the RSA-2048 signature check on top
// (BenchmarkTokenIssuerFirstSight).
func BenchmarkTokenIssuerVerify(b *testing.B) {
	t := &testing.T{}
	key := newSigningKey(t, "k1")
	srv := newJWKSServer(t, key.public())
	defer srv.Close()
	clock := &testClock{t: time.Now()}
	iss, err := NewTokenIssuer(TokenIssuerConfig{Name: "acme", Issuer: testIssuer, JWKSURL: srv.URL,
		Audiences: []string{"queen"}, Clusters: []string{testClusterID}, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	tok := key.sign(t, goodClaims(clock.Now()))
	if _, err := iss.Verify(tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := iss.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPeekTokenIssuer is what every non-key bearer costs once a
// jwt_issuer is configured, before any verification.
func BenchmarkPeekTokenIssuer(b *testing.B) {
	tok := unsignedToken(goodClaims(time.Now()), "RS256", "k1", "c2ln")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := PeekTokenIssuer(tok); !ok {
			b.Fatal("not peeked")
		}
	}
}

// TestTokenIssuerCachedTokenStillExpires: a token accepted once (and so
// kept verified) is refused once its exp plus leeway has passed, and a
// key set fetched since makes it verify afresh.
func TestTokenIssuerCachedTokenStillExpires(t *testing.T) {
	k1, k2 := newSigningKey(t, "k1"), newSigningKey(t, "k2")
	srv := newJWKSServer(t, k1.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	short := k1.sign(t, with(goodClaims(clock.Now()), "exp", clock.Now().Add(5*time.Second).Unix()))
	for range 2 {
		if _, err := iss.Verify(short); err != nil {
			t.Fatal(err)
		}
	}
	clock.add(5*time.Second + DefaultTokenLeeway + time.Second)
	if _, err := iss.Verify(short); !errors.Is(err, ErrInvalidIssuerToken) {
		t.Fatalf("an expired token was accepted from the cache: %v", err)
	}

	long := k1.sign(t, goodClaims(clock.Now()))
	if _, err := iss.Verify(long); err != nil {
		t.Fatal(err)
	}
	// A new kid makes a fetch (past the minimum interval); k1 is gone from
	// the new set, so the cached k1 token must not survive it.
	srv.publish(k2.public())
	clock.add(11 * time.Second)
	if _, err := iss.Verify(k2.sign(t, goodClaims(clock.Now()))); err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(long); !errors.Is(err, ErrInvalidIssuerToken) {
		t.Fatalf("a token of a dropped key was accepted from the cache after a new set was fetched: %v", err)
	}
}

// BenchmarkTokenIssuerFirstSight is the cost of a token's first
// verification: the signature check and the claims.
func BenchmarkTokenIssuerFirstSight(b *testing.B) {
	t := &testing.T{}
	key := newSigningKey(t, "k1")
	srv := newJWKSServer(t, key.public())
	defer srv.Close()
	clock := &testClock{t: time.Now()}
	iss, err := NewTokenIssuer(TokenIssuerConfig{Name: "acme", Issuer: testIssuer, JWKSURL: srv.URL,
		Audiences: []string{"queen"}, Clusters: []string{testClusterID}, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	tok := key.sign(t, goodClaims(clock.Now()))
	if _, err := iss.Verify(tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		iss.verified.deleteIf(func(string, verifiedIssuerToken) bool { return true })
		if _, err := iss.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenIssuersFor is the routing of a token seen before.
func BenchmarkTokenIssuersFor(b *testing.B) {
	t := &testing.T{}
	key := newSigningKey(t, "k1")
	srv := newJWKSServer(t, key.public())
	defer srv.Close()
	s, err := NewTokenIssuers([]TokenIssuerConfig{{Name: "acme", Issuer: testIssuer, JWKSURL: srv.URL,
		Audiences: []string{"queen"}, Clusters: []string{testClusterID}}})
	if err != nil {
		b.Fatal(err)
	}
	tok := key.sign(t, goodClaims(time.Now()))
	if _, err := s.For(tok).Verify(tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if s.For(tok) == nil {
			b.Fatal("not routed")
		}
	}
}

// TestTokenIssuerConcurrentRefreshFetchesOnce: many requests that find
// the set due at once wait for one fetch between them.
func TestTokenIssuerConcurrentRefreshFetchesOnce(t *testing.T) {
	k1 := newSigningKey(t, "k1")
	srv := newJWKSServer(t, k1.public())
	clock := &testClock{t: time.Now()}
	iss := issuerFixture(t, srv, clock)
	tok := k1.sign(t, goodClaims(clock.Now()))
	if _, err := iss.Verify(tok); err != nil {
		t.Fatal(err)
	}
	clock.add(61 * time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := iss.Verify(tok); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of 16 concurrent verifications failed", failed.Load())
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (the first and one refresh for all 16)", n)
	}
}
