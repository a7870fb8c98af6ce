package fakebroker

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwtClockSkew is the exp tolerance of a broker with JWT_ENABLED (its
// JWT_CLOCK_SKEW default).
const jwtClockSkew = 30 * time.Second

// errNoBearer is a request without an "Authorization: Bearer" token.
var errNoBearer = errors.New("no bearer token")

// jwtAuth verifies request JWTs the way a broker running with JWT_ENABLED
// does: HS256 with a shared secret and/or EdDSA with a public key, exp
// required. A nil *jwtAuth means JWT authentication is off.
type jwtAuth struct {
	secret []byte
	pub    ed25519.PublicKey
	parser *jwt.Parser
}

// jwtIdentity is what a verified token says about its bearer.
type jwtIdentity struct {
	sub, role string
}

// newJWTAuth returns the verifier Options asks for, or nil.
func newJWTAuth(opts Options) *jwtAuth {
	var methods []string
	if len(opts.JWTSecret) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if len(opts.JWTPublicKey) > 0 {
		methods = append(methods, jwt.SigningMethodEdDSA.Alg())
	}
	if methods == nil {
		return nil
	}
	return &jwtAuth{
		secret: opts.JWTSecret,
		pub:    opts.JWTPublicKey,
		parser: jwt.NewParser(
			jwt.WithValidMethods(methods),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(jwtClockSkew),
		),
	}
}

// verify checks the request's bearer token. It returns errNoBearer when
// there is none.
func (a *jwtAuth) verify(r *http.Request) (jwtIdentity, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return jwtIdentity{}, errNoBearer
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(strings.TrimSpace(tok), claims, a.key); err != nil {
		return jwtIdentity{}, fmt.Errorf("fakebroker: jwt: %w", err)
	}
	sub, _ := claims["sub"].(string)
	role, _ := claims["role"].(string)
	return jwtIdentity{sub: sub, role: role}, nil
}

// key returns the verification key of the token's (already allowed) alg.
func (a *jwtAuth) key(t *jwt.Token) (any, error) {
	switch t.Method {
	case jwt.SigningMethodHS256:
		return a.secret, nil
	case jwt.SigningMethodEdDSA:
		return a.pub, nil
	}
	return nil, fmt.Errorf("unexpected alg %s", t.Method.Alg())
}

// writeJWTError answers 401 for a missing or a refused token.
func writeJWTError(w http.ResponseWriter, err error) {
	msg := "Invalid or expired token"
	if errors.Is(err, errNoBearer) {
		msg = "Authentication required"
	}
	writeJSON(w, http.StatusUnauthorized, obj{"error": msg})
}

// producerSubJSON is the producerSub a message reports: the verified sub of
// the request that pushed it, or null when JWT authentication was off.
func (m *message) producerSubJSON() any {
	if m.producerSub == "" {
		return nil
	}
	return m.producerSub
}
