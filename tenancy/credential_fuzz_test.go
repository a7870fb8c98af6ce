package tenancy

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzExtractCredential checks ExtractCredential against a straightforward
// oracle written from the rules in its doc comment, and checks invariants
// that must hold for any input.
func FuzzExtractCredential(f *testing.F) {
	f.Add("Bearer qk_live_x", uint8(1), "", "queen_session=a", "", "", true)
	f.Add("", uint8(0), "navigate", "queen_session=a", "", "", false)
	f.Add("", uint8(0), "", "queen_session=a; queen_session_cell=b", "", "", false)
	f.Add("", uint8(0), "", "queen_session=;queen_session=qk_x", "__Host-queen_session_cell=c", "", true)
	f.Add("Bearer ", uint8(1), "cors", " x = y ;gw=g", "", "gw", false)
	f.Add("a", uint8(2), "", "", "", "", false)
	f.Fuzz(func(t *testing.T, auth string, authLines uint8, mode, cookie1, cookie2, fleet string, secure bool) {
		h := http.Header{}
		for range authLines % 3 {
			h.Add("Authorization", auth)
		}
		if mode != "" {
			h.Set("Sec-Fetch-Mode", mode)
		}
		for _, c := range []string{cookie1, cookie2} {
			if c != "" {
				h.Add("Cookie", c)
			}
		}
		names := CookieNames{Fleet: fleet}
		got, err := ExtractCredential(h, names, secure)
		want, wantErr := oracleCredential(h, names, secure)
		if (err != nil) != wantErr {
			t.Fatalf("err = %v, oracle error %v", err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrDuplicateCredentialHeader) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if got != want {
			t.Fatalf("got %+v, oracle %+v", got, want)
		}
		checkCredentialInvariants(t, got)
	})
}

func checkCredentialInvariants(t *testing.T, c Credential) {
	t.Helper()
	switch {
	case c.Kind == CredentialNone:
		if c.Value != "" || c.FromCookie {
			t.Fatalf("no-credential result carries data: %+v", c)
		}
	case c.Value == "" || c.Value != strings.TrimSpace(c.Value):
		t.Fatalf("value not trimmed or empty: %+v", c)
	case (c.Kind == CredentialAPIKey) != strings.HasPrefix(c.Value, "qk_"):
		t.Fatalf("kind does not follow the qk_ prefix: %+v", c)
	case c.FromCookie && c.Kind != CredentialSession:
		t.Fatalf("a cookie produced a non-session credential: %+v", c)
	}
}

// oracleCredential restates the extraction rules as plainly as possible.
func oracleCredential(h http.Header, names CookieNames, secure bool) (Credential, bool) {
	auths := h.Values("Authorization")
	if len(auths) > 1 {
		return Credential{}, true
	}
	if len(auths) == 1 {
		v := strings.TrimSpace(strings.TrimPrefix(auths[0], "Bearer "))
		if v != "" {
			if strings.HasPrefix(v, "qk_") {
				return Credential{Kind: CredentialAPIKey, Value: v}, false
			}
			return Credential{Kind: CredentialSession, Value: v}, false
		}
	}
	for _, m := range h.Values("Sec-Fetch-Mode") {
		if strings.ToLower(strings.TrimSpace(m)) == "navigate" {
			return Credential{}, false
		}
	}
	fleet := names.Fleet
	if fleet == "" {
		fleet = "queen_session"
	}
	cell := fleet + "_cell"
	if secure {
		cell = "__Host-" + cell
	}
	for _, name := range []string{cell, fleet} {
		for _, line := range h.Values("Cookie") {
			for _, pair := range strings.Split(line, ";") {
				i := strings.Index(pair, "=")
				if i < 0 || strings.TrimSpace(pair[:i]) != name {
					continue
				}
				v := strings.TrimSpace(pair[i+1:])
				if v != "" && !strings.HasPrefix(v, "qk_") {
					return Credential{Kind: CredentialSession, Value: v, FromCookie: true}, false
				}
			}
		}
	}
	return Credential{}, false
}
