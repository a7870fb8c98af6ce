package tenancy

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The roles a Queen broker running its own JWT authentication knows, as
// values of its role claim.
const (
	// BrokerRoleAdmin may use every broker route.
	BrokerRoleAdmin = "admin"
	// BrokerRoleReadWrite may push, pop, ack, configure and read.
	BrokerRoleReadWrite = "read-write"
	// BrokerRoleReadOnly may only read.
	BrokerRoleReadOnly = "read-only"
)

// Cell token defaults and bounds.
const (
	// DefaultCellTokenTTL is the lifetime of a minted cell token.
	DefaultCellTokenTTL = 5 * time.Minute
	// MinCellTokenTTL is the shortest lifetime accepted: shorter tokens
	// would be re-minted so often that caching them stops paying.
	MinCellTokenTTL = 30 * time.Second
	// DefaultCellTokenCacheSize bounds the cached (subject, role) pairs.
	DefaultCellTokenCacheSize = 100_000
	// maxCellTokenSubject bounds a subject's length.
	maxCellTokenSubject = 512
)

// CellTokenConfig configures the JWTs the gateway mints for a cell's broker.
type CellTokenConfig struct {
	// Algorithm is "HS256" or "EdDSA" (any case). Empty means the one whose
	// key material is configured. Exactly one of HS256Secret and
	// Ed25519PrivateKeyPEM must be set.
	Algorithm string
	// HS256Secret is the broker's JWT_SECRET, at least 32 bytes.
	HS256Secret []byte
	// Ed25519PrivateKeyPEM is a PKCS#8 "PRIVATE KEY" PEM.
	Ed25519PrivateKeyPEM []byte
	// Issuer and Audience, when set, are minted as iss and aud.
	Issuer, Audience string
	// RoleClaim names the claim carrying the broker role (default "role").
	RoleClaim string
	// TTL is each token's lifetime (default 5m, at least 30s). A cached
	// token is reused until less than a third of it is left.
	TTL time.Duration
	// MaxEntries bounds the cache (default 100 000).
	MaxEntries int
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// CellTokens mints and caches the short-lived JWTs the gateway presents to
// a cell's broker in place of the client's credential. It is safe for
// concurrent use; a cached token is returned without minting or allocating.
type CellTokens struct {
	method    jwt.SigningMethod
	key       any
	kid       string
	issuer    string
	audience  string
	roleClaim string
	ttl       time.Duration
	refreshIn time.Duration // age at which a token is replaced
	now       func() time.Time

	cache   *ttlMap[cellTokenKey, cellToken]
	flightM sync.Mutex
	flights map[cellTokenKey]*cellFlight
	minted  atomic.Uint64
}

type cellTokenKey struct{ subject, role string }

type cellToken struct {
	token     string
	refreshAt time.Time
}

// cellFlight is one mint in progress; callers for the same key wait on it.
type cellFlight struct {
	done  chan struct{}
	token string
	err   error
}

// NewCellTokens checks cfg and returns an empty token cache.
func NewCellTokens(cfg CellTokenConfig) (*CellTokens, error) {
	c := &CellTokens{
		issuer: cfg.Issuer, audience: cfg.Audience, roleClaim: cfg.RoleClaim,
		ttl: cfg.TTL, now: cfg.Now, flights: make(map[cellTokenKey]*cellFlight),
	}
	if err := c.loadKey(cfg); err != nil {
		return nil, fmt.Errorf("cell tokens: %w", err)
	}
	if err := c.applyDefaults(); err != nil {
		return nil, fmt.Errorf("cell tokens: %w", err)
	}
	size := cfg.MaxEntries
	if size <= 0 {
		size = DefaultCellTokenCacheSize
	}
	c.cache = newEvictingTTLMap[cellTokenKey, cellToken](size)
	return c, nil
}

// loadKey picks the algorithm and loads its key.
func (c *CellTokens) loadKey(cfg CellTokenConfig) error {
	hasHS, hasEd := len(cfg.HS256Secret) > 0, len(cfg.Ed25519PrivateKeyPEM) > 0
	if hasHS && hasEd {
		return errors.New("both an HS256 secret and an Ed25519 key are configured; set one")
	}
	alg := strings.ToUpper(cfg.Algorithm)
	if alg == "" {
		switch {
		case hasHS:
			alg = "HS256"
		case hasEd:
			alg = "EDDSA"
		default:
			return errors.New("no HS256 secret or Ed25519 key configured")
		}
	}
	switch alg {
	case "HS256":
		if !hasHS {
			return errors.New("algorithm HS256 needs an HS256 secret")
		}
		if len(cfg.HS256Secret) < MinHS256SecretLen {
			return fmt.Errorf("HS256 secret is %d bytes, need at least %d", len(cfg.HS256Secret), MinHS256SecretLen)
		}
		c.method, c.key = jwt.SigningMethodHS256, append([]byte(nil), cfg.HS256Secret...)
	case "EDDSA":
		if !hasEd {
			return errors.New("algorithm EdDSA needs an Ed25519 private key")
		}
		priv, err := ParseEd25519PrivateKeyPEM(cfg.Ed25519PrivateKeyPEM)
		if err != nil {
			return err
		}
		c.method, c.key = jwt.SigningMethodEdDSA, priv
		c.kid = Ed25519KeyID(priv.Public().(ed25519.PublicKey))
	default:
		return fmt.Errorf("algorithm %q is not HS256 or EdDSA", cfg.Algorithm)
	}
	return nil
}

// applyDefaults fills and checks role claim, TTL and clock.
func (c *CellTokens) applyDefaults() error {
	if c.roleClaim == "" {
		c.roleClaim = "role"
	}
	switch c.roleClaim {
	case "sub", "iat", "exp", "nbf", "iss", "aud", "jti":
		return fmt.Errorf("role claim %q would overwrite a registered claim", c.roleClaim)
	}
	if c.ttl == 0 {
		c.ttl = DefaultCellTokenTTL
	}
	if c.ttl < MinCellTokenTTL {
		return fmt.Errorf("ttl %v is shorter than %v", c.ttl, MinCellTokenTTL)
	}
	c.refreshIn = c.ttl * 2 / 3
	if c.now == nil {
		c.now = time.Now
	}
	return nil
}

// Token returns a token for subject acting with a broker role. A cached
// token is reused while more than a third of its lifetime is left; then one
// caller mints its replacement while concurrent callers for the same pair
// wait for it, so a hot pair never mints per request.
func (c *CellTokens) Token(subject, role string) (string, error) {
	if err := checkCellTokenInput(subject, role); err != nil {
		return "", fmt.Errorf("cell token: %w", err)
	}
	k := cellTokenKey{subject, role}
	now := c.now()
	if t, ok := c.cache.get(k, now); ok && now.Before(t.refreshAt) {
		return t.token, nil
	}
	return c.refresh(k)
}

func checkCellTokenInput(subject, role string) error {
	switch role {
	case BrokerRoleAdmin, BrokerRoleReadWrite, BrokerRoleReadOnly:
	default:
		return fmt.Errorf("broker role %q is not admin, read-write or read-only", role)
	}
	if subject == "" || len(subject) > maxCellTokenSubject {
		return fmt.Errorf("subject must be 1 to %d bytes, got %d", maxCellTokenSubject, len(subject))
	}
	return nil
}

// refresh mints a token for k, or waits for the mint already in progress.
func (c *CellTokens) refresh(k cellTokenKey) (string, error) {
	c.flightM.Lock()
	if f := c.flights[k]; f != nil {
		c.flightM.Unlock()
		<-f.done
		return f.token, f.err
	}
	// A flight may have finished between the caller's cache miss and here.
	now := c.now()
	if t, ok := c.cache.get(k, now); ok && now.Before(t.refreshAt) {
		c.flightM.Unlock()
		return t.token, nil
	}
	f := &cellFlight{done: make(chan struct{}), err: errMintIncomplete}
	c.flights[k] = f
	c.flightM.Unlock()
	defer c.land(k, f)

	t, expires, err := c.mint(k, now)
	if err == nil {
		c.cache.put(k, t, expires, now)
	}
	f.token, f.err = t.token, err
	return f.token, f.err
}

// errMintIncomplete is what waiters see if a mint never finished.
var errMintIncomplete = errors.New("cell token: mint did not complete")

// land ends flight f of k and releases its waiters.
func (c *CellTokens) land(k cellTokenKey, f *cellFlight) {
	c.flightM.Lock()
	delete(c.flights, k)
	c.flightM.Unlock()
	close(f.done)
}

// mint signs one token issued at now and returns it with its expiry.
func (c *CellTokens) mint(k cellTokenKey, now time.Time) (cellToken, time.Time, error) {
	iat := now.Truncate(time.Second)
	exp := iat.Add(c.ttl)
	claims := jwt.MapClaims{
		"sub": k.subject, c.roleClaim: k.role,
		"iat": iat.Unix(), "exp": exp.Unix(),
	}
	if c.issuer != "" {
		claims["iss"] = c.issuer
	}
	if c.audience != "" {
		claims["aud"] = c.audience
	}
	tok := jwt.NewWithClaims(c.method, claims)
	if c.kid != "" {
		tok.Header["kid"] = c.kid
	}
	s, err := tok.SignedString(c.key)
	if err != nil {
		return cellToken{}, time.Time{}, fmt.Errorf("cell token: signing for %q: %w", k.subject, err)
	}
	c.minted.Add(1)
	return cellToken{token: s, refreshAt: iat.Add(c.refreshIn)}, exp, nil
}
