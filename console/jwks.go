package console

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksTTL is how long fetched signing keys are used before asking again.
const jwksTTL = time.Hour

// jwksRefetchGap is the least time between fetches forced by an unknown
// kid, so tokens with made-up kids cannot make the gateway hammer the
// provider.
const jwksRefetchGap = 10 * time.Second

// maxProviderDocument caps what the gateway reads of a provider's key set
// or discovery document.
const maxProviderDocument = 1 << 20

// idTokenAlgs are the signature algorithms an id_token may use: asymmetric
// only, so a token can never be "signed" with a key the gateway publishes
// or with none.
var idTokenAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}

// signingKey is one key of a provider's set, with the algorithm the set
// pins it to ("" when the set names none).
type signingKey struct {
	key crypto.PublicKey
	alg string
}

// jwksCache keeps a provider's signing keys by kid. A failed refresh keeps
// serving the keys it had.
type jwksCache struct {
	url     string
	mu      sync.Mutex
	keys    map[string]signingKey
	fetched time.Time
}

func (c *jwksCache) key(ctx context.Context, client *http.Client, kid string, now time.Time) (signingKey, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, known := c.keys[kid]
	stale := now.Sub(c.fetched) > jwksTTL
	if known && !stale {
		return k, nil
	}
	if !stale && now.Sub(c.fetched) < jwksRefetchGap {
		return signingKey{}, fmt.Errorf("unknown key id %q (the key set was fetched less than %s ago)", kid, jwksRefetchGap)
	}
	keys, err := fetchKeys(ctx, client, c.url)
	if err != nil {
		if known {
			return k, nil
		}
		return signingKey{}, err
	}
	c.keys, c.fetched = keys, now
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return signingKey{}, fmt.Errorf("unknown key id %q", kid)
}

// providerGet reads a provider document (a key set, a discovery
// document): status 200, at most maxProviderDocument bytes.
func providerGet(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderDocument+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxProviderDocument {
		return nil, fmt.Errorf("larger than %d bytes", maxProviderDocument)
	}
	return body, nil
}

func fetchKeys(ctx context.Context, client *http.Client, u string) (map[string]signingKey, error) {
	body, err := providerGet(ctx, client, u)
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	return keys, nil
}

// parseJWKS reads the signature keys of a JSON Web Key Set: RSA keys of
// at least 2048 bits and EC keys on P-256, P-384 or P-521, each with a
// kid. Keys for encryption, of other types, or malformed are left out; a
// set with none left is an error.
func parseJWKS(body []byte) (map[string]signingKey, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	keys := map[string]signingKey{}
	for _, k := range set.Keys {
		if k.Kid == "" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && !slices.Contains(idTokenAlgs, k.Alg)) {
			continue
		}
		var pub crypto.PublicKey
		switch k.Kty {
		case "RSA":
			if k.Alg != "" && !strings.HasPrefix(k.Alg, "RS") && !strings.HasPrefix(k.Alg, "PS") {
				continue
			}
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 || len(n) < 256 {
				continue
			}
			exp := 0
			for _, b := range e {
				exp = exp<<8 | int(b)
			}
			modulus := new(big.Int).SetBytes(n)
			if exp < 3 || exp%2 == 0 || modulus.BitLen() < 2048 {
				continue
			}
			pub = &rsa.PublicKey{N: modulus, E: exp}
		case "EC":
			curve, alg := ecCurve(k.Crv)
			if curve == nil || (k.Alg != "" && k.Alg != alg) {
				continue
			}
			size := (curve.Params().BitSize + 7) / 8
			x, err1 := base64.RawURLEncoding.DecodeString(k.X)
			y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != size || len(y) != size {
				continue
			}
			// ParseUncompressedPublicKey refuses a point not on the curve.
			ec, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			pub = ec
		default:
			continue
		}
		keys[k.Kid] = signingKey{key: pub, alg: k.Alg}
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable signing key")
	}
	return keys, nil
}

// ecCurve is the curve a JWK crv names, with the one algorithm it signs.
func ecCurve(crv string) (elliptic.Curve, string) {
	switch crv {
	case "P-256":
		return elliptic.P256(), "ES256"
	case "P-384":
		return elliptic.P384(), "ES384"
	case "P-521":
		return elliptic.P521(), "ES512"
	}
	return nil, ""
}

// idClaims are the id_token claims the gateway reads.
type idClaims struct {
	jwt.RegisteredClaims
	Email           string `json:"email"`
	EmailVerified   any    `json:"email_verified"`
	HostedDomain    string `json:"hd"`
	Nonce           string `json:"nonce"`
	AuthorizedParty string `json:"azp"`
	// raw is the payload, for claims named by configuration.
	raw map[string]json.RawMessage
}

// verified reports email_verified as true or "true".
func (c *idClaims) verified() bool {
	switch v := c.EmailVerified.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// saysUnverified reports whether the token states the address is not
// verified (as opposed to not saying).
func (c *idClaims) saysUnverified() bool {
	return c.EmailVerified != nil && !c.verified()
}

// idTokenRules are what an id_token must satisfy besides its signature.
type idTokenRules struct {
	issuers  []string // any one of them, exactly
	audience string   // the client id
	algs     []string // a subset of idTokenAlgs
}

// verifyIDToken checks an id_token: signed with a key of the provider's
// set in one of the allowed algorithms (and the one the key is pinned to),
// issued by the provider, for our client id (and, when it names an
// authorized party, to us), not expired.
func (c *jwksCache) verifyIDToken(ctx context.Context, client *http.Client, raw string, rules idTokenRules, now time.Time) (*idClaims, error) {
	parser := jwt.NewParser(
		jwt.WithValidMethods(rules.algs),
		jwt.WithAudience(rules.audience),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(time.Minute),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	var claims idClaims
	_, err := parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		k, err := c.key(ctx, client, kid, now)
		if err != nil {
			return nil, err
		}
		if k.alg != "" && k.alg != t.Method.Alg() {
			return nil, fmt.Errorf("key %q is for %s, the token says %s", kid, k.alg, t.Method.Alg())
		}
		return k.key, nil
	})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(rules.issuers, claims.Issuer) {
		return nil, fmt.Errorf("issuer %q is not the provider's", claims.Issuer)
	}
	if (len(claims.Audience) > 1 || claims.AuthorizedParty != "") && claims.AuthorizedParty != rules.audience {
		return nil, fmt.Errorf("authorized party %q is not this client", claims.AuthorizedParty)
	}
	// The signature verified, so the payload segment is well formed.
	parts := strings.Split(raw, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(payload, &claims.raw) != nil {
		return nil, errors.New("undecodable payload")
	}
	return &claims, nil
}

// stringsClaim reads a claim holding a string or an array of strings (as
// groups and roles claims do). The name is looked up as is, then as a
// dotted path into nested objects ("realm_access.roles"). Anything else
// reads as none.
func (c *idClaims) stringsClaim(name string) []string {
	v, ok := c.raw[name]
	if !ok {
		obj := c.raw
		path := strings.Split(name, ".")
		for i, part := range path {
			v, ok = obj[part]
			if !ok {
				return nil
			}
			if i < len(path)-1 {
				obj = nil
				if json.Unmarshal(v, &obj) != nil {
					return nil
				}
			}
		}
	}
	var list []string
	if json.Unmarshal(v, &list) == nil {
		return list
	}
	var one string
	if json.Unmarshal(v, &one) == nil && one != "" {
		return []string{one}
	}
	return nil
}
