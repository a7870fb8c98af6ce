package tenancy

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// CredentialKind says what kind of credential a request presented.
type CredentialKind uint8

// The credential kinds.
const (
	// CredentialNone: the request presented no usable credential.
	CredentialNone CredentialKind = iota
	// CredentialAPIKey: a cluster-bound API key (a value starting "qk_").
	CredentialAPIKey
	// CredentialSession: a session JWT (any other non-empty value).
	CredentialSession
)

// String returns "none", "api_key" or "session".
func (k CredentialKind) String() string {
	switch k {
	case CredentialAPIKey:
		return "api_key"
	case CredentialSession:
		return "session"
	default:
		return "none"
	}
}

// Credential is what a request presented to authenticate itself.
type Credential struct {
	// Kind is CredentialNone when Value is empty.
	Kind CredentialKind
	// Value is the key or token as presented, trimmed. It aliases the
	// request's header memory (no copy is made).
	Value string
	// FromCookie is set when the value came from a session cookie rather
	// than the Authorization header.
	FromCookie bool
}

// DefaultFleetCookie is the fleet session cookie name used when
// CookieNames.Fleet is empty.
const DefaultFleetCookie = "queen_session"

// APIKeyPrefix starts every API key. A presented value with this prefix is
// routed to the API-key path; any other value is treated as a session token.
const APIKeyPrefix = "qk_"

const (
	bearerPrefix     = "Bearer "
	hostCookiePrefix = "__Host-"
	cellCookieSuffix = "_cell"
)

// CookieNames names the session cookies.
type CookieNames struct {
	// Fleet is the fleet-wide session cookie (default "queen_session"). The
	// cell-scoped cookie derives from it: "__Host-<Fleet>_cell" over HTTPS,
	// "<Fleet>_cell" over plain HTTP.
	Fleet string
}

// fleet returns the fleet cookie name with its default applied.
func (n CookieNames) fleet() string {
	if n.Fleet == "" {
		return DefaultFleetCookie
	}
	return n.Fleet
}

// CellCookie returns the name of the cell-scoped cookie for a request that
// is (secure) or is not considered HTTPS.
func (n CookieNames) CellCookie(secure bool) string {
	if secure {
		return hostCookiePrefix + n.fleet() + cellCookieSuffix
	}
	return n.fleet() + cellCookieSuffix
}

// ErrDuplicateCredentialHeader is returned when a request carries more than
// one Authorization header value. Which one a downstream component would
// honour is ambiguous, so the gateway refuses the request (400).
var ErrDuplicateCredentialHeader = errors.New("more than one Authorization header")

// ExtractCredential finds the credential of a request on an API surface:
//
//  1. The Authorization header wins: a leading literal "Bearer " (case
//     sensitive) is stripped, else the whole value is used; the result is
//     trimmed. A non-empty value starting "qk_" is an API key, any other
//     non-empty value a session token.
//  2. Otherwise a top-level navigation (Sec-Fetch-Mode: navigate, any case)
//     presents no credential: cookies are not honoured on navigations, which
//     closes the SameSite=Lax link-CSRF hole.
//  3. Otherwise a session cookie: the cell cookie (see CookieNames) before
//     the fleet cookie. Names match exactly, the first non-empty occurrence
//     wins, and a value starting "qk_" is ignored (cookies never carry API
//     keys).
//
// secure says whether the request is considered HTTPS (it selects the
// "__Host-" cell cookie name). More than one Authorization value yields
// ErrDuplicateCredentialHeader. The Authorization path does not allocate.
func ExtractCredential(h http.Header, names CookieNames, secure bool) (Credential, error) {
	return extractCredential(h, names, secure, false)
}

// ExtractDocumentCredential is ExtractCredential for the document surface
// (the web app shell), which accepts the session cookie on top-level
// navigations: rule 2 does not apply.
func ExtractDocumentCredential(h http.Header, names CookieNames, secure bool) (Credential, error) {
	return extractCredential(h, names, secure, true)
}

func extractCredential(h http.Header, names CookieNames, secure, allowNavigate bool) (Credential, error) {
	auth := h["Authorization"]
	if len(auth) > 1 {
		return Credential{}, ErrDuplicateCredentialHeader
	}
	if len(auth) == 1 {
		if v := bearerValue(auth[0]); v != "" {
			return Credential{Kind: kindOf(v), Value: v}, nil
		}
	}
	if !allowNavigate && isNavigation(h["Sec-Fetch-Mode"]) {
		return Credential{}, nil
	}
	if v := sessionCookie(h["Cookie"], names.fleet(), secure); v != "" {
		return Credential{Kind: CredentialSession, Value: v, FromCookie: true}, nil
	}
	return Credential{}, nil
}

// bearerValue strips a leading "Bearer " (case-sensitive) and trims.
func bearerValue(v string) string {
	return strings.TrimSpace(strings.TrimPrefix(v, bearerPrefix))
}

func kindOf(v string) CredentialKind {
	if strings.HasPrefix(v, APIKeyPrefix) {
		return CredentialAPIKey
	}
	return CredentialSession
}

// isNavigation reports whether any Sec-Fetch-Mode value is "navigate".
func isNavigation(modes []string) bool {
	for _, m := range modes {
		if strings.EqualFold(strings.TrimSpace(m), "navigate") {
			return true
		}
	}
	return false
}

// sessionCookie returns the cell cookie's value if one is usable, else the
// fleet cookie's, else "". All Cookie header lines are scanned in order
// (HTTP/2 and HTTP/3 clients may split cookies over several lines).
func sessionCookie(lines []string, fleet string, secure bool) string {
	var fleetValue string
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			name, value, ok := strings.Cut(pair, "=")
			if !ok {
				continue
			}
			value = strings.TrimSpace(value)
			if value == "" || strings.HasPrefix(value, APIKeyPrefix) {
				continue
			}
			name = strings.TrimSpace(name)
			if isCellCookie(name, fleet, secure) {
				return value
			}
			if fleetValue == "" && name == fleet {
				fleetValue = value
			}
		}
	}
	return fleetValue
}

// isCellCookie reports whether name is the cell cookie's name, without
// building that name.
func isCellCookie(name, fleet string, secure bool) bool {
	if secure {
		var ok bool
		if name, ok = strings.CutPrefix(name, hostCookiePrefix); !ok {
			return false
		}
	}
	base, ok := strings.CutSuffix(name, cellCookieSuffix)
	return ok && base == fleet
}

// apiKeyRandomLen is the length of an API key's random part: 32 bytes in
// unpadded base64url.
const apiKeyRandomLen = 43

// maxAPIKeyEnvLen bounds the <env> part of an API key.
const maxAPIKeyEnvLen = 16

// NewAPIKey generates a fresh API key "qk_<env>_<43 base64url chars>" from
// 32 random bytes, and returns it with the hash under which it is stored.
// env must match ^[a-z0-9]{1,16}$ (for example "live").
func NewAPIKey(env string) (plaintext, hash string, err error) {
	if !validKeyEnv(env) {
		return "", "", fmt.Errorf("new api key: environment %q must be 1 to %d characters of a-z and 0-9", env, maxAPIKeyEnvLen)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", fmt.Errorf("new api key: reading random bytes: %w", err)
	}
	plaintext = APIKeyPrefix + env + "_" + base64.RawURLEncoding.EncodeToString(raw[:])
	return plaintext, HashAPIKey(plaintext), nil
}

// WellFormedAPIKey reports whether s has the shape of a generated API key:
// "qk_", an environment of 1 to 16 characters [a-z0-9], "_", and exactly 43
// base64url characters [A-Za-z0-9_-]. The gateway refuses a malformed key
// without a database lookup.
func WellFormedAPIKey(s string) bool {
	rest, ok := strings.CutPrefix(s, APIKeyPrefix)
	if !ok || len(rest) < apiKeyRandomLen+2 {
		return false
	}
	split := len(rest) - apiKeyRandomLen - 1
	if rest[split] != '_' || !validKeyEnv(rest[:split]) {
		return false
	}
	for i := split + 1; i < len(rest); i++ {
		if !isBase64URL(rest[i]) {
			return false
		}
	}
	return true
}

func validKeyEnv(env string) bool {
	if env == "" || len(env) > maxAPIKeyEnvLen {
		return false
	}
	for i := 0; i < len(env); i++ {
		c := env[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func isBase64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
