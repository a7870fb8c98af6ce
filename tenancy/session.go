package tenancy

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queengate/queengate/internal/uuidtext"
)

// SessionAlg is the signing algorithm of gateway-minted session tokens.
type SessionAlg string

// The session algorithms.
const (
	// SessionEdDSA (Ed25519) is the production algorithm; it allows
	// verify-only hosts that hold just the public key.
	SessionEdDSA SessionAlg = "EdDSA"
	// SessionHS256 is a shared-secret algorithm meant for development.
	SessionHS256 SessionAlg = "HS256"
)

// DefaultSessionIssuer is the iss of session tokens when none is configured.
const DefaultSessionIssuer = "queen-proxy"

// DefaultSessionLeeway is the clock skew tolerated on exp.
const DefaultSessionLeeway = 60 * time.Second

// MinHS256SecretLen is the shortest HS256 secret accepted (RFC 7518 §3.2: a
// key at least as long as the hash output).
const MinHS256SecretLen = 32

// maxSessionTokenLen bounds the tokens Verify will parse; gateway-minted
// tokens are a few hundred bytes.
const maxSessionTokenLen = 8 << 10

// hsKeyID is the kid of HS256 session tokens.
const hsKeyID = "hs"

// ErrNoSessionKeys is returned by NewSessionKeys when no key material is
// configured at all. The gateway then runs API-key-only (logins answer 503).
var ErrNoSessionKeys = errors.New("no session signing or verification key configured")

// ErrInvalidSession wraps every reason Verify refuses a token. The gateway
// answers a generic 401 "invalid credential" and logs the wrapped reason.
var ErrInvalidSession = errors.New("invalid session token")

// ErrCannotMint is returned by Mint on a verify-only host.
var ErrCannotMint = errors.New("session keys are verify-only: no private key or secret to mint with")

// SessionKeysConfig is the key material and validation policy of session
// tokens.
type SessionKeysConfig struct {
	// Issuer is the iss minted and required exactly (default "queen-proxy").
	Issuer string
	// Audience, when set, is matched by the one-sided aud rule: a token
	// naming no audience is accepted; a token naming audiences must name
	// this one (case-insensitively). Tokens are minted without aud.
	Audience string
	// Ed25519PrivateKeyPEM is a PKCS#8 "PRIVATE KEY" PEM (v1 or v2). It
	// wins over HS256Secret; the public key is derived from it.
	Ed25519PrivateKeyPEM []byte
	// Ed25519PublicKeyPEM is an SPKI "PUBLIC KEY" PEM (or a PEM whose body is
	// the raw 32-byte key). Alone it makes a verify-only host; with the
	// private key it must be that key's public half.
	Ed25519PublicKeyPEM []byte
	// HS256Secret is the development shared secret, at least 32 bytes.
	// Used when no Ed25519 private key is given (even if a public key is).
	HS256Secret []byte
	// PreviousEd25519PublicKeysPEM are more Ed25519 public keys (PEM, as
	// Ed25519PublicKeyPEM) whose tokens still verify, picked by kid: the
	// previous signing key during a rotation, so that no session it signed
	// is cut short, or the next one before gateways start signing with it.
	// Only with EdDSA.
	PreviousEd25519PublicKeysPEM [][]byte
	// PreviousHS256Secrets are more HS256 secrets whose tokens still
	// verify, for the same purpose. Only with HS256.
	PreviousHS256Secrets [][]byte
	// Leeway is the clock skew tolerated on exp (default 60s; negative
	// means none).
	Leeway time.Duration
	// VerifyCacheSize bounds how many verified tokens are remembered so
	// that a token presented again skips the signature check until it
	// expires (default 10 000; negative disables the cache).
	VerifyCacheSize int
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// DefaultSessionVerifyCacheSize is the default SessionKeysConfig.VerifyCacheSize.
const DefaultSessionVerifyCacheSize = 10_000

// SessionKeys mints and verifies session tokens with one pinned algorithm.
// It is safe for concurrent use.
type SessionKeys struct {
	alg      SessionAlg
	issuer   string
	audience string
	now      func() time.Time
	kid      string

	signKey   any // ed25519.PrivateKey or []byte; nil on a verify-only host
	verifyKey any // ed25519.PublicKey or []byte
	// previousEd are the EdDSA keys that verify beside verifyKey, by kid;
	// previousHS the HS256 secrets (their tokens all carry kid "hs").
	previousEd map[string]ed25519.PublicKey
	previousHS [][]byte
	method     jwt.SigningMethod
	parser     *jwt.Parser
	jwks       []byte
	warnings   []string
	leeway     time.Duration
	verified   *ttlMap[string, SessionClaims] // nil when disabled
}

// NewSessionKeys loads the key material of cfg. The first configured
// option wins: an Ed25519 private key (EdDSA, mint and verify), an HS256
// secret (mint and verify), an Ed25519 public key alone (EdDSA, verify
// only). Nothing configured yields ErrNoSessionKeys; material that is
// configured but unusable is an error describing the problem.
func NewSessionKeys(cfg SessionKeysConfig) (*SessionKeys, error) {
	k := &SessionKeys{issuer: cfg.Issuer, audience: cfg.Audience, now: cfg.Now}
	if k.issuer == "" {
		k.issuer = DefaultSessionIssuer
	}
	if k.now == nil {
		k.now = time.Now
	}
	if err := k.loadKeys(cfg); err != nil {
		return nil, err
	}
	if err := k.loadPrevious(cfg); err != nil {
		return nil, err
	}
	k.leeway = cfg.Leeway
	if k.leeway == 0 {
		k.leeway = DefaultSessionLeeway
	}
	k.leeway = max(k.leeway, 0)
	k.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{string(k.alg)}),
		jwt.WithIssuer(k.issuer),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(k.leeway),
		jwt.WithTimeFunc(k.now),
		jwt.WithStrictDecoding(),
	)
	jwks, err := buildJWKS(k)
	if err != nil {
		return nil, err
	}
	k.jwks = jwks
	switch size := cfg.VerifyCacheSize; {
	case size == 0:
		k.verified = newEvictingTTLMap[string, SessionClaims](DefaultSessionVerifyCacheSize)
	case size > 0:
		k.verified = newEvictingTTLMap[string, SessionClaims](size)
	}
	return k, nil
}

// loadKeys applies the precedence rules and fills alg, keys, method and kid.
func (k *SessionKeys) loadKeys(cfg SessionKeysConfig) error {
	hasPriv := len(cfg.Ed25519PrivateKeyPEM) > 0
	hasPub := len(cfg.Ed25519PublicKeyPEM) > 0
	hasHS := len(cfg.HS256Secret) > 0
	switch {
	case hasPriv:
		if hasHS {
			k.warnings = append(k.warnings, "both an Ed25519 private key and an HS256 secret are configured; EdDSA is used and the secret is ignored")
		}
		return k.loadEd25519(cfg.Ed25519PrivateKeyPEM, cfg.Ed25519PublicKeyPEM)
	case hasHS:
		if hasPub {
			k.warnings = append(k.warnings, "an Ed25519 public key and an HS256 secret are configured without a private key; HS256 is used and the public key is ignored")
		}
		return k.loadHS256(cfg.HS256Secret)
	case hasPub:
		return k.loadEd25519(nil, cfg.Ed25519PublicKeyPEM)
	default:
		return ErrNoSessionKeys
	}
}

func (k *SessionKeys) loadHS256(secret []byte) error {
	if len(secret) < MinHS256SecretLen {
		return fmt.Errorf("session keys: HS256 secret is %d bytes, need at least %d", len(secret), MinHS256SecretLen)
	}
	key := append([]byte(nil), secret...)
	k.alg, k.method, k.kid = SessionHS256, jwt.SigningMethodHS256, hsKeyID
	k.signKey, k.verifyKey = key, key
	return nil
}

func (k *SessionKeys) loadEd25519(privPEM, pubPEM []byte) error {
	var pub ed25519.PublicKey
	if len(privPEM) > 0 {
		priv, err := ParseEd25519PrivateKeyPEM(privPEM)
		if err != nil {
			return fmt.Errorf("session keys: %w", err)
		}
		k.signKey = priv
		pub = priv.Public().(ed25519.PublicKey)
	}
	if len(pubPEM) > 0 {
		explicit, err := ParseEd25519PublicKeyPEM(pubPEM)
		if err != nil {
			return fmt.Errorf("session keys: %w", err)
		}
		if pub != nil && !pub.Equal(explicit) {
			return errors.New("session keys: the Ed25519 public key is not the public half of the private key (tokens minted here would not verify)")
		}
		pub = explicit
	}
	k.alg, k.method, k.verifyKey = SessionEdDSA, jwt.SigningMethodEdDSA, pub
	k.kid = Ed25519KeyID(pub)
	return nil
}

// loadPrevious loads the keys that verify beside the current one. They must
// be of the pinned algorithm (a token's alg is pinned, so a key of the other
// would verify nothing) and differ from the current key.
func (k *SessionKeys) loadPrevious(cfg SessionKeysConfig) error {
	if len(cfg.PreviousHS256Secrets) > 0 && k.alg != SessionHS256 {
		return fmt.Errorf("session keys: previous HS256 secrets are configured, but sessions are signed with %s; a previous key must be of the same algorithm", k.alg)
	}
	if len(cfg.PreviousEd25519PublicKeysPEM) > 0 && k.alg != SessionEdDSA {
		return fmt.Errorf("session keys: previous Ed25519 public keys are configured, but sessions are signed with %s; a previous key must be of the same algorithm", k.alg)
	}
	for i, secret := range cfg.PreviousHS256Secrets {
		if len(secret) < MinHS256SecretLen {
			return fmt.Errorf("session keys: previous HS256 secret %d is %d bytes, need at least %d", i+1, len(secret), MinHS256SecretLen)
		}
		if string(secret) == string(k.verifyKey.([]byte)) {
			return fmt.Errorf("session keys: previous HS256 secret %d is the current secret", i+1)
		}
		k.previousHS = append(k.previousHS, append([]byte(nil), secret...))
	}
	for i, data := range cfg.PreviousEd25519PublicKeysPEM {
		pub, err := ParseEd25519PublicKeyPEM(data)
		if err != nil {
			return fmt.Errorf("session keys: previous key %d: %w", i+1, err)
		}
		if pub.Equal(k.verifyKey) {
			return fmt.Errorf("session keys: previous key %d is the current key", i+1)
		}
		if k.previousEd == nil {
			k.previousEd = map[string]ed25519.PublicKey{}
		}
		k.previousEd[Ed25519KeyID(pub)] = pub
	}
	return nil
}

// ParseEd25519PrivateKeyPEM reads a PKCS#8 "PRIVATE KEY" PEM block holding
// an Ed25519 key (PKCS#8 v1 or v2).
func ParseEd25519PrivateKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	block, err := singlePEM(data, "PRIVATE KEY")
	if err != nil {
		return nil, fmt.Errorf("ed25519 private key: %w", err)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ed25519 private key: parsing PKCS#8: %w", err)
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ed25519 private key: PEM holds a %T, not an Ed25519 key", parsed)
	}
	return priv, nil
}

// ParseEd25519PublicKeyPEM reads a "PUBLIC KEY" PEM block holding an
// Ed25519 key, either as SPKI DER (44 bytes) or as the raw 32-byte key.
func ParseEd25519PublicKeyPEM(data []byte) (ed25519.PublicKey, error) {
	block, err := singlePEM(data, "PUBLIC KEY")
	if err != nil {
		return nil, fmt.Errorf("ed25519 public key: %w", err)
	}
	if len(block.Bytes) == ed25519.PublicKeySize {
		return ed25519.PublicKey(append([]byte(nil), block.Bytes...)), nil
	}
	parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ed25519 public key: parsing SPKI: %w", err)
	}
	pub, ok := parsed.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("ed25519 public key: PEM holds a %T, not an Ed25519 key", parsed)
	}
	return pub, nil
}

// singlePEM decodes the first PEM block of data and checks its type.
func singlePEM(data []byte, wantType string) (*pem.Block, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != wantType {
		return nil, fmt.Errorf("PEM block is %q, want %q", block.Type, wantType)
	}
	return block, nil
}

// Ed25519KeyID is the kid of an Ed25519 public key: the hex of the first
// 16 bytes of SHA-256 over the raw 32-byte key.
func Ed25519KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// CanMint reports whether the keys can mint tokens (false on a verify-only
// host).
func (k *SessionKeys) CanMint() bool { return k.signKey != nil }

// Algorithm returns the pinned algorithm.
func (k *SessionKeys) Algorithm() SessionAlg { return k.alg }

// KeyID returns the kid stamped on minted tokens ("hs" for HS256).
func (k *SessionKeys) KeyID() string { return k.kid }

// Warnings lists configuration oddities NewSessionKeys tolerated (for
// example an ignored secret); the caller logs them at start.
func (k *SessionKeys) Warnings() []string { return append([]string(nil), k.warnings...) }

// SessionClaims is what a verified session token says.
type SessionClaims struct {
	// UserID is the sub claim (the user's uuid).
	UserID string
	// SessionID is the sid claim, shared by every token minted from one
	// login session; revoking it revokes them all. A token without sid
	// (minted elsewhere) has SessionID = TokenID.
	SessionID string
	// TokenID is the mandatory jti claim.
	TokenID string
	// Role is admin, producer, consumer or viewer. Sessions carry "viewer"
	// as a placeholder; the real role comes from cluster_roles.
	Role string
	// Cluster is the optional cluster claim (a lower-case uuid), "" if absent.
	Cluster string
	// IssuedAt is iat (zero if absent); ExpiresAt is exp.
	IssuedAt, ExpiresAt time.Time
}

// sessionJWT is the wire form of the claims.
type sessionJWT struct {
	jwt.RegisteredClaims
	SessionID string `json:"sid,omitempty"`
	Role      string `json:"role"`
	Cluster   string `json:"cluster,omitempty"`
}

// Mint signs a session token for userID. sessionID groups the tokens of one
// login ("" starts a new session: sid = the fresh jti). role must be one of
// admin, producer, consumer, viewer; cluster is "" or a cluster uuid.
func (k *SessionKeys) Mint(userID, sessionID, role, cluster string, ttl time.Duration) (string, SessionClaims, error) {
	if !k.CanMint() {
		return "", SessionClaims{}, ErrCannotMint
	}
	if err := checkMintInput(userID, role, ttl); err != nil {
		return "", SessionClaims{}, fmt.Errorf("mint session: %w", err)
	}
	if cluster != "" {
		c, ok := canonicalUUID(cluster)
		if !ok {
			return "", SessionClaims{}, fmt.Errorf("mint session: cluster %q is not a uuid", cluster)
		}
		cluster = c
	}
	jti, err := newUUIDv4()
	if err != nil {
		return "", SessionClaims{}, fmt.Errorf("mint session: %w", err)
	}
	if sessionID == "" {
		sessionID = jti
	}
	now := k.now().Truncate(time.Second)
	claims := SessionClaims{
		UserID: userID, SessionID: sessionID, TokenID: jti, Role: role, Cluster: cluster,
		IssuedAt: now, ExpiresAt: now.Add(ttl).Truncate(time.Second),
	}
	tok := jwt.NewWithClaims(k.method, k.wireClaims(claims))
	tok.Header["kid"] = k.kid
	signed, err := tok.SignedString(k.signKey)
	if err != nil {
		return "", SessionClaims{}, fmt.Errorf("mint session: signing: %w", err)
	}
	return signed, claims, nil
}

func checkMintInput(userID, role string, ttl time.Duration) error {
	switch {
	case userID == "":
		return errors.New("empty user id")
	case !validSessionRole(role):
		return fmt.Errorf("role %q is not one of admin, producer, consumer, viewer", role)
	case ttl < time.Second:
		return fmt.Errorf("ttl %v is shorter than a second", ttl)
	}
	return nil
}

func (k *SessionKeys) wireClaims(c SessionClaims) *sessionJWT {
	return &sessionJWT{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   c.UserID,
			Issuer:    k.issuer,
			ID:        c.TokenID,
			IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
			ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
		},
		SessionID: c.SessionID,
		Role:      c.Role,
		Cluster:   c.Cluster,
	}
}

// Verify checks a session token: the pinned algorithm and key, iss exactly,
// exp (required, with leeway), nbf when present, jti and sub present, role
// one of the four, cluster (if any) a uuid, and the one-sided audience
// rule. Every failure wraps ErrInvalidSession. The deny-list (revoked jti
// or sid) is the caller's check.
//
// A token that verified is remembered (see VerifyCacheSize) and, presented
// again, is accepted without repeating the signature check until its exp
// plus leeway.
func (k *SessionKeys) Verify(token string) (SessionClaims, error) {
	if len(token) > maxSessionTokenLen {
		return SessionClaims{}, fmt.Errorf("%w: token is %d bytes, more than %d", ErrInvalidSession, len(token), maxSessionTokenLen)
	}
	if k.verified == nil {
		return k.verify(token)
	}
	now := k.now()
	if c, ok := k.verified.get(token, now); ok {
		return c, nil
	}
	c, err := k.verify(token)
	if err == nil {
		k.verified.put(strings.Clone(token), c, c.ExpiresAt.Add(k.leeway), now)
	}
	return c, err
}

// verify is Verify without the cache.
func (k *SessionKeys) verify(token string) (SessionClaims, error) {
	var wire sessionJWT
	if _, err := k.parser.ParseWithClaims(token, &wire, k.keyFunc); err != nil {
		return SessionClaims{}, fmt.Errorf("%w: %w", ErrInvalidSession, err)
	}
	claims, err := k.checkClaims(&wire)
	if err != nil {
		return SessionClaims{}, fmt.Errorf("%w: %w", ErrInvalidSession, err)
	}
	return claims, nil
}

// keyFunc hands the parser the verification key: for EdDSA a previous key
// whose kid the token names, else the current key; for HS256 the current
// secret and then the previous ones. The parser has already refused any
// other alg; the method check here is belt and braces.
func (k *SessionKeys) keyFunc(t *jwt.Token) (any, error) {
	if t.Method != k.method {
		return nil, fmt.Errorf("algorithm %v is not the pinned %s", t.Method.Alg(), k.alg)
	}
	if len(k.previousHS) > 0 {
		set := jwt.VerificationKeySet{Keys: []jwt.VerificationKey{k.verifyKey}}
		for _, s := range k.previousHS {
			set.Keys = append(set.Keys, s)
		}
		return set, nil
	}
	if kid, _ := t.Header["kid"].(string); kid != "" {
		if pub, ok := k.previousEd[kid]; ok {
			return pub, nil
		}
	}
	return k.verifyKey, nil
}

// checkClaims applies the claim rules the parser does not.
func (k *SessionKeys) checkClaims(w *sessionJWT) (SessionClaims, error) {
	switch {
	case w.ID == "":
		return SessionClaims{}, errors.New("missing jti")
	case w.Subject == "":
		return SessionClaims{}, errors.New("missing sub")
	case !validSessionRole(w.Role):
		return SessionClaims{}, fmt.Errorf("role %q is not one of admin, producer, consumer, viewer", w.Role)
	case !audienceAccepted(w.Audience, k.audience):
		return SessionClaims{}, fmt.Errorf("audience %q does not include %q", []string(w.Audience), k.audience)
	}
	c := SessionClaims{
		UserID: w.Subject, SessionID: w.SessionID, TokenID: w.ID, Role: w.Role,
		ExpiresAt: w.ExpiresAt.Time,
	}
	if c.SessionID == "" {
		c.SessionID = c.TokenID
	}
	if w.IssuedAt != nil {
		c.IssuedAt = w.IssuedAt.Time
	}
	if w.Cluster != "" {
		cl, ok := canonicalUUID(w.Cluster)
		if !ok {
			return SessionClaims{}, fmt.Errorf("cluster claim %q is not a uuid", w.Cluster)
		}
		c.Cluster = cl
	}
	return c, nil
}

// audienceAccepted is the one-sided audience rule: no configured audience,
// or a token naming no (non-empty) audience, is accepted; otherwise one of
// the token's audiences must equal ours, case-insensitively.
func audienceAccepted(tokenAud []string, ours string) bool {
	if ours == "" {
		return true
	}
	named := false
	for _, a := range tokenAud {
		if a == "" {
			continue
		}
		if strings.EqualFold(a, ours) {
			return true
		}
		named = true
	}
	return !named
}

func validSessionRole(r string) bool {
	switch r {
	case "admin", "producer", "consumer", "viewer":
		return true
	}
	return false
}

// canonicalUUID accepts a uuid in its 8-4-4-4-12 hex form, any case, and
// returns it in lower case.
func canonicalUUID(s string) (string, bool) {
	if !uuidtext.Valid(s) {
		return "", false
	}
	return strings.ToLower(s), true
}

// newUUIDv4 returns a random (version 4) uuid in its text form.
func newUUIDv4() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:]), nil
}

// JWKS returns the JSON Web Key Set served at /.well-known/jwks.json: the
// one Ed25519 public key for EdDSA, an empty set for HS256 (a shared secret
// is never published).
func (k *SessionKeys) JWKS() []byte { return append([]byte(nil), k.jwks...) }

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func buildJWKS(k *SessionKeys) ([]byte, error) {
	keys := []jwk{}
	if pub, ok := k.verifyKey.(ed25519.PublicKey); ok {
		keys = append(keys, jwk{
			Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub),
			Kid: k.kid, Alg: string(SessionEdDSA), Use: "sig",
		})
	}
	// The keys that still verify are published too (in kid order, so the
	// set is stable), for verifiers that read the set rather than a file.
	kids := make([]string, 0, len(k.previousEd))
	for kid := range k.previousEd {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	for _, kid := range kids {
		keys = append(keys, jwk{
			Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k.previousEd[kid]),
			Kid: kid, Alg: string(SessionEdDSA), Use: "sig",
		})
	}
	data, err := json.Marshal(struct {
		Keys []jwk `json:"keys"`
	}{keys})
	if err != nil {
		return nil, fmt.Errorf("session keys: encoding JWKS: %w", err)
	}
	return data, nil
}
