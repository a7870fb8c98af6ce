package tenancy

import "testing"

func TestSlugFromHost(t *testing.T) {
	cases := map[string]string{
		"acme-prod.eu1.example.com":        "acme-prod",
		"ACME-Prod.eu1.example.com:8443":   "acme-prod",
		"acme-prod.eu1.example.com.":       "acme-prod",
		"acme-prod.eu1.example.com..:80":   "acme-prod",
		" acme.eu1.example.com ":           "acme",
		"localhost":                        "localhost",
		"localhost:abc":                    "localhost:abc",
		"":                                 "",
		".":                                "",
		"[::1]:6711":                       "[::1]",
		"[::1]":                            "[::1]",
		"acme-prod.eu1.example.com:":       "acme-prod",
		".eu1.example.com":                 "",
		"x.eu1.example.com:99999999999999": "x",
	}
	for in, want := range cases {
		if got := SlugFromHost(in); got != want {
			t.Errorf("SlugFromHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSlugUnderDomain(t *testing.T) {
	domains := []string{"eu1.example.com", "eu2.example.com"}
	cases := []struct {
		host string
		slug string
		ok   bool
	}{
		{"acme.eu1.example.com", "acme", true},
		{"Acme.EU2.example.com:443", "acme", true},
		{"acme.eu1.example.com.", "acme", true},
		{"a.b.eu1.example.com", "", false},
		{"eu1.example.com", "", false},
		{".eu1.example.com", "", false},
		{"acme.eu3.example.com", "", false},
		{"acme.xeu1.example.com", "", false},
		{"acme.eu1.example.com.evil.org", "", false},
	}
	for _, tc := range cases {
		slug, ok := SlugUnderDomain(tc.host, domains)
		if slug != tc.slug || ok != tc.ok {
			t.Errorf("SlugUnderDomain(%q) = %q, %v; want %q, %v", tc.host, slug, ok, tc.slug, tc.ok)
		}
	}
}

func TestValidSlug(t *testing.T) {
	for _, s := range []string{"a", "acme-prod", "a1", "0abc", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123"} {
		if !ValidSlug(s) {
			t.Errorf("ValidSlug(%q) = false", s)
		}
	}
	for _, s := range []string{"", "-a", "a-", "A", "a.b", "a_b", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234"} {
		if ValidSlug(s) {
			t.Errorf("ValidSlug(%q) = true", s)
		}
	}
}
