package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// idp is a real OpenID provider (zitadel's) running in the test, over
// real HTTP, whose service clients get JWT access tokens by the client
// credentials grant. Its storage is zitadel's in-memory example storage
// with three things of the test's own: the service clients (each with the
// cluster and scopes its tokens claim, and the audience they are for),
// and a signing key the test can rotate.
type idp struct {
	*storage.Storage
	srv    *httptest.Server
	issuer string

	mu        sync.Mutex
	signing   rsaKey
	published []rsaKey
	clients   map[string]*serviceClient
}

type rsaKey struct {
	id   string
	priv *rsa.PrivateKey
}

type serviceClient struct {
	id, secret, audience, cluster, scopes string
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{clients: map[string]*serviceClient{}}
	p.srv = httptest.NewUnstartedServer(nil)
	p.issuer = "http://" + p.srv.Listener.Addr().String()
	p.Storage = storage.NewStorage(storage.NewUserStore(p.issuer))
	p.rotate(t, false)
	cfg := &op.Config{CryptoKey: sha256.Sum256([]byte("queengate e2e")), CodeMethodS256: true}
	provider, err := op.NewProvider(cfg, p, op.StaticIssuer(p.issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	p.srv.Config.Handler = provider
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// rotate makes a new signing key; keepOld keeps the old one published.
func (p *idp) rotate(t *testing.T, keepOld bool) {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	k := rsaKey{id: base64.RawURLEncoding.EncodeToString(b), priv: priv}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !keepOld {
		p.published = nil
	}
	p.signing = k
	p.published = append(p.published, k)
}

func (p *idp) addClient(c *serviceClient) {
	p.mu.Lock()
	p.clients[c.id] = c
	p.mu.Unlock()
}

// The op.Storage methods the test takes over.

func (p *idp) SigningKey(context.Context) (op.SigningKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return opSigningKey(p.signing), nil
}

func (p *idp) KeySet(context.Context) ([]op.Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []op.Key
	for _, k := range p.published {
		out = append(out, opPublicKey(k))
	}
	return out, nil
}

func (p *idp) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[id]
	if !ok || c.secret != secret {
		return nil, fmt.Errorf("wrong client or secret")
	}
	return (*opClient)(c), nil
}

func (p *idp) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[id]
	if !ok {
		return nil, fmt.Errorf("no client %s", id)
	}
	return &oidc.JWTTokenRequest{Subject: "svc-" + c.id, Audience: []string{c.audience}, Scopes: scopes}, nil
}

func (p *idp) GetPrivateClaimsFromScopes(_ context.Context, _, clientID string, _ []string) (map[string]any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[clientID]
	if !ok {
		return nil, nil
	}
	return map[string]any{"queen_cluster": c.cluster, "queen_scopes": c.scopes}, nil
}

// token gets an access token for a client from the provider's token
// endpoint, by the client credentials grant.
func (p *idp) token(t *testing.T, clientID string) string {
	t.Helper()
	p.mu.Lock()
	secret := p.clients[clientID].secret
	p.mu.Unlock()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"queen"}}
	req, _ := http.NewRequest("POST", p.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(clientID, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || strings.Count(out.AccessToken, ".") != 2 {
		t.Fatalf("token endpoint: %d %v %+v", resp.StatusCode, err, out)
	}
	return out.AccessToken
}

// forge signs claims with the provider's current signing key, for the
// tokens the provider will not mint (expired ones).
func (p *idp) forge(t *testing.T, claims map[string]any) string {
	t.Helper()
	p.mu.Lock()
	k := p.signing
	p.mu.Unlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.id}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type opSigningKey rsaKey

func (k opSigningKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k opSigningKey) Key() any                                    { return k.priv }
func (k opSigningKey) ID() string                                  { return k.id }

type opPublicKey rsaKey

func (k opPublicKey) ID() string                         { return k.id }
func (k opPublicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k opPublicKey) Use() string                        { return "sig" }
func (k opPublicKey) Key() any                           { return &k.priv.PublicKey }

// opClient is a confidential service client that gets JWT access tokens.
type opClient serviceClient

func (c *opClient) GetID() string                       { return c.id }
func (c *opClient) RedirectURIs() []string              { return nil }
func (c *opClient) PostLogoutRedirectURIs() []string    { return nil }
func (c *opClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *opClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *opClient) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *opClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *opClient) LoginURL(string) string               { return "" }
func (c *opClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *opClient) IDTokenLifetime() time.Duration       { return time.Hour }
func (c *opClient) DevMode() bool                        { return false }
func (c *opClient) IsScopeAllowed(string) bool           { return true }
func (c *opClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *opClient) ClockSkew() time.Duration             { return 0 }
func (c *opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// TestIdentityProviderTokensOnTheDataPlane: tokens a real OpenID provider
// mints push and pop through a real Caddy gateway on the cluster they
// name, are metered and counted like a key, and every token the contract
// refuses is refused with an API key's codes: another cluster's (403), a
// cluster the issuer is not bound to (403), expired, `alg: none`, HS256
// signed with the provider's public key, the wrong issuer, the wrong
// audience, and a key the provider dropped from its key set (401).
func TestIdentityProviderTokensOnTheDataPlane(t *testing.T) {
	provider := newIDP(t)
	broker := startBroker(t, fakebroker.Options{Name: "jwt-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("jwt-cell", broker.URL(), "")
	tn := cp.tenant("jwtco")
	a := cp.cluster(tn, "jwt-a", cell)
	b := cp.cluster(tn, "jwt-b", cell)
	unbound := cp.cluster(tn, "jwt-c", cell)
	// b's request bucket is narrow: its tokens spend it as its keys do.
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 1, "req_burst": 3}')`, b.id)

	provider.addClient(&serviceClient{id: "svc-a", secret: "sa", audience: "queen", cluster: a.slug, scopes: "queen:produce queen:consume queen:read"})
	provider.addClient(&serviceClient{id: "svc-b", secret: "sb", audience: "queen", cluster: b.slug, scopes: "queen:produce queen:consume"})
	provider.addClient(&serviceClient{id: "svc-c", secret: "sc", audience: "queen", cluster: unbound.slug, scopes: "queen:produce queen:consume"})
	provider.addClient(&serviceClient{id: "svc-ro", secret: "sr", audience: "queen", cluster: a.slug, scopes: "queen:read"})
	provider.addClient(&serviceClient{id: "svc-other-app", secret: "so", audience: "other-app", cluster: a.slug, scopes: "queen:produce"})

	port := freePort(t)
	app := fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		jwt_issuer acme-idp {
			issuer %s
			audience queen
			algorithms RS256
			clusters %s %s
			scopes_claim queen_scopes
			scope_prefix queen:
			jwks_refresh 1s
			jwks_min_interval 1s
		}`, t.TempDir(), provider.issuer, a.id, b.id)
	cfg := gatewayCaddyfile(port, pgtest.URL(t), app, "shared_hosts shared.example.test")
	// Loaded without startGateway's cleanup: the test stops Caddy itself,
	// to drain the open minute before it reads the usage.
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	c := client(port)
	at := func(cl cluster, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", cl.slug, port, path)
	}

	// A valid token pushes and pops on its own cluster.
	tokA := provider.token(t, "svc-a")
	push := do(t, c, "POST", at(a, "/api/v1/push"), tokA, `{"items":[{"queue":"orders","payload":{"n":1}},{"queue":"orders","payload":{"n":2}}]}`)
	if push.status != 201 && push.status != 200 {
		t.Fatalf("push with the provider's token: %d %s", push.status, push.body)
	}
	pop := do(t, c, "GET", at(a, "/api/v1/pop/queue/orders?batch=5"), tokA, "")
	var popped struct{ Messages []json.RawMessage }
	if err := json.Unmarshal(pop.body, &popped); err != nil || len(popped.Messages) != 2 {
		t.Fatalf("pop with the provider's token: %d %s", pop.status, pop.body)
	}
	// Its scopes are the token's: a read-only token cannot push.
	assertRefusal(t, do(t, c, "POST", at(a, "/api/v1/push"), provider.token(t, "svc-ro"), `{"items":[{"queue":"orders","payload":1}]}`), 403, "forbidden")

	// Another cluster's token, on this cluster's host: 403, as a key of
	// another cluster. The issuer may act on b, but not with a's host.
	tokB := provider.token(t, "svc-b")
	assertRefusal(t, do(t, c, "POST", at(a, "/api/v1/push"), tokB, `{"items":[{"queue":"orders","payload":1}]}`), 403, "forbidden")
	// A token naming a cluster the issuer is not bound to, on that
	// cluster's own host: 403.
	tokC := provider.token(t, "svc-c")
	assertRefusal(t, do(t, c, "POST", at(unbound, "/api/v1/push"), tokC, `{"items":[{"queue":"orders","payload":1}]}`), 403, "forbidden")
	// b's token works on b.
	if r := do(t, c, "POST", at(b, "/api/v1/push"), tokB, `{"items":[{"queue":"orders","payload":1}]}`); r.status >= 300 {
		t.Fatalf("b's token on b: %d %s", r.status, r.body)
	}
	limited := 0
	for range 8 {
		r := do(t, c, "POST", at(b, "/api/v1/push"), tokB, `{"items":[{"queue":"orders","payload":1}]}`)
		if r.status == 429 {
			assertRefusal(t, r, 429, "rate_limited")
			limited++
		}
	}
	if limited == 0 {
		t.Error("nine requests a second on a cluster allowed a burst of 3: the token's requests did not spend the cluster's bucket")
	}

	// On a shared host the token names its cluster, within the same
	// binding; x-queen-act-cluster is refused, as for a key.
	shared := fmt.Sprintf("http://shared.example.test:%d", port)
	if r := do(t, c, "GET", shared+"/api/v1/resources/queues", tokA, ""); r.status != 200 {
		t.Fatalf("a's token on the shared host: %d %s", r.status, r.body)
	}
	assertRefusal(t, do(t, c, "POST", shared+"/api/v1/push", tokC, `{"items":[{"queue":"orders","payload":1}]}`), 403, "forbidden")
	actAs, _ := http.NewRequest("GET", shared+"/api/v1/resources/queues", nil)
	actAs.Header.Set("Authorization", "Bearer "+tokA)
	actAs.Header.Set("x-queen-act-cluster", b.slug)
	if resp, err := c.Do(actAs); err != nil || resp.StatusCode != 403 {
		t.Fatalf("x-queen-act-cluster with a token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	now := time.Now()
	claims := func(over map[string]any) map[string]any {
		m := map[string]any{"iss": provider.issuer, "aud": "queen", "sub": "svc-a", "exp": now.Add(time.Hour).Unix(),
			"iat": now.Unix(), "queen_cluster": a.slug, "queen_scopes": "queen:produce queen:consume queen:read"}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	if r := do(t, c, "GET", at(a, "/api/v1/resources/queues"), provider.forge(t, claims(nil)), ""); r.status != 200 {
		t.Fatalf("the forging helper's own valid token: %d %s", r.status, r.body)
	}
	pubPEM := provider.publicPEM(t)
	refused := map[string]string{
		"expired":           provider.forge(t, claims(map[string]any{"exp": now.Add(-2 * time.Minute).Unix(), "iat": now.Add(-time.Hour).Unix()})),
		"alg none":          noneToken(claims(nil), provider.currentKID(), ""),
		"alg none, sig":     noneToken(claims(nil), provider.currentKID(), "c2ln"),
		"HS256 public key":  hs256Token(t, claims(nil), pubPEM, provider.currentKID()),
		"wrong issuer":      provider.forge(t, claims(map[string]any{"iss": "http://evil.example"})),
		"wrong audience":    provider.token(t, "svc-other-app"),
		"no cluster claim":  provider.forge(t, claims(map[string]any{"queen_cluster": ""})),
		"garbage signature": tokA[:strings.LastIndexByte(tokA, '.')+1] + "AAAA",
	}
	for name, tok := range refused {
		r := do(t, c, "GET", at(a, "/api/v1/resources/queues"), tok, "")
		if r.status != 401 {
			t.Errorf("%s: status %d, want 401; body %s", name, r.status, r.body)
			continue
		}
		assertRefusal(t, r, 401, "unauthorized")
	}

	// The provider drops its signing key: within the refresh bound (1s
	// here) the old key's token stops working; the new key's works.
	provider.rotate(t, false)
	tokNew := provider.token(t, "svc-a")
	took := eventually(t, 15*time.Second, func() error {
		if r := do(t, c, "GET", at(a, "/api/v1/resources/queues"), tokA, ""); r.status != 401 {
			return fmt.Errorf("the dropped key's token answers %d", r.status)
		}
		return nil
	})
	t.Logf("a key the provider dropped was refused %v after it was dropped (jwks_refresh 1s)", took)
	if r := do(t, c, "GET", at(a, "/api/v1/resources/queues"), tokNew, ""); r.status != 200 {
		t.Fatalf("the new key's token: %d %s", r.status, r.body)
	}

	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}
	if reqs, msgs := cp.usageOf(a.id, "push"); reqs != 1 || msgs != 2 {
		t.Errorf("push usage of a: %d requests, %d messages; want 1 and 2", reqs, msgs)
	}
	if reqs, msgs := cp.usageOf(a.id, "delivery"); reqs != 1 || msgs != 2 {
		t.Errorf("delivery usage of a: %d requests, %d messages; want 1 and 2", reqs, msgs)
	}
	got := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text FROM queen_proxy.request_minutes
		WHERE cluster_id = $1::uuid AND key_id = 'jwt:acme-idp' AND outcome = 'ok'`, a.id)
	if got == "0" {
		t.Errorf("request_minutes counts no request of the issuer's tokens on a")
	}
}

func (p *idp) currentKID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signing.id
}

func (p *idp) publicPEM(t *testing.T) []byte {
	t.Helper()
	p.mu.Lock()
	pub := &p.signing.priv.PublicKey
	p.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func noneToken(claims map[string]any, kid, sig string) string {
	h, _ := json.Marshal(map[string]string{"alg": "none", "kid": kid, "typ": "JWT"})
	p, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "." + sig
}

func hs256Token(t *testing.T, claims map[string]any, secret []byte, kid string) string {
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
