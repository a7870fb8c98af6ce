package console

import (
	"strings"
	"testing"
	"time"
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
