package tenancy

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// cellClock is a settable clock safe for concurrent readers.
type cellClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *cellClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *cellClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func newTestCellTokens(t testing.TB, cfg CellTokenConfig) (*CellTokens, *cellClock) {
	t.Helper()
	clock := &cellClock{now: jwtEpoch}
	cfg.Now = clock.Now
	if cfg.HS256Secret == nil && cfg.Ed25519PrivateKeyPEM == nil {
		cfg.HS256Secret = testHSSecret
	}
	c, err := NewCellTokens(cfg)
	if err != nil {
		t.Fatalf("NewCellTokens: %v", err)
	}
	return c, clock
}

// parseCellToken verifies a cell token independently of CellTokens, as the
// broker would, at the given time.
func parseCellToken(t *testing.T, tok string, key any, alg string, at time.Time) jwt.MapClaims {
	t.Helper()
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(
		jwt.WithValidMethods([]string{alg}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return at }),
	).ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return key, nil })
	if err != nil {
		t.Fatalf("independent parse of %q: %v", tok, err)
	}
	return claims
}

func TestCellTokenClaimsHS256(t *testing.T) {
	c, _ := newTestCellTokens(t, CellTokenConfig{Issuer: "queengate", Audience: "cell-eu1"})
	tok, err := c.Token("apikey:k1", BrokerRoleReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	claims := parseCellToken(t, tok, testHSSecret, "HS256", jwtEpoch)
	want := map[string]any{
		"sub": "apikey:k1", "role": "read-write", "iss": "queengate", "aud": "cell-eu1",
		"iat": float64(jwtEpoch.Unix()), "exp": float64(jwtEpoch.Add(5 * time.Minute).Unix()),
	}
	if len(claims) != len(want) {
		t.Fatalf("claims %v, want %v", claims, want)
	}
	for k, v := range want {
		if claims[k] != v {
			t.Fatalf("claim %s = %v, want %v", k, claims[k], v)
		}
	}
}

func TestCellTokenClaimsEdDSA(t *testing.T) {
	priv, privPEM, _ := newTestEd25519(t)
	c, _ := newTestCellTokens(t, CellTokenConfig{Algorithm: "EdDSA", Ed25519PrivateKeyPEM: privPEM, RoleClaim: "queen_role", TTL: time.Minute})
	tok, err := c.Token("user-9", BrokerRoleReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	claims := parseCellToken(t, tok, pub, "EdDSA", jwtEpoch)
	if claims["queen_role"] != "read-only" || claims["sub"] != "user-9" || claims["role"] != nil {
		t.Fatalf("claims %v", claims)
	}
	if _, ok := claims["iss"]; ok {
		t.Fatalf("iss minted without an issuer: %v", claims)
	}
	if exp := claims["exp"].(float64); exp != float64(jwtEpoch.Add(time.Minute).Unix()) {
		t.Fatalf("exp %v", exp)
	}
	if hdr := jwtSegment(t, tok, 0); hdr["kid"] != Ed25519KeyID(pub) || hdr["alg"] != "EdDSA" {
		t.Fatalf("header %v", hdr)
	}
}

func TestCellTokenReuseAndRefresh(t *testing.T) {
	c, clock := newTestCellTokens(t, CellTokenConfig{TTL: 3 * time.Minute})
	first, err := c.Token("s", BrokerRoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// Reused while more than a third of the TTL is left (refresh at 2m).
	for _, d := range []time.Duration{0, time.Second, time.Minute, 2*time.Minute - time.Second} {
		clock.Set(jwtEpoch.Add(d))
		got, err := c.Token("s", BrokerRoleAdmin)
		if err != nil || got != first {
			t.Fatalf("at +%v: a new token (%v)", d, err)
		}
	}
	if n := c.minted.Load(); n != 1 {
		t.Fatalf("%d mints before the refresh point", n)
	}
	clock.Set(jwtEpoch.Add(2 * time.Minute))
	second, err := c.Token("s", BrokerRoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("token not replaced with a third of its TTL left")
	}
	claims := parseCellToken(t, second, testHSSecret, "HS256", jwtEpoch.Add(2*time.Minute))
	if claims["exp"] != float64(jwtEpoch.Add(5*time.Minute).Unix()) {
		t.Fatalf("replacement exp %v", claims["exp"])
	}
	// Far past expiry, a new token is minted too.
	clock.Set(jwtEpoch.Add(time.Hour))
	third, err := c.Token("s", BrokerRoleAdmin)
	if err != nil || third == second {
		t.Fatalf("after expiry: same token or %v", err)
	}
	parseCellToken(t, third, testHSSecret, "HS256", jwtEpoch.Add(time.Hour))
	if n := c.minted.Load(); n != 3 {
		t.Fatalf("%d mints, want 3", n)
	}
}

func TestCellTokenDistinctPairs(t *testing.T) {
	c, _ := newTestCellTokens(t, CellTokenConfig{})
	seen := map[string]string{}
	for _, sub := range []string{"a", "b", "a\x00read-only"} {
		for _, role := range []string{BrokerRoleAdmin, BrokerRoleReadWrite, BrokerRoleReadOnly} {
			tok, err := c.Token(sub, role)
			if err != nil {
				t.Fatal(err)
			}
			pair := sub + "/" + role
			if prev, dup := seen[tok]; dup {
				t.Fatalf("%s and %s share a token", prev, pair)
			}
			seen[tok] = pair
			claims := parseCellToken(t, tok, testHSSecret, "HS256", jwtEpoch)
			if claims["sub"] != sub || claims["role"] != role {
				t.Fatalf("%s: claims %v", pair, claims)
			}
		}
	}
}

func TestCellTokenRefusesBadInput(t *testing.T) {
	c, _ := newTestCellTokens(t, CellTokenConfig{})
	for _, tc := range []struct{ sub, role string }{
		{"", BrokerRoleAdmin},
		{"s", ""},
		{"s", "Admin"},
		{"s", "readwrite"},
		{"s", "producer"},
		{strings.Repeat("x", 513), BrokerRoleAdmin},
	} {
		if tok, err := c.Token(tc.sub, tc.role); err == nil {
			t.Errorf("%q/%q minted %q", tc.sub, tc.role, tok)
		}
	}
	if c.minted.Load() != 0 {
		t.Fatal("refused input minted")
	}
}

func TestNewCellTokensConfigErrors(t *testing.T) {
	_, privPEM, pubPEM := newTestEd25519(t)
	cases := map[string]CellTokenConfig{
		"nothing":              {},
		"both keys":            {HS256Secret: testHSSecret, Ed25519PrivateKeyPEM: privPEM},
		"short secret":         {HS256Secret: []byte("0123456789")},
		"HS256 without secret": {Algorithm: "HS256", Ed25519PrivateKeyPEM: privPEM},
		"EdDSA without key":    {Algorithm: "EdDSA", HS256Secret: testHSSecret},
		"unknown algorithm":    {Algorithm: "RS256", HS256Secret: testHSSecret},
		"public key as key":    {Ed25519PrivateKeyPEM: pubPEM},
		"tiny ttl":             {HS256Secret: testHSSecret, TTL: 10 * time.Second},
		"negative ttl":         {HS256Secret: testHSSecret, TTL: -time.Minute},
		"role claim exp":       {HS256Secret: testHSSecret, RoleClaim: "exp"},
		"role claim sub":       {HS256Secret: testHSSecret, RoleClaim: "sub"},
	}
	for name, cfg := range cases {
		if c, err := NewCellTokens(cfg); err == nil {
			t.Errorf("%s: accepted (%v)", name, c)
		} else if !strings.HasPrefix(err.Error(), "cell tokens: ") {
			t.Errorf("%s: error lacks context: %v", name, err)
		}
	}
	for name, cfg := range map[string]CellTokenConfig{
		"inferred HS256":  {HS256Secret: testHSSecret},
		"inferred EdDSA":  {Ed25519PrivateKeyPEM: privPEM},
		"lower-case alg":  {Algorithm: "hs256", HS256Secret: testHSSecret},
		"explicit EdDSA":  {Algorithm: "EdDSA", Ed25519PrivateKeyPEM: privPEM},
		"minimum ttl":     {HS256Secret: testHSSecret, TTL: MinCellTokenTTL},
		"custom claim ok": {HS256Secret: testHSSecret, RoleClaim: "roles"},
	} {
		if _, err := NewCellTokens(cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCellTokenConcurrentSingleMint(t *testing.T) {
	c, clock := newTestCellTokens(t, CellTokenConfig{})
	const workers = 64
	run := func() map[string]bool {
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]bool{}
		start := make(chan struct{})
		for i := range workers {
			wg.Go(func() {
				<-start
				for range 200 {
					tok, err := c.Token(fmt.Sprintf("sub-%d", i%4), BrokerRoleReadWrite)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got[tok] = true
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		return got
	}
	if got := run(); len(got) != 4 {
		t.Fatalf("%d distinct tokens for 4 subjects", len(got))
	}
	if n := c.minted.Load(); n != 4 {
		t.Fatalf("%d mints for 4 subjects", n)
	}
	// At the refresh point every subject is re-minted exactly once, however
	// many callers arrive together.
	clock.Set(jwtEpoch.Add(4 * time.Minute))
	if got := run(); len(got) != 4 {
		t.Fatalf("after refresh: %d distinct tokens for 4 subjects", len(got))
	}
	if n := c.minted.Load(); n != 8 {
		t.Fatalf("%d mints after one refresh round, want 8", n)
	}
}

func TestCellTokenConcurrentMixedKeysRace(t *testing.T) {
	c, clock := newTestCellTokens(t, CellTokenConfig{MaxEntries: 50})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := range 500 {
				if w == 0 && i%100 == 0 {
					clock.Set(jwtEpoch.Add(time.Duration(i) * time.Second))
				}
				sub := fmt.Sprintf("s%d", (i*7+w)%120)
				tok, err := c.Token(sub, BrokerRoleReadOnly)
				if err != nil || tok == "" {
					failures.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d failures", failures.Load())
	}
	if n := c.cache.len(); n > 50 {
		t.Fatalf("cache holds %d entries, bound 50", n)
	}
}

func TestCellTokenCacheBound(t *testing.T) {
	c, clock := newTestCellTokens(t, CellTokenConfig{MaxEntries: 16})
	for i := range 16 {
		if _, err := c.Token(fmt.Sprintf("old-%d", i), BrokerRoleAdmin); err != nil {
			t.Fatal(err)
		}
	}
	if c.cache.len() != 16 {
		t.Fatalf("len %d", c.cache.len())
	}
	// Expired entries go first: after expiry one new subject replaces them all.
	clock.Set(jwtEpoch.Add(10 * time.Minute))
	if _, err := c.Token("new-0", BrokerRoleAdmin); err != nil {
		t.Fatal(err)
	}
	if c.cache.len() != 1 {
		t.Fatalf("expired entries kept: len %d", c.cache.len())
	}
	// With nothing expired, arbitrary entries make room and the bound holds.
	for i := 1; i < 40; i++ {
		if _, err := c.Token(fmt.Sprintf("new-%d", i), BrokerRoleAdmin); err != nil {
			t.Fatal(err)
		}
		if c.cache.len() > 16 {
			t.Fatalf("len %d over the bound", c.cache.len())
		}
	}
	// The most recent subject is cached.
	before := c.minted.Load()
	if _, err := c.Token("new-39", BrokerRoleAdmin); err != nil {
		t.Fatal(err)
	}
	if c.minted.Load() != before {
		t.Fatal("the entry just inserted was evicted")
	}
}

func TestCellTokenCacheHitDoesNotAllocate(t *testing.T) {
	c, _ := newTestCellTokens(t, CellTokenConfig{})
	if _, err := c.Token("hot", BrokerRoleReadWrite); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(1000, func() { _, _ = c.Token("hot", BrokerRoleReadWrite) }); a != 0 {
		t.Fatalf("cache hit allocates %.0f times", a)
	}
}

func BenchmarkCellTokenHit(b *testing.B) {
	c, err := NewCellTokens(CellTokenConfig{HS256Secret: testHSSecret})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Token("apikey:0b8f", BrokerRoleReadWrite); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Token("apikey:0b8f", BrokerRoleReadWrite); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Token("apikey:0b8f", BrokerRoleReadWrite); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkCellTokenMint(b *testing.B) {
	c, err := NewCellTokens(CellTokenConfig{HS256Secret: testHSSecret})
	if err != nil {
		b.Fatal(err)
	}
	k := cellTokenKey{"apikey:0b8f", BrokerRoleReadWrite}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.mint(k, jwtEpoch); err != nil {
			b.Fatal(err)
		}
	}
}
