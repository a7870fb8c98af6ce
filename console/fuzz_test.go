package console

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// FuzzSafeNext: whatever a client puts in ?next=, the redirect stays on
// this site.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/", "/console/keys?x=1", "//evil.example", "/\\evil.example", "https://evil.example",
		"/a://b", "/\x00", "javascript:alert(1)", "", "/%2F%2Fevil", strings.Repeat("/a", 1100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := SafeNext(next)
		if got == "" || got[0] != '/' || strings.HasPrefix(got, "//") || strings.HasPrefix(got, "/\\") ||
			strings.Contains(got, "://") || len(got) > 2048 {
			t.Fatalf("SafeNext(%q) = %q, not a local path", next, got)
		}
		for i := 0; i < len(got); i++ {
			if got[i] < 0x20 || got[i] == 0x7f {
				t.Fatalf("SafeNext(%q) = %q holds a control byte", next, got)
			}
		}
		if again := SafeNext(got); again != got {
			t.Fatalf("SafeNext is not idempotent: %q -> %q -> %q", next, got, again)
		}
	})
}

// FuzzNormalizeOrigin: the CSRF check compares normalised origins, so
// normalising must be total, lower-case, and stable.
func FuzzNormalizeOrigin(f *testing.F) {
	for _, s := range []string{"https://Console.Example.com", "http://a.example:80", "https://u:p@host:99999", "null",
		"javascript://x", "https://[::1]:8443/path", "HTTP://X", "https://a b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, ok := normalizeOrigin(raw)
		if !ok {
			if got != "" {
				t.Fatalf("normalizeOrigin(%q) refused but returned %q", raw, got)
			}
			return
		}
		if got != strings.ToLower(got) || !(strings.HasPrefix(got, "http://") || strings.HasPrefix(got, "https://")) {
			t.Fatalf("normalizeOrigin(%q) = %q", raw, got)
		}
		if again, ok := normalizeOrigin(got); !ok || again != got {
			t.Fatalf("normalizeOrigin is not stable: %q -> %q -> %q (%v)", raw, got, again, ok)
		}
	})
}

// FuzzVerifyState: the OAuth state comes back from the browser; only what
// this gateway signed (and has not expired) is accepted, and its next is
// always local.
func FuzzVerifyState(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	s := &Surface{o: Options{StateKey: []byte(strings.Repeat("k", 32)), Now: func() time.Time { return now }}}
	other := &Surface{o: Options{StateKey: []byte(strings.Repeat("o", 32)), Now: func() time.Time { return now }}}
	good := s.signState(oauthState{Nonce: "n1", Next: "/console", Expires: now.Unix() + 300})
	for _, raw := range []string{good, good + "x", "e30.", ".", "", "eyJuIjoieCJ9.AAAA", strings.Replace(good, "e", "f", 1)} {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		st, ok := s.verifyState(raw)
		if !ok {
			return
		}
		if st.Nonce == "" || st.Expires < now.Unix() || SafeNext(st.Next) != st.Next {
			t.Fatalf("verifyState(%q) accepted %+v", raw, st)
		}
		// What one key accepts, another key refuses: acceptance comes
		// from the signature, not from the shape.
		if _, ok := other.verifyState(raw); ok {
			t.Fatalf("verifyState(%q) accepted under two keys", raw)
		}
	})
}

// FuzzParseLinkToken: a link token from a client is accepted only in the
// exact shape the gateway makes, and an accepted one is returned as sent.
func FuzzParseLinkToken(f *testing.F) {
	good, _, err := newLinkToken(purposeReset)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, good + "=", good[:42], strings.ToUpper(good), "", strings.Repeat("A", 43),
		strings.Repeat("_", 43), strings.Repeat("+", 43), strings.Repeat("A", 42) + "B", "a%20b", strings.Repeat("A", 10000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tok, ok := parseLinkToken(raw)
		if !ok {
			if tok != "" {
				t.Fatalf("parseLinkToken(%q) refused but returned %q", raw, tok)
			}
			return
		}
		if tok != raw || len(tok) != linkTokenLen {
			t.Fatalf("parseLinkToken(%q) = %q", raw, tok)
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("parseLinkToken(%q) accepted byte %q, which a URL would need escaped", raw, c)
			}
		}
	})
}

// FuzzParseJWKS: whatever a provider's key set holds, what the parser
// keeps is a signature key of a kind and size the gateway trusts.
func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseJWKS(body)
		if err != nil {
			return
		}
		if len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for kid, k := range keys {
			if kid == "" {
				t.Fatal("a key without a kid")
			}
			if k.alg != "" && !slices.Contains(idTokenAlgs, k.alg) {
				t.Fatalf("key %q pinned to %q", kid, k.alg)
			}
			switch pub := k.key.(type) {
			case *rsa.PublicKey:
				if pub.N.BitLen() < 2048 || pub.E < 3 || pub.E%2 == 0 {
					t.Fatalf("key %q: weak RSA key (%d bits, e=%d)", kid, pub.N.BitLen(), pub.E)
				}
			case *ecdsa.PublicKey:
				if _, err := pub.Bytes(); err != nil {
					t.Fatalf("key %q: invalid EC key: %v", kid, err)
				}
			default:
				t.Fatalf("key %q of type %T", kid, k.key)
			}
		}
	})
}

// FuzzParseDiscovery: a discovery document is used only when it names the
// configured issuer, https endpoints for an https issuer, and an
// asymmetric id_token algorithm.
func FuzzParseDiscovery(f *testing.F) {
	f.Add([]byte(`{}`))
	const issuer = "https://idp.example.com"
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := parseDiscovery(body, issuer)
		if err != nil {
			return
		}
		if d.Issuer != issuer || len(d.algs) == 0 {
			t.Fatalf("accepted %+v", d)
		}
		for _, a := range d.algs {
			if !slices.Contains(idTokenAlgs, a) {
				t.Fatalf("algorithm %q accepted", a)
			}
		}
		for _, u := range []string{d.AuthorizationEndpoint, d.TokenEndpoint, d.JWKSURI} {
			if p, err := url.Parse(u); err != nil || p.Scheme != "https" || p.Host == "" {
				t.Fatalf("endpoint %q accepted for an https issuer", u)
			}
		}
	})
}

// corpus reads one seed of a fuzz target's corpus in testdata.
func corpus(t *testing.T, target, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", target, name))
	if err != nil {
		t.Fatal(err)
	}
	_, lit, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s/%s: %v", target, name, err)
	}
	return []byte(s)
}

// TestParseProviderDocuments: the seeds' verdicts, so that the corpus
// keeps covering what it was written for.
func TestParseProviderDocuments(t *testing.T) {
	keys, err := parseJWKS(corpus(t, "FuzzParseJWKS", "rsa-and-ec"))
	if err != nil || len(keys) != 2 || keys["r1"].alg != "RS256" || keys["e1"].alg != "ES256" {
		t.Fatalf("rsa-and-ec: %v %v", keys, err)
	}
	for _, name := range []string{"ec-off-curve", "oct-only", "rsa-leading-zeros", "rsa-pinned-to-es256", "not-json"} {
		if keys, err := parseJWKS(corpus(t, "FuzzParseJWKS", name)); err == nil {
			t.Errorf("%s: accepted %v", name, keys)
		}
	}
	d, err := parseDiscovery(corpus(t, "FuzzParseDiscovery", "good"), "https://idp.example.com")
	if err != nil || d.TokenEndpoint != "https://idp.example.com/oauth/token" || strings.Join(d.algs, ",") != "RS256,ES256" ||
		d.authStyle != oauth2.AuthStyleInHeader {
		t.Fatalf("good: %+v %v", d, err)
	}
	for _, name := range []string{"other-issuer", "http-endpoint", "hmac-only", "no-s256", "not-json"} {
		if d, err := parseDiscovery(corpus(t, "FuzzParseDiscovery", name), "https://idp.example.com"); err == nil {
			t.Errorf("%s: accepted %+v", name, d)
		}
	}
	// An http issuer (a test or a local provider) may have http endpoints.
	local := `{"issuer":"http://127.0.0.1:9","authorization_endpoint":"http://127.0.0.1:9/a","token_endpoint":"http://127.0.0.1:9/t","jwks_uri":"http://127.0.0.1:9/k"}`
	if d, err := parseDiscovery([]byte(local), "http://127.0.0.1:9"); err != nil || strings.Join(d.algs, ",") != "RS256" {
		t.Fatalf("an http issuer: %+v %v", d, err)
	}
	// The client secret goes as the token endpoint takes it.
	for methods, want := range map[string]oauth2.AuthStyle{
		`["client_secret_post","client_secret_basic"]`: oauth2.AuthStyleInHeader,
		`["client_secret_post","private_key_jwt"]`:     oauth2.AuthStyleInParams,
		`["private_key_jwt"]`:                          -1,
	} {
		doc := strings.TrimSuffix(local, "}") + `,"token_endpoint_auth_methods_supported":` + methods + `}`
		d, err := parseDiscovery([]byte(doc), "http://127.0.0.1:9")
		switch {
		case want == -1 && err == nil:
			t.Errorf("%s: accepted", methods)
		case want != -1 && (err != nil || d.authStyle != want):
			t.Errorf("%s: %v %v, want style %v", methods, d, err, want)
		}
	}
}
