package console

import (
	"net/http"
	"strings"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/crossorigin"
)

// normalizeOrigin is the shared origin normaliser (internal/crossorigin).
func normalizeOrigin(raw string) (string, bool) { return crossorigin.NormalizeOrigin(raw) }

// requestOrigin is the origin the request was sent to.
func (s *Surface) requestOrigin(r *http.Request) string { return s.crossSite.RequestOrigin(r) }

// csrfVerdict decides a state-changing request with the gateway's one
// cross-site rule (internal/crossorigin), which the data plane applies to
// cookie-authenticated writes too.
func (s *Surface) csrfVerdict(r *http.Request) *apierror.Error {
	if reason := s.crossSite.Refusal(r, s.hasSessionCookie(r)); reason != "" {
		return csrfRefusal(reason)
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
