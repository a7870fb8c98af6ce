// Package crossorigin is the gateway's one cross-site request rule, shared
// by the console API and the data plane: a request that changes state and
// rides on a browser's session cookie must show that it comes from an
// origin allowed to make it. Bearer credentials need no such check (a page
// on another site cannot attach them), so callers apply the rule only to
// cookie-authenticated requests.
package crossorigin

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Policy is the set of origins allowed to make credentialed writes besides
// the request's own: the public URL's origin and a CORS allowlist.
type Policy struct {
	publicOrigin string
	allowed      map[string]bool
	isHTTPS      func(*http.Request) bool
}

// NewPolicy builds a policy from normalised origins (see NormalizeOrigin;
// values that are not origins are ignored, so callers validate their
// configuration first). isHTTPS tells which scheme a request arrived on
// (nil: r.TLS != nil).
func NewPolicy(publicOrigin string, allowed []string, isHTTPS func(*http.Request) bool) *Policy {
	if isHTTPS == nil {
		isHTTPS = func(r *http.Request) bool { return r.TLS != nil }
	}
	p := &Policy{publicOrigin: publicOrigin, allowed: make(map[string]bool, len(allowed)), isHTTPS: isHTTPS}
	for _, o := range allowed {
		if n, ok := NormalizeOrigin(o); ok {
			p.allowed[n] = true
		}
	}
	return p
}

// SafeMethod reports the methods that must not change state, which the
// cross-site rule lets through: GET, HEAD, OPTIONS and TRACE. A request
// that changes state anyway (a consuming pop) is for the caller to name.
func SafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace
}

// RequestOrigin is the origin the request was sent to ("" if its Host is
// no valid host).
func (p *Policy) RequestOrigin(r *http.Request) string {
	scheme := "http"
	if p.isHTTPS(r) {
		scheme = "https"
	}
	o, ok := NormalizeOrigin(scheme + "://" + r.Host)
	if !ok {
		return ""
	}
	return o
}

// OriginAllowed reports whether a normalised origin may make credentialed
// writes: the request's own origin, the public URL's, or a listed one.
func (p *Policy) OriginAllowed(origin string, r *http.Request) bool {
	if origin == "" {
		return false
	}
	if origin == p.RequestOrigin(r) || origin == p.publicOrigin {
		return true
	}
	return p.allowed[origin]
}

// Refusal decides a state-changing request. Origin, else Referer, else
// Sec-Fetch-Site must say it comes from an allowed origin; a request with
// none of them passes only when it carries no session cookie. It returns
// "" when the request may go on, else the reason it is refused.
func (p *Policy) Refusal(r *http.Request, hasSessionCookie bool) string {
	if vals := r.Header.Values("Origin"); len(vals) > 0 {
		o, ok := NormalizeOrigin(vals[0])
		if !ok || !p.OriginAllowed(o, r) {
			return "cross-origin request refused"
		}
		return ""
	}
	if vals := r.Header.Values("Referer"); len(vals) > 0 {
		o, ok := NormalizeOrigin(vals[0])
		if !ok || !p.OriginAllowed(o, r) {
			return "cross-origin referer refused"
		}
		return ""
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		if strings.EqualFold(strings.TrimSpace(site), "same-origin") {
			return ""
		}
		return "cross-site request refused"
	}
	if hasSessionCookie {
		return "a cookie-authenticated request must carry Origin"
	}
	return ""
}

// NormalizeOrigin turns an origin (or any http(s) URL) into
// "scheme://host[:port]", lower-cased, userinfo dropped, the scheme's
// default port dropped. Anything else (other schemes, "null", bad hosts or
// ports) is not an origin.
func NormalizeOrigin(raw string) (string, bool) {
	raw = strings.TrimSpace(raw)
	if raw == "" || strings.EqualFold(raw, "null") || len(raw) > 2048 {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" || !validHost(host) {
		return "", false
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", false
		}
		port = strconv.Itoa(n)
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port, true
	}
	return scheme + "://" + host, true
}

func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == ':' || c == '_') {
			return false
		}
	}
	return true
}
