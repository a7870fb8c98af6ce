package crossorigin

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRefusal(t *testing.T) {
	p := NewPolicy("https://console.example.com", []string{"https://app.example.org", "*", "not an origin"}, nil)
	cases := []struct {
		name   string
		header map[string]string
		cookie bool
		want   string
	}{
		{"same origin", map[string]string{"Origin": "http://acme.eu1.example.com"}, true, ""},
		{"same origin, default port written out", map[string]string{"Origin": "http://ACME.eu1.example.com:80"}, true, ""},
		{"the console's public origin", map[string]string{"Origin": "https://console.example.com"}, true, ""},
		{"a listed origin", map[string]string{"Origin": "https://app.example.org"}, true, ""},
		{"another site", map[string]string{"Origin": "http://evil.example"}, true, "cross-origin request refused"},
		{"a null origin", map[string]string{"Origin": "null"}, true, "cross-origin request refused"},
		{"the wildcard is no allowed origin", map[string]string{"Origin": "https://other.example"}, false, "cross-origin request refused"},
		{"another site's referer", map[string]string{"Referer": "http://evil.example/page"}, true, "cross-origin referer refused"},
		{"own referer", map[string]string{"Referer": "http://acme.eu1.example.com/console"}, true, ""},
		{"fetch metadata, same origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, true, ""},
		{"fetch metadata, same site", map[string]string{"Sec-Fetch-Site": "same-site"}, true, "cross-site request refused"},
		{"no browser headers, with a cookie", nil, true, "a cookie-authenticated request must carry Origin"},
		{"no browser headers, no cookie", nil, false, ""},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodPost, "http://acme.eu1.example.com/api/v1/push", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := p.Refusal(r, tc.cookie); got != tc.want {
			t.Errorf("%s: Refusal = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSafeMethod(t *testing.T) {
	for m, want := range map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true,
		"POST": false, "PUT": false, "DELETE": false, "PATCH": false, "get": false} {
		if SafeMethod(m) != want {
			t.Errorf("SafeMethod(%q) = %v", m, !want)
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"https://Example.COM:443/path": "https://example.com",
		"http://u:p@host:8080":         "http://host:8080",
		"http://[::1]:80":              "http://[::1]",
	} {
		if got, ok := NormalizeOrigin(raw); !ok || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"", "null", "javascript://x", "https://u:p@host:99999", "ftp://x", "http://bad host"} {
		if got, ok := NormalizeOrigin(raw); ok {
			t.Errorf("NormalizeOrigin(%q) = %q, want refused", raw, got)
		}
	}
}
