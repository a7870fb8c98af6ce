package tenancy

import "strings"

// CanonicalHost normalises a Host header value the way cluster resolution
// needs it: surrounding space trimmed, a trailing ":port" removed only when
// the port is all digits (so a bare "[::1]" survives), every trailing dot (the
// DNS root label) removed, and the result lowercased.
func CanonicalHost(host string) string {
	h := strings.TrimSpace(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && allDigits(h[i+1:]) && i+1 < len(h) {
		h = h[:i]
	}
	h = strings.TrimRight(h, ".")
	return strings.ToLower(h)
}

// SlugFromHost returns the cluster slug a Host header names: the first DNS
// label of the canonical host. It returns "" when there is no label.
func SlugFromHost(host string) string {
	h := CanonicalHost(host)
	if i := strings.IndexByte(h, '.'); i >= 0 {
		h = h[:i]
	}
	return h
}

// SlugUnderDomain returns the slug of a host that is exactly
// "<slug>.<domain>" for one of the given base domains, and false for any
// other host (another domain, extra labels, an empty slug).
func SlugUnderDomain(host string, domains []string) (string, bool) {
	h := CanonicalHost(host)
	for _, d := range domains {
		rest, ok := strings.CutSuffix(h, "."+d)
		if ok && rest != "" && !strings.Contains(rest, ".") {
			return rest, true
		}
	}
	return "", false
}

// ValidSlug reports whether s is a DNS label as the schema defines a slug:
// 1 to 63 characters of a-z, 0-9 and '-', not starting or ending with '-'.
func ValidSlug(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
