package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/queengate/queengate/internal/apierror"
)

// normalizeOrigin turns an origin (or any http(s) URL) into
// "scheme://host[:port]", lower-cased, userinfo dropped, the scheme's
// default port dropped. Anything else (other schemes, "null", bad hosts or
// ports) is not an origin.
func normalizeOrigin(raw string) (string, bool) {
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

// requestOrigin is the origin the request was sent to.
func (s *Surface) requestOrigin(r *http.Request) string {
	scheme := "http"
	if s.o.IsHTTPS(r) {
		scheme = "https"
	}
	o, ok := normalizeOrigin(scheme + "://" + r.Host)
	if !ok {
		return ""
	}
	return o
}

// originAllowed reports whether a (normalised) origin may make
// credentialed writes: the request's own origin, the public URL's, or a
// listed CORS origin.
func (s *Surface) originAllowed(origin string, r *http.Request) bool {
	if origin == "" {
		return false
	}
	if origin == s.requestOrigin(r) || origin == s.publicOrigin {
		return true
	}
	return s.corsOrigins[origin]
}

// csrfVerdict decides a state-changing request: Origin, else Referer,
// else Sec-Fetch-Site must say it comes from an allowed origin; a request
// with none of them passes only without a session cookie.
func (s *Surface) csrfVerdict(r *http.Request) *apierror.Error {
	if vals := r.Header.Values("Origin"); len(vals) > 0 {
		o, ok := normalizeOrigin(vals[0])
		if !ok || !s.originAllowed(o, r) {
			return csrfRefusal("cross-origin request refused")
		}
		return nil
	}
	if vals := r.Header.Values("Referer"); len(vals) > 0 {
		o, ok := normalizeOrigin(vals[0])
		if !ok || !s.originAllowed(o, r) {
			return csrfRefusal("cross-origin referer refused")
		}
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		if strings.EqualFold(strings.TrimSpace(site), "same-origin") {
			return nil
		}
		return csrfRefusal("cross-site request refused")
	}
	if s.hasSessionCookie(r) {
		return csrfRefusal("a cookie-authenticated request must carry Origin")
	}
	return nil
}

func csrfRefusal(msg string) *apierror.Error {
	return apiErr(http.StatusForbidden, apierror.CSRFRejected, msg)
}

// hasSessionCookie reports whether the request carries any of the session
// cookies, whatever their value.
func (s *Surface) hasSessionCookie(r *http.Request) bool {
	fleet := s.o.Cookies.Fleet
	if fleet == "" {
		fleet = "queen_session"
	}
	for _, c := range r.Cookies() {
		switch c.Name {
		case fleet, fleet + "_cell", "__Host-" + fleet + "_cell":
			return true
		}
	}
	return false
}

const (
	corsMethods = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
	corsHeaders = "authorization, content-type, x-requested-with, x-queen-act-cluster"
	corsExpose  = "retry-after, x-queen-request-id"
)

// cors applies the CORS allowlist. It answers preflights itself (returning
// true); for other requests it only adds headers.
func (s *Surface) cors(w http.ResponseWriter, r *http.Request) bool {
	if !s.corsAny && len(s.corsOrigins) == 0 {
		return false
	}
	raw := r.Header.Get("Origin")
	if raw == "" {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	origin, ok := normalizeOrigin(raw)
	listed := ok && s.corsOrigins[origin]
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	if preflight {
		if !listed && !s.corsAny {
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		s.allowOrigin(h, raw, listed)
		h.Set("Access-Control-Allow-Methods", corsMethods)
		h.Set("Access-Control-Allow-Headers", corsHeaders)
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	if listed || s.corsAny {
		s.allowOrigin(h, raw, listed)
		h.Set("Access-Control-Expose-Headers", corsExpose)
	}
	return false
}

func (s *Surface) allowOrigin(h http.Header, raw string, listed bool) {
	if listed {
		h.Set("Access-Control-Allow-Origin", strings.TrimSpace(raw))
		h.Set("Access-Control-Allow-Credentials", "true")
		return
	}
	h.Set("Access-Control-Allow-Origin", "*")
}
