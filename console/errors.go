package console

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/internal/apierror"
)

const headerRequestID = "X-Queen-Request-Id"

func apiErr(status int, code apierror.Code, msg string) *apierror.Error {
	return &apierror.Error{Status: status, Code: code, Message: msg}
}

// The refusals of the surface. Where the data plane has the same refusal,
// the message is the same.
var (
	errNotFoundRoute     = apiErr(http.StatusNotFound, apierror.NotFound, "no such route")
	errMethod            = apiErr(http.StatusMethodNotAllowed, apierror.InvalidRequest, "method not allowed")
	errClusterUnknown    = apiErr(http.StatusMisdirectedRequest, apierror.ClusterUnknown, "no cluster for this host")
	errNotConfigured     = apiErr(http.StatusServiceUnavailable, apierror.NotConfigured, "this gateway does not issue sessions")
	errDuplicateHeader   = apiErr(http.StatusBadRequest, apierror.BadRequest, "a credential header (Authorization, x-queen-act-cluster) may be sent only once")
	errMissingCredential = apiErr(http.StatusUnauthorized, apierror.Unauthorized, "missing bearer credential")
	errInvalidCredential = apiErr(http.StatusUnauthorized, apierror.Unauthorized, "invalid credential")
	errNoSession         = apiErr(http.StatusUnauthorized, apierror.Unauthorized, "no session")
	errSessionGone       = apiErr(http.StatusUnauthorized, apierror.Unauthorized, "session no longer valid")
	errUnknownKey        = apiErr(http.StatusUnauthorized, apierror.Unauthorized, "unknown or revoked api key")
	errKeyOnConsole      = apiErr(http.StatusForbidden, apierror.Forbidden, "api keys cannot access the console (human session required)")
	errKeyClusterMismat  = apiErr(http.StatusForbidden, apierror.Forbidden, "key/cluster mismatch")
	errKeyActAs          = apiErr(http.StatusForbidden, apierror.Forbidden, "api keys are bound to their own cluster; x-queen-act-cluster is not honoured for them")
	errTokenOtherCluster = apiErr(http.StatusForbidden, apierror.Forbidden, "token not valid for this cluster")
	errNoRole            = apiErr(http.StatusForbidden, apierror.Forbidden, "no role on this cluster")
	errNoSuchActCluster  = apiErr(http.StatusForbidden, apierror.Forbidden, "no such cluster, or no role on it")
	errNameACluster      = apiErr(http.StatusForbidden, apierror.Forbidden, "this host serves several clusters; name one with x-queen-act-cluster")
	errAdminRequired     = apiErr(http.StatusForbidden, apierror.Forbidden, "admin role required")
	errClusterSuspended  = apiErr(http.StatusForbidden, apierror.ClusterSuspended, "cluster suspended")
	errOperatorBlocked   = apiErr(http.StatusNotFound, apierror.RouteBlocked, "not available")
	errDatabase          = apiErr(http.StatusBadGateway, apierror.BadGateway, "control-plane database unavailable")
	errInternal          = apiErr(http.StatusInternalServerError, apierror.InternalError, "internal error")
	errBodyTooLarge      = apiErr(http.StatusRequestEntityTooLarge, apierror.PayloadTooLarge, "request body exceeds cap")
	errStandingWithdrawn = apiErr(http.StatusForbidden, apierror.Forbidden,
		"your operator status or admin role was withdrawn; nothing was changed")
)

// authorityRefusal is the refusal for the control plane's authority check
// (migration 023): the database refused the act because the actor, when
// the act committed, no longer held the operator bit or the admin role it
// needs. Nil for any other error.
func authorityRefusal(err error) *apierror.Error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" && pgErr.ConstraintName == "operations_user_authority" {
		return errStandingWithdrawn
	}
	return nil
}

func invalid(msg string) *apierror.Error {
	return apiErr(http.StatusBadRequest, apierror.InvalidRequest, msg)
}

// argInvalid is the 400 for an argument that the shared operator checks
// (package controlplane) refused; the message names the field.
func argInvalid(field string, err error) *apierror.Error {
	return invalid(field + ": " + err.Error())
}

// validRole reads *role as the shared operator checks do and stores the
// role as the schema spells it.
func validRole(role *string) bool {
	r, ok := checkedRole(*role)
	if ok {
		*role = r
	}
	return ok
}

func notFound(msg string) *apierror.Error { return apiErr(http.StatusNotFound, apierror.NotFound, msg) }

func conflict(msg string) *apierror.Error { return apiErr(http.StatusConflict, apierror.Conflict, msg) }

// writeError sends the error envelope with the response's request id.
func writeError(w http.ResponseWriter, e *apierror.Error) {
	apierror.Write(w, e, w.Header().Get(headerRequestID))
}

// writeJSON sends v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, errInternal)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// wantsHTML reports whether the client is a browser that takes HTML
// (navigations to the OAuth callbacks); others get the JSON envelope.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// writeFailure answers a browser with a small HTML page naming the
// problem, anyone else with the JSON envelope.
func writeFailure(w http.ResponseWriter, r *http.Request, e *apierror.Error) {
	if !wantsHTML(r) {
		writeError(w, e)
		return
	}
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	renderPage(w, e.Status, pageData{
		Title: "Sign-in failed", Error: e.Message, Code: string(e.Code),
		RequestID: h.Get(headerRequestID), Next: "/",
	})
}

// pageCSP is the policy of the surface's own HTML pages: no script at
// all, inline styles only, forms to this origin.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type providerButton struct {
	Label string
	URL   string
}

type pageData struct {
	Title     string
	Error     string
	Code      string
	RequestID string
	Next      string
	Email     string
	Form      bool
	CanMint   bool
	Providers []providerButton
	// ForgotLink offers "Forgot your password?" under the sign-in form.
	ForgotLink bool
	// Notice is a message that is not an error.
	Notice string
	// Forgot shows the form that asks for a reset link.
	Forgot bool
	// SetPassword shows a form that sets a password with a link's token;
	// Confirm, a form that only posts the token.
	SetPassword *setPasswordForm
	Confirm     *setPasswordForm
}

// setPasswordForm is a form that posts an e-mailed link's token.
type setPasswordForm struct {
	Action string
	Token  string
	Intro  string
	Button string
	// Providers offer accepting through a provider sign-in instead (URL
	// holds the provider's name).
	Providers []providerButton
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · Queen</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;background:#f4f5f7;color:#1d2330;margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center}
main{background:#fff;border-radius:10px;box-shadow:0 2px 12px rgba(0,0,0,.08);padding:2rem 2.2rem;width:100%;max-width:22rem}
h1{font-size:1.3rem;margin:0 0 1.2rem}
label{display:block;font-size:.85rem;margin:.8rem 0 .3rem;color:#4a5263}
input{width:100%;box-sizing:border-box;padding:.55rem .6rem;border:1px solid #c9ced8;border-radius:6px;font-size:1rem}
button,a.button{display:block;width:100%;box-sizing:border-box;margin-top:1.2rem;padding:.6rem;border:0;border-radius:6px;background:#3346d3;color:#fff;font-size:1rem;text-align:center;text-decoration:none;cursor:pointer}
a.provider,button.provider{background:#fff;color:#1d2330;border:1px solid #c9ced8;margin-top:.6rem}
.notice{background:#e9f6ee;color:#1d5b34;border-radius:6px;padding:.6rem .7rem;font-size:.9rem}
.error{background:#fdecec;color:#8a1c1c;border-radius:6px;padding:.6rem .7rem;font-size:.9rem}
.or{text-align:center;color:#8a91a0;font-size:.8rem;margin-top:1.2rem}
small{color:#8a91a0}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{if .Error}}<p class="error" role="alert" data-testid="login-error">{{.Error}}</p>{{end}}
{{if .Notice}}<p class="notice" role="status" data-testid="page-notice">{{.Notice}}</p>{{end}}
{{if .Forgot}}
<form method="post" action="/auth/forgot">
<p><small>Enter the address of your account; a link to choose a new password is sent to it.</small></p>
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" required value="{{.Email}}" autofocus data-testid="forgot-email">
<button type="submit" data-testid="forgot-submit">Send the link</button>
</form>
{{else if .SetPassword}}{{with .SetPassword}}
<form method="post" action="{{.Action}}">
{{if .Intro}}<p data-testid="link-intro">{{.Intro}}</p>{{end}}
<input type="hidden" name="token" value="{{.Token}}">
<input type="email" name="email" autocomplete="username" value="{{$.Email}}" hidden readonly>
<label for="password">New password (12 to 128 characters)</label>
<input id="password" name="password" type="password" autocomplete="new-password" minlength="12" maxlength="128" required autofocus data-testid="new-password">
<button type="submit" data-testid="set-password-submit">{{.Button}}</button>
</form>
{{if .Providers}}<p class="or">or</p>{{end}}
{{range .Providers}}<form method="post" action="{{$.SetPassword.Action}}">
<input type="hidden" name="token" value="{{$.SetPassword.Token}}">
<input type="hidden" name="provider" value="{{.URL}}">
<button type="submit" class="provider" data-testid="accept-with-{{.URL}}">Accept with {{.Label}}</button>
</form>
{{end}}{{end}}
{{else if .Confirm}}{{with .Confirm}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="token" value="{{.Token}}">
<button type="submit" data-testid="confirm-submit">{{.Button}}</button>
</form>{{end}}
{{else if .Form}}{{if .CanMint}}
<form method="post" action="/auth/login">
<input type="hidden" name="next" value="{{.Next}}">
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" required value="{{.Email}}" autofocus data-testid="login-email">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required data-testid="login-password">
<button type="submit" data-testid="login-submit">Sign in</button>
</form>
{{if .ForgotLink}}<p class="or"><a href="/auth/forgot" data-testid="forgot-link">Forgot your password?</a></p>{{end}}
{{if .Providers}}<p class="or">or</p>{{end}}
{{range .Providers}}<a class="button provider" href="{{.URL}}">Continue with {{.Label}}</a>
{{end}}
{{else}}<p>This host verifies sessions but does not issue them.</p>{{end}}
{{else}}<a class="button" href="/auth/login?next={{.Next}}" data-testid="back-to-sign-in">Back to sign-in</a>{{end}}
{{if .Code}}<p><small>{{.Code}}{{if .RequestID}} · {{.RequestID}}{{end}}</small></p>{{end}}
</main>
</body>
</html>
`))

// renderPage writes one of the surface's HTML pages.
func renderPage(w http.ResponseWriter, status int, d pageData) {
	var b strings.Builder
	if err := pageTemplate.Execute(&b, d); err != nil {
		writeError(w, errInternal)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// standingWithdrawn answers the control plane's authority refusal, and
// drops this process's cached standing of users, which the database has
// just shown to be stale; false for any other error.
func (s *Surface) standingWithdrawn(w http.ResponseWriter, err error) bool {
	e := authorityRefusal(err)
	if e == nil {
		return false
	}
	s.o.Identities.InvalidateUsers()
	writeError(w, e)
	return true
}
