package controlplane

import (
	"strings"
	"unicode/utf8"
)

// The argument checks of operator actions. The CLI, the console and the
// provisioning API call the same SQL functions, and each of them reads its
// arguments through these, so one request is refused or accepted, and
// normalised, the same way on every path. Each returns the value as the
// SQL functions store it, or an Invalid *Error whose message names the
// argument.

// MaxKeyNameLen is the longest API key or machine token name, in
// characters.
const MaxKeyNameLen = 200

// MaxUserNameLen is the longest display name of a user, in characters.
const MaxUserNameLen = 160

// MinPasswordLen and MaxPasswordLen bound the passwords an operator or a
// user sets, in characters.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 128
)

// CheckSlug checks a tenant or cluster slug (noun says which) as the
// schema's CHECK does and returns it lower-cased and trimmed.
func CheckSlug(noun, raw string) (string, error) { return checkSlug(noun, raw) }

// CheckKeyName checks the name of an API key: trimmed, 1 to
// MaxKeyNameLen characters.
func CheckKeyName(raw string) (string, error) {
	name := strings.TrimSpace(raw)
	if name == "" {
		return "", errorf(Invalid, "key name is required")
	}
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxKeyNameLen {
		return "", errorf(Invalid, "key name must be 1 to %d characters of UTF-8", MaxKeyNameLen)
	}
	return name, nil
}

// CheckScopes checks a list of API key scopes: at least one, each one of
// Scopes (case and surrounding spaces ignored). Duplicates are dropped and
// the result is in the order of Scopes.
func CheckScopes(list []string) ([]string, error) {
	return checkScopeSet(list, Scopes, "produce, consume, read or admin")
}

// checkScopeSet reads list against known, in known's order.
func checkScopeSet(list, known []string, spelled string) ([]string, error) {
	seen := map[string]bool{}
	for _, part := range list {
		p := normalize(part)
		if p == "" {
			continue
		}
		ok := false
		for _, sc := range known {
			ok = ok || sc == p
		}
		if !ok {
			return nil, errorf(Invalid, "invalid scope %q: use %s", strings.ToValidUTF8(strings.TrimSpace(part), "?"), spelled)
		}
		seen[p] = true
	}
	var out []string
	for _, sc := range known {
		if seen[sc] {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, errorf(Invalid, "at least one scope is required (%s)", strings.Join(known, ", "))
	}
	return out, nil
}

// CheckEmail lower-cases and trims an e-mail address as the SQL functions
// store it and checks its shape: something before and after one @, no
// spaces, quotes or angle brackets, at most 254 characters.
func CheckEmail(raw string) (string, error) {
	e := normalize(raw)
	if e == "" {
		return "", errorf(Invalid, "e-mail is required")
	}
	at := strings.IndexByte(e, '@')
	if at < 1 || at == len(e)-1 || len(e) > 254 || strings.Count(e, "@") != 1 ||
		strings.ContainsAny(e, " \t\r\n<>\"") || !utf8.ValidString(e) {
		return "", errorf(Invalid, "invalid e-mail %q", strings.ToValidUTF8(strings.TrimSpace(raw), "?"))
	}
	return e, nil
}

// CheckRole checks a cluster role: admin, producer, consumer or viewer.
func CheckRole(raw string) (string, error) {
	r := normalize(raw)
	for _, known := range Roles {
		if r == known {
			return r, nil
		}
	}
	return "", errorf(Invalid, "invalid role %q: use admin, producer, consumer or viewer", strings.ToValidUTF8(raw, "?"))
}

// CheckPlanCode checks that a plan code is given and returns it as the
// plans table stores it; whether the plan exists is the database's answer.
func CheckPlanCode(raw string) (string, error) {
	p := normalize(raw)
	if p == "" {
		return "", errorf(Invalid, "plan is required")
	}
	if !utf8.ValidString(p) || len(p) > 64 {
		return "", errorf(Invalid, "invalid plan %q", strings.ToValidUTF8(strings.TrimSpace(raw), "?"))
	}
	return p, nil
}

// CheckUserName checks a user's optional display name: trimmed, at most
// MaxUserNameLen characters.
func CheckUserName(raw string) (string, error) {
	name := strings.TrimSpace(raw)
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxUserNameLen {
		return "", errorf(Invalid, "user name is longer than %d characters", MaxUserNameLen)
	}
	return name, nil
}

// CheckPassword checks a password an operator or a user sets:
// MinPasswordLen to MaxPasswordLen characters.
func CheckPassword(pw string) error {
	if l := utf8.RuneCountInString(pw); l < MinPasswordLen || l > MaxPasswordLen {
		return errorf(Invalid, "password must be %d to %d characters long", MinPasswordLen, MaxPasswordLen)
	}
	return nil
}

// CheckKeyHash checks a caller-supplied API key hash: the lowercase
// SHA-256 hex (64 characters) under which api_keys stores a key.
func CheckKeyHash(raw string) (string, error) {
	h := strings.TrimSpace(raw)
	if len(h) != 64 {
		return "", errorf(Invalid, "key hash must be the SHA-256 of the key in 64 lowercase hex characters")
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", errorf(Invalid, "key hash must be the SHA-256 of the key in 64 lowercase hex characters")
		}
	}
	return h, nil
}
