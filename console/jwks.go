package console

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
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

// jwksCache keeps a provider's RSA signing keys by kid. A failed refresh
// keeps serving the keys it had.
type jwksCache struct {
	url     string
	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetched time.Time
}

func (c *jwksCache) key(ctx context.Context, client *http.Client, kid string, now time.Time) (*rsa.PublicKey, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, known := c.keys[kid]
	stale := now.Sub(c.fetched) > jwksTTL
	if known && !stale {
		return k, nil
	}
	if !stale && now.Sub(c.fetched) < jwksRefetchGap {
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
	keys, err := fetchRSAKeys(ctx, client, c.url)
	if err != nil {
		if known {
			return k, nil
		}
		return nil, err
	}
	c.keys, c.fetched = keys, now
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown key id %q", kid)
}

func fetchRSAKeys(ctx context.Context, client *http.Client, u string) (map[string]*rsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch signing keys: status %d", resp.StatusCode)
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid == "" {
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
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
	}
	if len(keys) == 0 {
		return nil, errors.New("fetch signing keys: no usable RSA key")
	}
	return keys, nil
}

// googleClaims are the id_token claims the gateway reads.
type googleClaims struct {
	jwt.RegisteredClaims
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified"`
	HostedDomain  string `json:"hd"`
	Nonce         string `json:"nonce"`
}

// verified reports email_verified as true or "true".
func (c *googleClaims) verified() bool {
	switch v := c.EmailVerified.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// verifyIDToken checks an id_token: RS256 with a key of the provider's
// set, issuer Google's, audience our client id, not expired.
func (c *jwksCache) verifyIDToken(ctx context.Context, client *http.Client, raw, clientID string, now time.Time) (*googleClaims, error) {
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256"}),
		jwt.WithAudience(clientID),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(time.Minute),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	var claims googleClaims
	_, err := parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return c.key(ctx, client, kid, now)
	})
	if err != nil {
		return nil, err
	}
	if claims.Issuer != "https://accounts.google.com" && claims.Issuer != "accounts.google.com" {
		return nil, fmt.Errorf("issuer %q is not Google", claims.Issuer)
	}
	return &claims, nil
}
