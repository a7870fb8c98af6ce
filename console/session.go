package console

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// ShortTokenTTL is the life of the bearer tokens /auth/session-token
// mints.
const ShortTokenTTL = 900 * time.Second

// verifySession checks a session token: signature and claims, then the
// deny-list (its own id and its session's).
func (s *Surface) verifySession(ctx context.Context, token string) (tenancy.SessionClaims, *apierror.Error) {
	claims, err := s.o.Identities.VerifyLiveSession(ctx, s.o.Sessions, token)
	if err != nil {
		s.o.Log.Debug("session token refused", zap.Error(err))
		return claims, errInvalidCredential
	}
	return claims, nil
}

// cookieSession reads the session cookie alone (an Authorization header is
// not looked at): the identity routes that are cookie-only use it.
func (s *Surface) cookieSession(r *http.Request) (string, bool) {
	h := http.Header{"Cookie": r.Header.Values("Cookie")}
	if v := r.Header.Values("Sec-Fetch-Mode"); len(v) > 0 {
		h["Sec-Fetch-Mode"] = v
	}
	cred, err := tenancy.ExtractCredential(h, s.o.Cookies, s.o.IsHTTPS(r))
	if err != nil || cred.Kind != tenancy.CredentialSession {
		return "", false
	}
	return cred.Value, true
}

// secureCookies reports whether cookies set on this response must be
// Secure: over HTTPS, and always with a cookie domain.
func (s *Surface) secureCookies(r *http.Request) bool {
	return s.o.IsHTTPS(r) || s.o.CookieDomain != ""
}

func (s *Surface) fleetCookie() string {
	if s.o.Cookies.Fleet == "" {
		return tenancy.DefaultFleetCookie
	}
	return s.o.Cookies.Fleet
}

// setSessionCookie sets the fleet session cookie.
func (s *Surface) setSessionCookie(w http.ResponseWriter, r *http.Request, token string) {
	http.SetCookie(w, &http.Cookie{
		Name: s.fleetCookie(), Value: token, Path: "/", Domain: s.o.CookieDomain,
		MaxAge: int(s.o.SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: s.secureCookies(r),
	})
}

// clearSessionCookies expires the fleet cookie and both forms of the cell
// cookie.
func (s *Surface) clearSessionCookies(w http.ResponseWriter, r *http.Request) {
	fleet := s.fleetCookie()
	secure := s.secureCookies(r)
	http.SetCookie(w, &http.Cookie{Name: fleet, Value: "", Path: "/", Domain: s.o.CookieDomain,
		MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secure})
	http.SetCookie(w, &http.Cookie{Name: fleet + "_cell", Value: "", Path: "/",
		MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secure})
	if s.o.IsHTTPS(r) {
		http.SetCookie(w, &http.Cookie{Name: "__Host-" + fleet + "_cell", Value: "", Path: "/",
			MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: true})
	}
}

// startSession mints the token of a fresh login session (a new sid),
// records the login, sets the cookie and redirects to next.
func (s *Surface) startSession(w http.ResponseWriter, r *http.Request, userID, next string) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	token, err := s.mintAfterEnd(ctx, userID)
	if err != nil {
		s.o.Log.Error("session not minted", zap.Error(err))
		writeFailure(w, r, errInternal)
		return
	}
	if _, err := s.o.Pool.Exec(ctx, `SELECT queen_proxy.record_user_login($1::uuid)`, userID); err != nil {
		s.o.Log.Warn("login not recorded", zap.String("user", userID), zap.Error(err))
	}
	s.setSessionCookie(w, r, token)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, SafeNext(next), http.StatusSeeOther)
}

// canMint reports whether sessions can be issued here.
func (s *Surface) canMint() bool { return s.o.Sessions != nil && s.o.Sessions.CanMint() }

// cookieClaims reads and verifies the session of the request's cookie,
// answering the refusal itself when there is none or it does not verify.
func (s *Surface) cookieClaims(w http.ResponseWriter, r *http.Request) (tenancy.SessionClaims, bool) {
	token, ok := s.cookieSession(r)
	if !ok {
		writeError(w, errNoSession)
		return tenancy.SessionClaims{}, false
	}
	claims, e := s.verifySession(r.Context(), token)
	if e != nil {
		writeError(w, e)
		return tenancy.SessionClaims{}, false
	}
	return claims, true
}
