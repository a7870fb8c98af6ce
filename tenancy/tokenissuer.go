package tenancy

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/uuidtext"
)

// The defaults and bounds of a TokenIssuerConfig.
const (
	DefaultTokenClusterClaim   = "queen_cluster"
	DefaultTokenScopesClaim    = "scope"
	DefaultTokenLeeway         = 30 * time.Second
	MaxTokenLeeway             = 5 * time.Minute
	DefaultJWKSRefresh         = 5 * time.Minute
	MinJWKSRefresh             = time.Second
	DefaultJWKSMinInterval     = 10 * time.Second
	jwksFetchTimeout           = 5 * time.Second
	maxJWKSBytes               = 1 << 20
	maxIssuerTokenBytes        = 16 << 10
	defaultTokenAlgorithm      = jose.RS256
	tokenPrincipalPrefix       = "jwt:"
	maxTokenIssuerNameLen      = 64
	openIDConfigurationSuffix  = "/.well-known/openid-configuration"
	jwksUnusableAfterRefreshes = 2
)

// ErrInvalidIssuerToken is wrapped by every refusal of a token from a
// configured identity provider. The reason is for the log, not the caller.
var ErrInvalidIssuerToken = errors.New("invalid identity provider token")

// asymmetricAlgorithms are the only signature algorithms an issuer may be
// configured with: each verifies with a public key, so no published key
// can ever serve as an HMAC secret, and "none" is not among them.
var asymmetricAlgorithms = map[string]jose.SignatureAlgorithm{
	"RS256": jose.RS256, "RS384": jose.RS384, "RS512": jose.RS512,
	"PS256": jose.PS256, "PS384": jose.PS384, "PS512": jose.PS512,
	"ES256": jose.ES256, "ES384": jose.ES384, "ES512": jose.ES512,
	"EdDSA": jose.EdDSA,
}

// TokenIssuerConfig describes one customer identity provider whose JWTs
// the data plane accepts in place of an API key.
type TokenIssuerConfig struct {
	// Name identifies the issuer in logs, in the request tally
	// ("jwt:<name>") and as the subject the cell is told about.
	Name string
	// Issuer is the exact "iss" the tokens carry (the provider's issuer URL).
	Issuer string
	// JWKSURL is where the provider publishes its keys; empty means
	// discovery from <Issuer>/.well-known/openid-configuration.
	JWKSURL string
	// Audiences: a token must name at least one of them in "aud".
	Audiences []string
	// Algorithms allowed; default RS256. Only asymmetric ones are accepted.
	Algorithms []string
	// ClusterClaim names the claim that carries the cluster's slug or id.
	ClusterClaim string
	// ScopesClaim names the claim that carries the scopes, a
	// space-separated string or an array of strings.
	ScopesClaim string
	// ScopePrefix is what the scope names carry before produce, consume,
	// read or admin in that claim (for example "queen:").
	ScopePrefix string
	// MaxScopes bounds what a token can grant; zero means every scope.
	MaxScopes ScopeSet
	// Clusters are the ids of the clusters this issuer's tokens may act
	// on. Required: a provider a customer controls mints any claim it
	// likes, so only this list keeps its tokens off other clusters.
	Clusters []string
	// Leeway for exp, nbf and iat; default 30s, at most 5m.
	Leeway time.Duration
	// JWKSRefresh is the age at which the key set is fetched again (and so
	// the bound on how long a key the provider dropped still verifies);
	// default 5m, at least 1s.
	JWKSRefresh time.Duration
	// JWKSMinInterval is the least time between two fetches of the key
	// set, whatever tokens arrive (unknown kids included); default 10s,
	// at most JWKSRefresh.
	JWKSMinInterval time.Duration
	// HTTPClient fetches discovery documents and key sets; default a
	// client with a 5 s timeout.
	HTTPClient *http.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger gets a warning for each failed fetch; default none.
	Logger *zap.Logger
}

// IssuerTokenClaims is what a verified token says.
type IssuerTokenClaims struct {
	Subject string
	Cluster string // the cluster claim's value, a slug or an id
	Scopes  ScopeSet
	Expiry  time.Time
}

// TokenIssuer verifies the tokens of one identity provider against its
// published key set, which it keeps in memory and fetches again when it
// is older than JWKSRefresh or a token names a key it does not hold (no
// more often than JWKSMinInterval).
type TokenIssuer struct {
	cfg      TokenIssuerConfig
	algs     []jose.SignatureAlgorithm
	clusters map[string]bool
	subject  string

	keys        atomic.Pointer[issuerKeySet]
	verified    *ttlMap[string, verifiedIssuerToken]
	fetchMu     sync.Mutex // one fetch at a time; waiters reuse its result
	lastAttempt time.Time  // under fetchMu
	jwksURL     string     // under fetchMu: configured or discovered
}

// verifiedIssuerToken is a token that verified with one key set: it is
// accepted again without the signature check while that set is the
// current one and not due, and until the token's exp plus leeway.
type verifiedIssuerToken struct {
	claims IssuerTokenClaims
	set    *issuerKeySet
}

type issuerKeySet struct {
	fetched time.Time
	keys    []jose.JSONWebKey // public signing keys only
}

// NewTokenIssuer checks cfg and returns its issuer. Nothing is fetched
// until the first token arrives.
func NewTokenIssuer(cfg TokenIssuerConfig) (*TokenIssuer, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("jwt issuer %q: %w", cfg.Name, err)
	}
	i := &TokenIssuer{cfg: cfg, clusters: map[string]bool{}, subject: tokenPrincipalPrefix + cfg.Name, jwksURL: cfg.JWKSURL,
		verified: newEvictingTTLMap[string, verifiedIssuerToken](DefaultSessionVerifyCacheSize)}
	for _, a := range cfg.Algorithms {
		i.algs = append(i.algs, asymmetricAlgorithms[a])
	}
	for _, c := range cfg.Clusters {
		i.clusters[c] = true
	}
	return i, nil
}

// check applies defaults and refuses what cannot be verified safely.
func (c *TokenIssuerConfig) check() error {
	if c.Name == "" || len(c.Name) > maxTokenIssuerNameLen || !ValidSlug(c.Name) {
		return fmt.Errorf("name must be 1 to %d characters of a-z, 0-9 and -", maxTokenIssuerNameLen)
	}
	if c.Issuer == "" {
		return errors.New("issuer is required")
	}
	if c.Issuer == DefaultSessionIssuer {
		return fmt.Errorf("issuer %q is the gateway's own session issuer", c.Issuer)
	}
	if err := checkFetchURL(c.Issuer); c.JWKSURL == "" && err != nil {
		return fmt.Errorf("issuer (used for discovery): %w", err)
	}
	if c.JWKSURL != "" {
		if err := checkFetchURL(c.JWKSURL); err != nil {
			return fmt.Errorf("jwks_url: %w", err)
		}
	}
	if len(c.Audiences) == 0 {
		return errors.New("audience is required: a token minted for another application must not be accepted")
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = []string{string(defaultTokenAlgorithm)}
	}
	for _, a := range c.Algorithms {
		if _, ok := asymmetricAlgorithms[a]; !ok {
			return fmt.Errorf("algorithm %q is not allowed: use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 or EdDSA", a)
		}
	}
	if len(c.Clusters) == 0 {
		return errors.New("clusters is required: the ids of the clusters its tokens may act on")
	}
	for _, id := range c.Clusters {
		if !uuidtext.ValidLower(id) {
			return fmt.Errorf("cluster %q is not a cluster id (a lower-case uuid)", id)
		}
	}
	if c.ClusterClaim == "" {
		c.ClusterClaim = DefaultTokenClusterClaim
	}
	if c.ScopesClaim == "" {
		c.ScopesClaim = DefaultTokenScopesClaim
	}
	if c.MaxScopes == 0 {
		c.MaxScopes = AllScopes
	}
	switch {
	case c.Leeway == 0:
		c.Leeway = DefaultTokenLeeway
	case c.Leeway < 0 || c.Leeway > MaxTokenLeeway:
		return fmt.Errorf("leeway must be between 0 and %s", MaxTokenLeeway)
	}
	if c.JWKSRefresh == 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if c.JWKSRefresh < MinJWKSRefresh {
		return fmt.Errorf("jwks_refresh must be at least %s", MinJWKSRefresh)
	}
	if c.JWKSMinInterval == 0 {
		c.JWKSMinInterval = min(DefaultJWKSMinInterval, c.JWKSRefresh)
	}
	if c.JWKSMinInterval < 0 || c.JWKSMinInterval > c.JWKSRefresh {
		return errors.New("jwks_min_interval must be positive and at most jwks_refresh")
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: jwksFetchTimeout}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// checkFetchURL allows https, and plain http only to a loopback address
// (a provider on the same machine): a key set fetched in the clear could
// be replaced by anyone on the path.
func checkFetchURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("%q must be https (plain http only to a loopback address)", raw)
}

// Name is the configured name.
func (i *TokenIssuer) Name() string { return i.cfg.Name }

// Subject is the stable id of the issuer's tokens for metering, the
// request tally and the cell: "jwt:<name>".
func (i *TokenIssuer) Subject() string { return i.subject }

// MaySee reports whether the issuer's tokens may act on the cluster.
func (i *TokenIssuer) MaySee(c *Cluster) bool { return c != nil && i.clusters[c.ID] }

// Verify checks a token's signature against the provider's keys and its
// claims against the configuration, fetching the key set when it is due
// (or names an unknown key and a fetch is allowed). Every refusal wraps
// ErrInvalidIssuerToken.
func (i *TokenIssuer) Verify(token string) (IssuerTokenClaims, error) {
	return i.verify(token, true)
}

// VerifyCached is Verify without any fetch: what a client the failure
// guard holds back may cost.
func (i *TokenIssuer) VerifyCached(token string) (IssuerTokenClaims, error) {
	return i.verify(token, false)
}

func (i *TokenIssuer) verify(token string, mayFetch bool) (IssuerTokenClaims, error) {
	var out IssuerTokenClaims
	if len(token) > maxIssuerTokenBytes {
		return out, fmt.Errorf("%w: token of %d bytes", ErrInvalidIssuerToken, len(token))
	}
	now := i.cfg.Now()
	if cur := i.keys.Load(); cur != nil && now.Sub(cur.fetched) < i.cfg.JWKSRefresh {
		if v, ok := i.verified.get(token, now); ok && v.set == cur {
			return v.claims, nil
		}
	}
	tok, err := josejwt.ParseSigned(token, i.algs)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrInvalidIssuerToken, err)
	}
	if len(tok.Headers) != 1 {
		return out, fmt.Errorf("%w: %d signatures", ErrInvalidIssuerToken, len(tok.Headers))
	}
	h := tok.Headers[0]
	key, set, err := i.key(h.KeyID, jose.SignatureAlgorithm(h.Algorithm), mayFetch)
	if err != nil {
		return out, err
	}
	var std josejwt.Claims
	var custom map[string]json.RawMessage
	if err := tok.Claims(key, &std, &custom); err != nil {
		return out, fmt.Errorf("%w: %w", ErrInvalidIssuerToken, err)
	}
	out, err = i.checkClaims(std, custom)
	if err != nil {
		return out, err
	}
	// Kept until the token expires or its set is due, whichever is first;
	// a set fetched since (a dropped key) makes the entry a miss.
	until := out.Expiry.Add(i.cfg.Leeway)
	if due := set.fetched.Add(i.cfg.JWKSRefresh); due.Before(until) {
		until = due
	}
	i.verified.put(strings.Clone(token), verifiedIssuerToken{claims: out, set: set}, until, now)
	return out, nil
}

// checkClaims applies issuer, audience, expiry (required), nbf and iat,
// then reads the cluster and scope claims.
func (i *TokenIssuer) checkClaims(std josejwt.Claims, custom map[string]json.RawMessage) (IssuerTokenClaims, error) {
	var out IssuerTokenClaims
	if std.Expiry == nil {
		return out, fmt.Errorf("%w: no exp", ErrInvalidIssuerToken)
	}
	err := std.ValidateWithLeeway(josejwt.Expected{
		Issuer: i.cfg.Issuer, AnyAudience: i.cfg.Audiences, Time: i.cfg.Now(),
	}, i.cfg.Leeway)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrInvalidIssuerToken, err)
	}
	var cluster string
	if raw, ok := custom[i.cfg.ClusterClaim]; !ok || json.Unmarshal(raw, &cluster) != nil || cluster == "" {
		return out, fmt.Errorf("%w: no %s claim naming a cluster", ErrInvalidIssuerToken, i.cfg.ClusterClaim)
	}
	scopes, err := readScopes(custom[i.cfg.ScopesClaim], i.cfg.ScopePrefix)
	if err != nil {
		return out, fmt.Errorf("%w: %s claim: %w", ErrInvalidIssuerToken, i.cfg.ScopesClaim, err)
	}
	out.Subject, out.Cluster, out.Expiry = std.Subject, cluster, std.Expiry.Time()
	out.Scopes = scopes & i.cfg.MaxScopes
	return out, nil
}

// readScopes reads a scope claim: a space-separated string (OAuth's
// "scope") or an array of strings. Names other than the four scopes, with
// the prefix, grant nothing; an absent claim grants nothing.
func readScopes(raw json.RawMessage, prefix string) (ScopeSet, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var names []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		names = strings.Fields(one)
	} else if err := json.Unmarshal(raw, &names); err != nil {
		return 0, errors.New("neither a string nor an array of strings")
	}
	var s ScopeSet
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, prefix); ok {
			s |= ParseScopes([]string{rest})
		}
	}
	return s, nil
}

// key finds the public key that verifies a token of kid and alg. A set
// older than JWKSRefresh is fetched again first; a kid the set lacks
// makes one more fetch, within JWKSMinInterval of the last one.
func (i *TokenIssuer) key(kid string, alg jose.SignatureAlgorithm, mayFetch bool) (any, *issuerKeySet, error) {
	set := i.keys.Load()
	if mayFetch && (set == nil || i.cfg.Now().Sub(set.fetched) >= i.cfg.JWKSRefresh) {
		set = i.refresh(set)
	}
	if k := set.find(kid, alg); k != nil && i.usable(set) {
		return k, set, nil
	}
	if mayFetch {
		if fresh := i.refresh(set); fresh != set {
			set = fresh
			if k := set.find(kid, alg); k != nil && i.usable(set) {
				return k, set, nil
			}
		}
	}
	if set == nil || !i.usable(set) {
		return nil, nil, fmt.Errorf("%w: no current key set of %s", ErrInvalidIssuerToken, i.cfg.Name)
	}
	return nil, nil, fmt.Errorf("%w: no %s key with kid %q", ErrInvalidIssuerToken, alg, kid)
}

// usable reports whether a set may still verify: up to JWKSRefresh past
// its due refresh when the provider cannot be reached, never longer.
func (i *TokenIssuer) usable(set *issuerKeySet) bool {
	return set != nil && i.cfg.Now().Sub(set.fetched) < jwksUnusableAfterRefreshes*i.cfg.JWKSRefresh
}

// refresh fetches the key set unless another caller just did (then its
// result is returned) or the last attempt is within JWKSMinInterval.
// It returns the newest set it knows, which may be seen (unchanged).
func (i *TokenIssuer) refresh(seen *issuerKeySet) *issuerKeySet {
	i.fetchMu.Lock()
	defer i.fetchMu.Unlock()
	if cur := i.keys.Load(); cur != seen {
		return cur
	}
	now := i.cfg.Now()
	if !i.lastAttempt.IsZero() && now.Sub(i.lastAttempt) < i.cfg.JWKSMinInterval {
		return seen
	}
	i.lastAttempt = now
	ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
	defer cancel()
	keys, err := i.fetch(ctx)
	if err != nil {
		i.cfg.Logger.Warn("identity provider key set not fetched; the keys last fetched serve on within their bound",
			zap.String("jwt_issuer", i.cfg.Name), zap.Error(err))
		return seen
	}
	set := &issuerKeySet{fetched: now, keys: keys}
	i.keys.Store(set)
	return set
}

// fetch reads the key set (after discovery, the first time, when no
// jwks_url is configured) and keeps its public signing keys.
func (i *TokenIssuer) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	if i.jwksURL == "" {
		u, err := i.discover(ctx)
		if err != nil {
			return nil, err
		}
		i.jwksURL = u
	}
	var set jose.JSONWebKeySet
	if err := i.getJSON(ctx, i.jwksURL, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" || !k.Valid() || !k.IsPublic() {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("key set holds no public signing key")
	}
	return keys, nil
}

// discover reads the provider's discovery document, which must name the
// configured issuer, and returns its jwks_uri.
func (i *TokenIssuer) discover(ctx context.Context) (string, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := i.getJSON(ctx, strings.TrimSuffix(i.cfg.Issuer, "/")+openIDConfigurationSuffix, &doc); err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != i.cfg.Issuer {
		return "", fmt.Errorf("discovery: the document names issuer %q, not %q", doc.Issuer, i.cfg.Issuer)
	}
	if err := checkFetchURL(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery: jwks_uri: %w", err)
	}
	return doc.JWKSURI, nil
}

func (i *TokenIssuer) getJSON(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := i.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxJWKSBytes {
		return fmt.Errorf("GET %s: more than %d bytes", u, maxJWKSBytes)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// find returns the key of kid (any key, when the token names none) that
// can verify alg, or nil.
func (s *issuerKeySet) find(kid string, alg jose.SignatureAlgorithm) any {
	if s == nil {
		return nil
	}
	for idx := range s.keys {
		k := &s.keys[idx]
		if kid != "" && k.KeyID != kid || k.Algorithm != "" && k.Algorithm != string(alg) {
			continue
		}
		if keyFits(k.Key, alg) {
			return k.Key
		}
	}
	return nil
}

// keyFits reports whether a public key is of the type (and curve) alg
// signs with.
func keyFits(key any, alg jose.SignatureAlgorithm) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		switch alg {
		case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
			return true
		}
	case *ecdsa.PublicKey:
		switch alg {
		case jose.ES256:
			return k.Curve == elliptic.P256()
		case jose.ES384:
			return k.Curve == elliptic.P384()
		case jose.ES512:
			return k.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == jose.EdDSA
	}
	return false
}

// TokenIssuers routes a bearer to the configured issuer whose token it
// claims to be.
type TokenIssuers struct {
	byIssuer map[string]*TokenIssuer
	list     []*TokenIssuer
}

// NewTokenIssuers builds the issuers of cfgs; two with the same name or
// issuer are refused.
func NewTokenIssuers(cfgs []TokenIssuerConfig) (*TokenIssuers, error) {
	s := &TokenIssuers{byIssuer: map[string]*TokenIssuer{}}
	names := map[string]bool{}
	for _, c := range cfgs {
		i, err := NewTokenIssuer(c)
		if err != nil {
			return nil, err
		}
		if names[i.cfg.Name] {
			return nil, fmt.Errorf("jwt issuer %q given twice", i.cfg.Name)
		}
		if s.byIssuer[i.cfg.Issuer] != nil {
			return nil, fmt.Errorf("jwt issuer %q: issuer %q is already configured", i.cfg.Name, i.cfg.Issuer)
		}
		names[i.cfg.Name] = true
		s.byIssuer[i.cfg.Issuer] = i
		s.list = append(s.list, i)
	}
	return s, nil
}

// For returns the issuer a bearer's unverified "iss" names, or nil when
// it is not the token of a configured issuer (a session token, say).
func (s *TokenIssuers) For(bearer string) *TokenIssuer {
	if s == nil || len(s.byIssuer) == 0 {
		return nil
	}
	// A token seen before is found without decoding it.
	for _, i := range s.list {
		if _, ok := i.verified.get(bearer, i.cfg.Now()); ok {
			return i
		}
	}
	iss, ok := PeekTokenIssuer(bearer)
	if !ok {
		return nil
	}
	return s.byIssuer[iss]
}
