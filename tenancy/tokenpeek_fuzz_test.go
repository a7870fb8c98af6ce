package tenancy

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzPeekTokenIssuer checks PeekTokenIssuer against the definition in
// its doc comment: an answer means three non-empty base64url segments
// whose middle one decodes to a JSON object with that "iss" string.
func FuzzPeekTokenIssuer(f *testing.F) {
	f.Add(unsignedToken(map[string]any{"iss": "https://idp.example"}, "RS256", "k", "c2ln"))
	f.Add(unsignedToken(map[string]any{"iss": 7}, "RS256", "k", "c2ln"))
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.")
	f.Add("a.b.c.d")
	f.Add("qk_live_abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		iss, ok := PeekTokenIssuer(tok)
		if !ok {
			if iss != "" {
				t.Fatalf("refused with an issuer %q", iss)
			}
			return
		}
		parts := strings.Split(tok, ".")
		if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
			t.Fatalf("accepted %q, which is not three segments", tok)
		}
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatalf("accepted a payload that is not base64url: %v", err)
		}
		if _, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil && strings.Trim(parts[0], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("accepted a header outside base64url")
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("accepted a payload that is not a JSON object: %v", err)
		}
		if s, isStr := m["iss"].(string); !isStr || s == "" {
			t.Fatalf("answered %q for iss %#v", iss, m["iss"])
		}
	})
}
