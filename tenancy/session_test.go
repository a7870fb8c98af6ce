package tenancy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var jwtEpoch = time.Unix(1_800_000_000, 0)

// sessionClock returns a settable clock for SessionKeysConfig.Now.
func sessionClock(t0 time.Time) (now func() time.Time, set func(time.Time)) {
	cur := t0
	return func() time.Time { return cur }, func(t time.Time) { cur = t }
}

func newTestEd25519(t testing.TB) (ed25519.PrivateKey, []byte, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return priv,
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
}

var testHSSecret = []byte("0123456789abcdef0123456789abcdef")

func mustSessionKeys(t testing.TB, cfg SessionKeysConfig) *SessionKeys {
	t.Helper()
	k, err := NewSessionKeys(cfg)
	if err != nil {
		t.Fatalf("NewSessionKeys: %v", err)
	}
	return k
}

func TestNewSessionKeysPrecedence(t *testing.T) {
	_, privPEM, pubPEM := newTestEd25519(t)

	k := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, HS256Secret: testHSSecret})
	if k.Algorithm() != SessionEdDSA || !k.CanMint() || len(k.Warnings()) != 1 {
		t.Fatalf("private + secret: alg %s, mint %v, warnings %q", k.Algorithm(), k.CanMint(), k.Warnings())
	}
	k = mustSessionKeys(t, SessionKeysConfig{Ed25519PublicKeyPEM: pubPEM, HS256Secret: testHSSecret})
	if k.Algorithm() != SessionHS256 || !k.CanMint() || len(k.Warnings()) != 1 || k.KeyID() != "hs" {
		t.Fatalf("public + secret: alg %s, mint %v, warnings %q", k.Algorithm(), k.CanMint(), k.Warnings())
	}
	k = mustSessionKeys(t, SessionKeysConfig{Ed25519PublicKeyPEM: pubPEM})
	if k.Algorithm() != SessionEdDSA || k.CanMint() || len(k.Warnings()) != 0 {
		t.Fatalf("public only: alg %s, mint %v", k.Algorithm(), k.CanMint())
	}
	k = mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Ed25519PublicKeyPEM: pubPEM})
	if k.Algorithm() != SessionEdDSA || !k.CanMint() || len(k.Warnings()) != 0 {
		t.Fatalf("private + matching public: alg %s, mint %v", k.Algorithm(), k.CanMint())
	}
	if _, err := NewSessionKeys(SessionKeysConfig{}); !errors.Is(err, ErrNoSessionKeys) {
		t.Fatalf("nothing configured: %v", err)
	}
}

func TestNewSessionKeysRejectsUnusableMaterial(t *testing.T) {
	_, privPEM, _ := newTestEd25519(t)
	_, _, otherPubPEM := newTestEd25519(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	cases := map[string]struct {
		cfg  SessionKeysConfig
		want string
	}{
		"short secret":      {SessionKeysConfig{HS256Secret: []byte("short")}, "at least 32"},
		"garbage private":   {SessionKeysConfig{Ed25519PrivateKeyPEM: []byte("not pem")}, "no PEM block"},
		"public as private": {SessionKeysConfig{Ed25519PrivateKeyPEM: otherPubPEM}, `"PUBLIC KEY", want "PRIVATE KEY"`},
		"ec private":        {SessionKeysConfig{Ed25519PrivateKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})}, "not an Ed25519 key"},
		"ec public":         {SessionKeysConfig{Ed25519PublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})}, "not an Ed25519 key"},
		"bad der":           {SessionKeysConfig{Ed25519PrivateKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})}, "PKCS#8"},
		"bad public":        {SessionKeysConfig{Ed25519PublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}})}, "SPKI"},
		"mismatched public": {SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Ed25519PublicKeyPEM: otherPubPEM}, "not the public half"},
		// A broken private key is fatal even when a usable secret is present:
		// the operator asked for EdDSA.
		"broken private with secret": {SessionKeysConfig{Ed25519PrivateKeyPEM: []byte("x"), HS256Secret: testHSSecret}, "no PEM block"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k, err := NewSessionKeys(tc.cfg)
			if err == nil || k != nil {
				t.Fatalf("accepted: %v", k)
			}
			if errors.Is(err, ErrNoSessionKeys) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestSessionParseEd25519KeyForms(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	// PKCS#8 v2 (RFC 5958) carries the public key after the private one.
	type pkcs8v2 struct {
		Version    int
		Algo       pkix.AlgorithmIdentifier
		PrivateKey []byte
		PublicKey  asn1.BitString `asn1:"optional,tag:1"`
	}
	inner, _ := asn1.Marshal(priv.Seed())
	der, err := asn1.Marshal(pkcs8v2{
		Version:    1,
		Algo:       pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 3, 101, 112}},
		PrivateKey: inner,
		PublicKey:  asn1.BitString{Bytes: pub, BitLength: 8 * len(pub)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseEd25519PrivateKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil || !got.Equal(priv) {
		t.Fatalf("PKCS#8 v2: %v", err)
	}
	raw, err := ParseEd25519PublicKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	if err != nil || !raw.Equal(pub) {
		t.Fatalf("raw 32-byte public key: %v", err)
	}
}

func TestSessionMintVerifyRoundTrip(t *testing.T) {
	_, privPEM, _ := newTestEd25519(t)
	for _, cfg := range []SessionKeysConfig{
		{Ed25519PrivateKeyPEM: privPEM},
		{HS256Secret: testHSSecret},
	} {
		now, _ := sessionClock(jwtEpoch.Add(500 * time.Millisecond))
		cfg.Now = now
		k := mustSessionKeys(t, cfg)
		t.Run(string(k.Algorithm()), func(t *testing.T) {
			tok, minted, err := k.Mint("user-1", "", "viewer", "", 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(minted.TokenID) {
				t.Fatalf("jti %q is not a v4 uuid", minted.TokenID)
			}
			if minted.SessionID != minted.TokenID {
				t.Fatalf("new session: sid %q, jti %q", minted.SessionID, minted.TokenID)
			}
			if !minted.IssuedAt.Equal(jwtEpoch) || !minted.ExpiresAt.Equal(jwtEpoch.Add(24*time.Hour)) {
				t.Fatalf("times %v %v", minted.IssuedAt, minted.ExpiresAt)
			}
			got, err := k.Verify(tok)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSessionClaims(got, minted) {
				t.Fatalf("verified %+v, minted %+v", got, minted)
			}

			// A second token of the same login shares the sid.
			cluster := "0A1B2C3D-0000-4000-8000-00000000000F"
			tok2, minted2, err := k.Mint("user-1", minted.SessionID, "admin", cluster, 15*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got2, err := k.Verify(tok2)
			if err != nil {
				t.Fatal(err)
			}
			if got2.SessionID != minted.SessionID || got2.TokenID == minted.TokenID || got2.Role != "admin" ||
				got2.Cluster != strings.ToLower(cluster) || !sameSessionClaims(got2, minted2) {
				t.Fatalf("second token %+v", got2)
			}

			hdr := jwtSegment(t, tok, 0)
			if hdr["alg"] != string(k.Algorithm()) || hdr["kid"] != k.KeyID() {
				t.Fatalf("header %v", hdr)
			}
			body := jwtSegment(t, tok, 1)
			for _, c := range []string{"sub", "iss", "iat", "exp", "jti", "sid", "role"} {
				if _, ok := body[c]; !ok {
					t.Errorf("claim %s missing from %v", c, body)
				}
			}
			for _, c := range []string{"aud", "cluster", "nbf"} {
				if _, ok := body[c]; ok {
					t.Errorf("claim %s minted: %v", c, body)
				}
			}
			if body["iss"] != "queen-proxy" {
				t.Errorf("iss %v", body["iss"])
			}
		})
	}
}

func sameSessionClaims(a, b SessionClaims) bool {
	return a.UserID == b.UserID && a.SessionID == b.SessionID && a.TokenID == b.TokenID &&
		a.Role == b.Role && a.Cluster == b.Cluster && a.IssuedAt.Equal(b.IssuedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func jwtSegment(t *testing.T, tok string, i int) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[i])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSessionMintRefusesBadInput(t *testing.T) {
	k := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret})
	cases := []struct {
		user, role, cluster string
		ttl                 time.Duration
	}{
		{"", "viewer", "", time.Hour},
		{"u", "owner", "", time.Hour},
		{"u", "Viewer", "", time.Hour},
		{"u", "viewer", "not-a-uuid", time.Hour},
		{"u", "viewer", "", 0},
		{"u", "viewer", "", -time.Hour},
	}
	for _, c := range cases {
		if tok, _, err := k.Mint(c.user, "", c.role, c.cluster, c.ttl); err == nil {
			t.Errorf("%+v minted %q", c, tok)
		}
	}
	_, _, pubPEM := newTestEd25519(t)
	vo := mustSessionKeys(t, SessionKeysConfig{Ed25519PublicKeyPEM: pubPEM})
	if _, _, err := vo.Mint("u", "", "viewer", "", time.Hour); !errors.Is(err, ErrCannotMint) {
		t.Fatalf("verify-only mint: %v", err)
	}
}

func TestSessionVerifyOnlyHostAcceptsMinterTokens(t *testing.T) {
	_, privPEM, pubPEM := newTestEd25519(t)
	minter := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Audience: "gw.example"})
	verifier := mustSessionKeys(t, SessionKeysConfig{Ed25519PublicKeyPEM: pubPEM, Audience: "cell.example"})
	tok, minted, err := minter.Mint("u", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := verifier.Verify(tok)
	if err != nil || !sameSessionClaims(got, minted) {
		t.Fatalf("verify-only host: %v", err)
	}
	if minter.KeyID() != verifier.KeyID() {
		t.Fatalf("kid differs: %s vs %s", minter.KeyID(), verifier.KeyID())
	}
}

// forge signs arbitrary claims with an arbitrary method and key.
func forgeJWT(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func goodSessionClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"sub": "user-1", "iss": "queen-proxy", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"jti": "11111111-1111-4111-8111-111111111111", "role": "viewer",
	}
}

func withClaims(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func TestSessionVerifyRefusals(t *testing.T) {
	edPriv, privPEM, _ := newTestEd25519(t)
	otherPriv, _, _ := newTestEd25519(t)
	now, _ := sessionClock(jwtEpoch)
	ed := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Now: now, Audience: "Acme.Example"})
	hs := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, Now: now})
	good := goodSessionClaims(jwtEpoch)
	edPub := edPriv.Public().(ed25519.PublicKey)

	cases := []struct {
		name  string
		keys  *SessionKeys
		token string
	}{
		{"HS256 token on an EdDSA host", ed, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, good)},
		{"HS256 keyed with the public key (alg confusion)", ed, forgeJWT(t, jwt.SigningMethodHS256, []byte(edPub), good)},
		{"EdDSA token on an HS256 host", hs, forgeJWT(t, jwt.SigningMethodEdDSA, edPriv, good)},
		{"alg none", hs, forgeJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good)},
		{"HS384 with the right secret", hs, forgeJWT(t, jwt.SigningMethodHS384, testHSSecret, good)},
		{"other Ed25519 key", ed, forgeJWT(t, jwt.SigningMethodEdDSA, otherPriv, good)},
		{"other secret", hs, forgeJWT(t, jwt.SigningMethodHS256, []byte("ffffffffffffffffffffffffffffffff"), good)},
		{"wrong issuer", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "iss", "queen-proxy2"))},
		{"issuer differs in case", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "iss", "Queen-Proxy"))},
		{"missing issuer", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "iss", nil))},
		{"missing exp", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "exp", nil))},
		{"expired beyond leeway", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "exp", jwtEpoch.Add(-61*time.Second).Unix()))},
		{"exp not a number", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "exp", "tomorrow"))},
		{"not yet valid", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "nbf", jwtEpoch.Add(time.Hour).Unix()))},
		{"missing jti", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "jti", nil))},
		{"empty jti", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "jti", ""))},
		{"missing sub", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "sub", nil))},
		{"missing role", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "role", nil))},
		{"unknown role", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "role", "owner"))},
		{"role in capitals", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "role", "Admin"))},
		{"role as array", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "role", []string{"admin"}))},
		{"cluster not a uuid", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "cluster", "acme"))},
		{"cluster as number", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "cluster", 7))},
		{"foreign audience", ed, forgeJWT(t, jwt.SigningMethodEdDSA, edPriv, withClaims(good, "aud", "other.example"))},
		{"foreign audience list", ed, forgeJWT(t, jwt.SigningMethodEdDSA, edPriv, withClaims(good, "aud", []string{"", "a", "b"}))},
		{"audience as number", ed, forgeJWT(t, jwt.SigningMethodEdDSA, edPriv, withClaims(good, "aud", 5))},
		{"empty string", hs, ""},
		{"garbage", hs, "not a token"},
		{"two segments", hs, "a.b"},
		{"four segments", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, good) + ".x"},
		{"oversize", hs, forgeJWT(t, jwt.SigningMethodHS256, testHSSecret, withClaims(good, "pad", strings.Repeat("x", 9000)))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.keys.Verify(tc.token)
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if !errors.Is(err, ErrInvalidSession) {
				t.Fatalf("error %v does not wrap ErrInvalidSession", err)
			}
			if got != (SessionClaims{}) {
				t.Fatalf("claims returned with an error: %+v", got)
			}
		})
	}
}

func TestSessionVerifyTamperedToken(t *testing.T) {
	k := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret})
	tok, _, err := k.Mint("u", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	body, _ := base64.RawURLEncoding.DecodeString(parts[1])
	elevated := strings.Replace(string(body), `"role":"viewer"`, `"role":"admin"`, 1)
	if elevated == string(body) {
		t.Fatalf("test setup: role not found in %s", body)
	}
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(elevated)) + "." + parts[2]
	if _, err := k.Verify(forged); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("tampered payload: %v", err)
	}
	sig := []byte(parts[2])
	sig[3] ^= 1
	if _, err := k.Verify(parts[0] + "." + parts[1] + "." + string(sig)); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("tampered signature: %v", err)
	}
}

func TestSessionVerifyAccepts(t *testing.T) {
	edPriv, privPEM, _ := newTestEd25519(t)
	now, _ := sessionClock(jwtEpoch)
	ed := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Now: now, Audience: "Acme.Example"})
	noAud := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM, Now: now})
	good := goodSessionClaims(jwtEpoch)
	cases := []struct {
		name   string
		keys   *SessionKeys
		claims jwt.MapClaims
	}{
		{"no aud claim", ed, good},
		{"empty aud string", ed, withClaims(good, "aud", "")},
		{"empty aud array", ed, withClaims(good, "aud", []string{})},
		{"aud matches case-insensitively", ed, withClaims(good, "aud", "acme.example")},
		{"aud list contains ours", ed, withClaims(good, "aud", []string{"x", "ACME.EXAMPLE"})},
		{"any aud when none configured", noAud, withClaims(good, "aud", "whatever")},
		{"expired within leeway", ed, withClaims(good, "exp", jwtEpoch.Add(-59*time.Second).Unix())},
		{"no iat", ed, withClaims(good, "iat", nil)},
		{"iat in the future is not checked", ed, withClaims(good, "iat", jwtEpoch.Add(time.Hour).Unix())},
		{"non-uuid jti from a foreign minter", ed, withClaims(good, "jti", "abc")},
		{"unknown extra claims", ed, withClaims(good, "email", "a@b.c")},
		{"all roles: admin", ed, withClaims(good, "role", "admin")},
		{"all roles: producer", ed, withClaims(good, "role", "producer")},
		{"all roles: consumer", ed, withClaims(good, "role", "consumer")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.keys.Verify(forgeJWT(t, jwt.SigningMethodEdDSA, edPriv, tc.claims))
			if err != nil {
				t.Fatal(err)
			}
			if c.SessionID != c.TokenID {
				t.Fatalf("token without sid: SessionID %q, TokenID %q", c.SessionID, c.TokenID)
			}
		})
	}
}

func TestSessionVerifyLeeway(t *testing.T) {
	now, set := sessionClock(jwtEpoch)
	k := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, Now: now, Leeway: 5 * time.Second})
	tok, _, err := k.Mint("u", "", "viewer", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	set(jwtEpoch.Add(time.Minute + 4*time.Second))
	if _, err := k.Verify(tok); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	set(jwtEpoch.Add(time.Minute + 6*time.Second))
	if _, err := k.Verify(tok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("beyond leeway: %v", err)
	}
	strict := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, Now: now, Leeway: -1})
	set(jwtEpoch.Add(time.Minute))
	if _, err := strict.Verify(tok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("no leeway, at exp: %v", err)
	}
}

func TestSessionVerifyCache(t *testing.T) {
	now, set := sessionClock(jwtEpoch)
	k := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, Now: now, VerifyCacheSize: 2})
	var toks []string
	for range 3 {
		tok, _, err := k.Mint("u", "", "viewer", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	for round := range 2 {
		for _, tok := range toks {
			if _, err := k.Verify(tok); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if n := k.verified.len(); n > 2 {
			t.Fatalf("cache holds %d, bound 2", n)
		}
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = k.Verify(toks[2]) }); a != 0 {
		t.Fatalf("cache hit allocates %.0f times", a)
	}
	// A remembered token still dies at exp + leeway.
	set(jwtEpoch.Add(time.Minute + DefaultSessionLeeway))
	if _, err := k.Verify(toks[2]); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("cached token outlived its exp: %v", err)
	}
	off := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, VerifyCacheSize: -1})
	if off.verified != nil {
		t.Fatal("negative size left the cache on")
	}
	if _, err := off.Verify(toks[0]); err != nil {
		t.Fatal(err)
	}
}

func TestSessionVerifyIssuer(t *testing.T) {
	k := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret, Issuer: "gw-eu1"})
	tok, _, err := k.Mint("u", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(tok); err != nil {
		t.Fatal(err)
	}
	other := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret})
	if _, err := other.Verify(tok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("default issuer accepted a gw-eu1 token: %v", err)
	}
}

func TestSessionJWKS(t *testing.T) {
	priv, privPEM, _ := newTestEd25519(t)
	k := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: privPEM})
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(k.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 {
		t.Fatalf("keys: %v", set.Keys)
	}
	key := set.Keys[0]
	x, err := base64.RawURLEncoding.DecodeString(key["x"])
	if err != nil || !ed25519.PublicKey(x).Equal(priv.Public()) {
		t.Fatalf("x %q does not decode to the public key: %v", key["x"], err)
	}
	want := map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": Ed25519KeyID(x), "x": key["x"]}
	if len(key) != len(want) {
		t.Fatalf("jwk %v", key)
	}
	for f, v := range want {
		if key[f] != v {
			t.Fatalf("jwk %s = %q, want %q", f, key[f], v)
		}
	}
	if len(key["kid"]) != 32 {
		t.Fatalf("kid %q is not 16 bytes of hex", key["kid"])
	}
	// The returned slice is a copy.
	j := k.JWKS()
	j[0] = 'X'
	if k.JWKS()[0] != '{' {
		t.Fatal("JWKS returned shared memory")
	}
	hs := mustSessionKeys(t, SessionKeysConfig{HS256Secret: testHSSecret})
	if got := string(hs.JWKS()); got != `{"keys":[]}` {
		t.Fatalf("HS256 JWKS %s", got)
	}
}

func TestSessionEd25519KeyIDKnownValue(t *testing.T) {
	// sha256 of 32 zero bytes is 66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925.
	if got := Ed25519KeyID(make(ed25519.PublicKey, 32)); got != "66687aadf862bd776c8fc18b8e9f8e20" {
		t.Fatalf("kid %s", got)
	}
}

func TestSessionNewUUIDv4(t *testing.T) {
	seen := map[string]bool{}
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for range 1000 {
		u, err := newUUIDv4()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(u) || seen[u] {
			t.Fatalf("bad or repeated uuid %q", u)
		}
		seen[u] = true
	}
}

func BenchmarkVerifySession(b *testing.B) {
	_, privPEM, _ := newTestEd25519(b)
	for _, cfg := range []SessionKeysConfig{
		{Ed25519PrivateKeyPEM: privPEM},
		{HS256Secret: testHSSecret},
	} {
		for _, cached := range []bool{false, true} {
			cfg.VerifyCacheSize = -1
			name := string(cfg.alg())
			if cached {
				cfg.VerifyCacheSize = 0
				name += "/cached"
			}
			k := mustSessionKeys(b, cfg)
			tok, _, err := k.Mint("7b0c6f1e-2d7c-4a57-9a0e-5f3f9b1f0d11", "", "viewer", "", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := k.Verify(tok); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// alg names the algorithm a test configuration selects.
func (c SessionKeysConfig) alg() SessionAlg {
	if len(c.Ed25519PrivateKeyPEM) > 0 {
		return SessionEdDSA
	}
	return SessionHS256
}

func BenchmarkMintSession(b *testing.B) {
	_, privPEM, _ := newTestEd25519(b)
	for _, cfg := range []SessionKeysConfig{
		{Ed25519PrivateKeyPEM: privPEM},
		{HS256Secret: testHSSecret},
	} {
		k := mustSessionKeys(b, cfg)
		b.Run(string(k.Algorithm()), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := k.Mint("u", "", "viewer", "", time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fuzzSessionAudience is the audience of the FuzzVerifySession keys.
const fuzzSessionAudience = "acme.example"

// FuzzVerifySession feeds Verify both raw strings and tokens it signs itself
// from fuzzed header and payload JSON (mode odd), so that the claim checks
// behind the signature are explored too. Whatever Verify accepts must obey
// every rule, checked against an independent decoding.
func FuzzVerifySession(f *testing.F) {
	now, _ := sessionClock(jwtEpoch)
	k := mustSessionKeys(f, SessionKeysConfig{HS256Secret: testHSSecret, Audience: fuzzSessionAudience, Now: now})
	tok, _, err := k.Mint("user-1", "sid-1", "viewer", "", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	hdr := []byte(`{"alg":"HS256","typ":"JWT"}`)
	body := []byte(`{"sub":"u","iss":"queen-proxy","exp":1800003600,"jti":"j","role":"admin","aud":["x","ACME.example"],"cluster":"0a1b2c3d-0000-4000-8000-00000000000f"}`)
	f.Add(tok, hdr, body, uint8(0))
	f.Add("", hdr, body, uint8(1))
	f.Add("", []byte(`{"alg":"none"}`), body, uint8(1))
	f.Add("", hdr, []byte(`{"sub":"u","iss":"queen-proxy","exp":"1800003600","jti":"j","role":"viewer","nbf":1}`), uint8(1))
	f.Fuzz(func(t *testing.T, raw string, header, payload []byte, mode uint8) {
		token := raw
		if mode%2 == 1 {
			token = signHS256(header, payload)
		}
		c, err := k.Verify(token)
		if err != nil {
			if !errors.Is(err, ErrInvalidSession) || c != (SessionClaims{}) {
				t.Fatalf("refusal %v with claims %+v", err, c)
			}
			return
		}
		checkAcceptedSession(t, token, c, jwtEpoch)
	})
}

// signHS256 builds a token from raw header and payload bytes, signed with
// the test secret.
func signHS256(header, payload []byte) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	sig, err := jwt.SigningMethodHS256.Sign(signing, testHSSecret)
	if err != nil {
		panic(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// oracleSession decodes the claims Verify relies on, independently.
type oracleSession struct {
	Iss     *string      `json:"iss"`
	Sub     *string      `json:"sub"`
	Jti     *string      `json:"jti"`
	Sid     string       `json:"sid"`
	Role    *string      `json:"role"`
	Cluster string       `json:"cluster"`
	Exp     *json.Number `json:"exp"`
	Nbf     *json.Number `json:"nbf"`
	Aud     any          `json:"aud"`
}

// checkAcceptedSession fails t unless token, accepted at now, obeys every
// rule and c reports its claims.
func checkAcceptedSession(t *testing.T, token string, c SessionClaims, now time.Time) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("accepted a token of %d segments", len(parts))
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		t.Fatalf("accepted an undecodable signature: %v", err)
	}
	if err := jwt.SigningMethodHS256.Verify(parts[0]+"."+parts[1], sig, testHSSecret); err != nil {
		t.Fatalf("accepted a bad signature: %v", err)
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	hdrRaw, _ := base64.RawURLEncoding.DecodeString(parts[0])
	if err := json.Unmarshal(hdrRaw, &hdr); err != nil || hdr.Alg != "HS256" {
		t.Fatalf("accepted header %q (%v)", hdrRaw, err)
	}
	var o oracleSession
	body, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("accepted claims the oracle cannot decode: %q: %v", body, err)
	}
	switch {
	case o.Iss == nil || *o.Iss != DefaultSessionIssuer:
		t.Fatalf("accepted iss in %q", body)
	case o.Sub == nil || *o.Sub == "" || *o.Sub != c.UserID:
		t.Fatalf("accepted sub in %q as %q", body, c.UserID)
	case o.Jti == nil || *o.Jti == "" || *o.Jti != c.TokenID:
		t.Fatalf("accepted jti in %q as %q", body, c.TokenID)
	case o.Role == nil || !validSessionRole(*o.Role) || *o.Role != c.Role:
		t.Fatalf("accepted role in %q as %q", body, c.Role)
	case o.Sid != "" && o.Sid != c.SessionID, o.Sid == "" && c.SessionID != c.TokenID:
		t.Fatalf("sid in %q reported as %q", body, c.SessionID)
	case !strings.EqualFold(o.Cluster, c.Cluster):
		t.Fatalf("cluster in %q reported as %q", body, c.Cluster)
	}
	if o.Exp == nil {
		t.Fatalf("accepted a token without exp: %q", body)
	}
	exp, err := o.Exp.Float64()
	if err != nil || exp+DefaultSessionLeeway.Seconds() <= float64(now.Unix()) {
		t.Fatalf("accepted exp %v at %d", *o.Exp, now.Unix())
	}
	if o.Nbf != nil {
		if nbf, err := o.Nbf.Float64(); err != nil || nbf > float64(now.Unix())+DefaultSessionLeeway.Seconds() {
			t.Fatalf("accepted nbf %v at %d", *o.Nbf, now.Unix())
		}
	}
	if !oracleAudienceOK(o.Aud) {
		t.Fatalf("accepted aud %v", o.Aud)
	}
}

// oracleAudienceOK restates the one-sided audience rule for the fuzz keys.
func oracleAudienceOK(aud any) bool {
	var named []string
	switch v := aud.(type) {
	case nil:
		return true
	case string:
		named = []string{v}
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return false
			}
			named = append(named, s)
		}
	default:
		return false
	}
	namedOne := false
	for _, a := range named {
		if a != "" {
			namedOne = true
			if strings.EqualFold(a, fuzzSessionAudience) {
				return true
			}
		}
	}
	return !namedOne
}
