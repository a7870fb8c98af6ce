package tenancy

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestExtractCredentialAuthorization(t *testing.T) {
	cases := []struct {
		name  string
		value string
		want  Credential
	}{
		{"bearer api key", "Bearer qk_live_abc", Credential{Kind: CredentialAPIKey, Value: "qk_live_abc"}},
		{"raw api key", "qk_live_abc", Credential{Kind: CredentialAPIKey, Value: "qk_live_abc"}},
		{"bearer session", "Bearer eyJ.a.b", Credential{Kind: CredentialSession, Value: "eyJ.a.b"}},
		{"raw session", "eyJ.a.b", Credential{Kind: CredentialSession, Value: "eyJ.a.b"}},
		{"trimmed after strip", "Bearer   qk_x  ", Credential{Kind: CredentialAPIKey, Value: "qk_x"}},
		{"lower-case bearer is not stripped", "bearer qk_x", Credential{Kind: CredentialSession, Value: "bearer qk_x"}},
		{"BEARER is not stripped", "BEARER tok", Credential{Kind: CredentialSession, Value: "BEARER tok"}},
		{"bearer without space is the value", "Bearerqk_x", Credential{Kind: CredentialSession, Value: "Bearerqk_x"}},
		{"only one Bearer stripped", "Bearer Bearer x", Credential{Kind: CredentialSession, Value: "Bearer x"}},
		{"leading space keeps Bearer", " Bearer qk_x", Credential{Kind: CredentialSession, Value: "Bearer qk_x"}},
		{"tab-separated value trimmed", "Bearer \tqk_t\t", Credential{Kind: CredentialAPIKey, Value: "qk_t"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": {tc.value}, "Cookie": {"queen_session=cookie-token"}}
			got, err := ExtractCredential(h, CookieNames{}, true)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExtractCredentialEmptyAuthorizationFallsBackToCookie(t *testing.T) {
	for _, v := range []string{"", "Bearer ", "Bearer    ", "   "} {
		h := http.Header{"Authorization": {v}, "Cookie": {"queen_session=tok"}}
		got, err := ExtractCredential(h, CookieNames{}, false)
		if err != nil {
			t.Fatal(err)
		}
		want := Credential{Kind: CredentialSession, Value: "tok", FromCookie: true}
		if got != want {
			t.Fatalf("Authorization %q: got %+v, want %+v", v, got, want)
		}
	}
}

func TestExtractCredentialDuplicateAuthorization(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer qk_a", "Bearer qk_b"}}
	_, err := ExtractCredential(h, CookieNames{}, false)
	if !errors.Is(err, ErrDuplicateCredentialHeader) {
		t.Fatalf("err = %v, want ErrDuplicateCredentialHeader", err)
	}
	// Even an empty second value is a second header line.
	h = http.Header{"Authorization": {"Bearer qk_a", ""}}
	if _, err := ExtractCredential(h, CookieNames{}, false); !errors.Is(err, ErrDuplicateCredentialHeader) {
		t.Fatalf("err = %v, want ErrDuplicateCredentialHeader", err)
	}
}

func TestExtractCredentialNavigation(t *testing.T) {
	for _, mode := range []string{"navigate", "Navigate", "NAVIGATE", " navigate "} {
		h := http.Header{"Sec-Fetch-Mode": {mode}, "Cookie": {"queen_session=tok"}}
		got, err := ExtractCredential(h, CookieNames{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != CredentialNone || got.Value != "" {
			t.Fatalf("mode %q: got %+v, want no credential", mode, got)
		}
		doc, err := ExtractDocumentCredential(h, CookieNames{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if doc.Value != "tok" || !doc.FromCookie {
			t.Fatalf("document surface, mode %q: got %+v, want the cookie", mode, doc)
		}
	}
	// Other modes keep cookies.
	h := http.Header{"Sec-Fetch-Mode": {"cors"}, "Cookie": {"queen_session=tok"}}
	if got, _ := ExtractCredential(h, CookieNames{}, false); got.Value != "tok" {
		t.Fatalf("cors: got %+v", got)
	}
	// The Authorization header is honoured on navigations.
	h = http.Header{"Sec-Fetch-Mode": {"navigate"}, "Authorization": {"Bearer qk_k"}}
	if got, _ := ExtractCredential(h, CookieNames{}, false); got.Value != "qk_k" || got.Kind != CredentialAPIKey {
		t.Fatalf("navigate with Authorization: got %+v", got)
	}
}

func TestExtractCredentialCookies(t *testing.T) {
	cases := []struct {
		name    string
		cookies []string
		secure  bool
		fleet   string
		want    string
	}{
		{"fleet cookie", []string{"queen_session=f"}, false, "", "f"},
		{"no cookie", []string{"other=x"}, false, "", ""},
		{"no cookie header", nil, false, "", ""},
		{"cell beats fleet (http)", []string{"queen_session=f; queen_session_cell=c"}, false, "", "c"},
		{"cell beats fleet (https)", []string{"queen_session=f; __Host-queen_session_cell=c"}, true, "", "c"},
		{"https ignores the plain cell name", []string{"queen_session_cell=c; queen_session=f"}, true, "", "f"},
		{"http ignores the __Host- name", []string{"__Host-queen_session_cell=c; queen_session=f"}, false, "", "f"},
		{"first occurrence wins", []string{"queen_session=one; queen_session=two"}, false, "", "one"},
		{"empty value ignored", []string{"queen_session=; queen_session=two"}, false, "", "two"},
		{"blank value ignored", []string{"queen_session=  ; x=y"}, false, "", ""},
		{"qk_ value ignored", []string{"queen_session=qk_live_x"}, false, "", ""},
		{"qk_ cell value falls back to fleet", []string{"queen_session_cell=qk_x; queen_session=f"}, false, "", "f"},
		{"exact name match only", []string{"queen_sessionx=a; xqueen_session=b; Queen_session=c"}, false, "", ""},
		{"spaces around pairs", []string{"  a=b ;   queen_session =  tok  "}, false, "", "tok"},
		{"value keeps = signs", []string{"queen_session=a=b="}, false, "", "a=b="},
		{"pair without =", []string{"queen_session; queen_session=v"}, false, "", "v"},
		{"custom fleet name", []string{"queen_session=f; gw=g"}, false, "gw", "g"},
		{"custom cell name", []string{"gw=g; __Host-gw_cell=c"}, true, "gw", "c"},
		{"later Cookie line consulted", []string{"a=b", "queen_session=v"}, false, "", "v"},
		{"cell cookie on a later line wins", []string{"queen_session=f", "queen_session_cell=c"}, false, "", "c"},
		{"trailing semicolons", []string{";;queen_session=v;;"}, false, "", "v"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.cookies != nil {
				h["Cookie"] = tc.cookies
			}
			got, err := ExtractCredential(h, CookieNames{Fleet: tc.fleet}, tc.secure)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if got != (Credential{}) {
					t.Fatalf("got %+v, want no credential", got)
				}
				return
			}
			want := Credential{Kind: CredentialSession, Value: tc.want, FromCookie: true}
			if got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestCredentialCellCookieName(t *testing.T) {
	if got := (CookieNames{}).CellCookie(true); got != "__Host-queen_session_cell" {
		t.Fatalf("secure: %q", got)
	}
	if got := (CookieNames{Fleet: "s"}).CellCookie(false); got != "s_cell" {
		t.Fatalf("plain: %q", got)
	}
}

func TestCredentialKindString(t *testing.T) {
	for k, want := range map[CredentialKind]string{CredentialNone: "none", CredentialAPIKey: "api_key", CredentialSession: "session"} {
		if k.String() != want {
			t.Fatalf("%d: %q", k, k.String())
		}
	}
}

func TestExtractCredentialAuthorizationDoesNotAllocate(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer qk_live_0123456789"}, "Cookie": {"queen_session=x"}}
	allocs := testing.AllocsPerRun(100, func() {
		if c, err := ExtractCredential(h, CookieNames{}, true); err != nil || c.Kind != CredentialAPIKey {
			t.Fatal("unexpected result")
		}
	})
	if allocs != 0 {
		t.Fatalf("Authorization path allocates %.0f times", allocs)
	}
	h = http.Header{"Cookie": {"a=b; queen_session=f; __Host-queen_session_cell=c"}}
	allocs = testing.AllocsPerRun(100, func() {
		if c, _ := ExtractCredential(h, CookieNames{}, true); c.Value != "c" {
			t.Fatal("unexpected result")
		}
	})
	if allocs != 0 {
		t.Fatalf("cookie path allocates %.0f times", allocs)
	}
}

func TestNewAPIKey(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		key, hash, err := NewAPIKey("live")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(key, "qk_live_") || len(key) != len("qk_live_")+43 {
			t.Fatalf("bad shape %q", key)
		}
		raw, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimPrefix(key, "qk_live_"))
		if err != nil || len(raw) != 32 {
			t.Fatalf("random part of %q: %d bytes, %v", key, len(raw), err)
		}
		if hash != HashAPIKey(key) || len(hash) != 64 || strings.ToLower(hash) != hash {
			t.Fatalf("hash %q of %q", hash, key)
		}
		if !WellFormedAPIKey(key) {
			t.Fatalf("generated key %q is not well formed", key)
		}
		if seen[key] {
			t.Fatalf("duplicate key %q", key)
		}
		seen[key] = true
	}
}

func TestNewAPIKeyRejectsBadEnv(t *testing.T) {
	for _, env := range []string{"", "Live", "li_ve", "li-ve", "abcdefghijklmnopq", "é", "live "} {
		if k, h, err := NewAPIKey(env); err == nil || k != "" || h != "" {
			t.Fatalf("env %q: key %q, err %v", env, k, err)
		}
	}
	if _, _, err := NewAPIKey("abcdefghijklmnop"); err != nil {
		t.Fatalf("16-character env refused: %v", err)
	}
}

func TestWellFormedAPIKey(t *testing.T) {
	body := "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde" // 43 chars
	if len(body) != 43 {
		t.Fatalf("test body has %d chars", len(body))
	}
	good := []string{
		"qk_live_" + body,
		"qk_dev_" + body,
		"qk_0_" + body,
		"qk_abcdefghijklmnop_" + body,
		"qk_live_" + strings.Repeat("_", 43),
		"qk_live_" + strings.Repeat("-", 43),
	}
	for _, s := range good {
		if !WellFormedAPIKey(s) {
			t.Errorf("%q refused", s)
		}
	}
	bad := []string{
		"",
		"qk_",
		"qk_live_",
		"qk_live_" + body[:42],
		"qk_live_" + body + "A",
		"qk__" + body,
		"qk_Live_" + body,
		"qk_li-ve_" + body,
		"qk_abcdefghijklmnopq_" + body,
		"QK_live_" + body,
		"qk_live-" + body,
		"qk_live_" + body[:42] + "=",
		"qk_live_" + body[:42] + "+",
		"qk_live_" + body[:42] + "/",
		"qk_live_" + body[:20] + " " + body[21:],
		"qk_dev_devdevdevdevdevdevdevdevdevdevdevdevdev", // the reference dev seed: 39 chars
		"qk_live_acme",
		"xqk_live_" + body,
	}
	for _, s := range bad {
		if WellFormedAPIKey(s) {
			t.Errorf("%q accepted", s)
		}
	}
}

func BenchmarkExtractCredential(b *testing.B) {
	names := CookieNames{}
	b.Run("authorization", func(b *testing.B) {
		h := http.Header{"Authorization": {"Bearer qk_live_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde"}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ExtractCredential(h, names, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cookie", func(b *testing.B) {
		h := http.Header{"Cookie": {"_ga=GA1.2.3.4; theme=dark; queen_session=eyJhbGciOiJFZERTQSJ9.e30.sig; __Host-queen_session_cell=eyJhbGciOiJFZERTQSJ9.e30.cell"}}
		b.ReportAllocs()
		for b.Loop() {
			if c, _ := ExtractCredential(h, names, true); !c.FromCookie {
				b.Fatal("no cookie")
			}
		}
	})
	b.Run("none", func(b *testing.B) {
		h := http.Header{"Accept": {"*/*"}}
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ExtractCredential(h, names, true)
		}
	})
}

func BenchmarkWellFormedAPIKey(b *testing.B) {
	key := "qk_live_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde"
	b.ReportAllocs()
	for b.Loop() {
		if !WellFormedAPIKey(key) {
			b.Fatal("refused")
		}
	}
}
