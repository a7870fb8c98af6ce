package console

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// serveAuth dispatches /auth/*.
func (s *Surface) serveAuth(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch p {
	case "/auth/login":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.loginPage(w, r)
		case http.MethodPost:
			s.login(w, r)
		default:
			writeError(w, errMethod)
		}
		return
	case "/auth/logout":
		switch {
		case r.Method == http.MethodPost:
			s.logout(w, r)
		case r.Method == http.MethodGet && wantsHTML(r):
			// A browser sent to the address signs out as the console's
			// button does, and lands on the sign-in page, not on JSON.
			s.endSession(w, r)
			http.Redirect(w, r, "/auth/login", http.StatusSeeOther)
		default:
			writeError(w, errMethod)
		}
		return
	case "/auth/me":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, errMethod)
			return
		}
		s.me(w, r)
		return
	case "/auth/password":
		if r.Method != http.MethodPost {
			writeError(w, errMethod)
			return
		}
		s.changePassword(w, r)
		return
	case "/auth/forgot", "/auth/reset", "/auth/invitation", "/auth/verify":
		s.serveLinks(w, r, p)
		return
	case "/auth/session-token":
		if r.Method != http.MethodGet {
			writeError(w, errMethod)
			return
		}
		s.sessionToken(w, r)
		return
	}
	s.serveProvider(w, r, strings.TrimPrefix(p, "/auth/"))
}

// serveProvider answers /auth/<provider> (the start of a sign-in) and
// /auth/<provider>/callback, where <provider> is google, github or
// oidc/<name>.
func (s *Surface) serveProvider(w http.ResponseWriter, r *http.Request, rest string) {
	path, callback := strings.CutSuffix(rest, "/callback")
	var prov *oauthProvider
	for _, q := range s.providers {
		if q.path == path {
			prov = q
		}
	}
	if prov == nil {
		name, generic := strings.CutPrefix(path, "oidc/")
		switch {
		case path == "google" || path == "github":
			writeFailure(w, r, notConfigured(path+" sign-in is not configured"))
		case generic && name != "" && !strings.Contains(name, "/"):
			writeFailure(w, r, notConfigured("no OpenID Connect provider "+strconv.Quote(name)+" is configured"))
		default:
			writeError(w, errNotFoundRoute)
		}
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, errMethod)
		return
	}
	if callback {
		s.oauthCallback(w, r, prov)
	} else {
		s.oauthStart(w, r, prov)
	}
}

// loginPage is the sign-in page.
func (s *Surface) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	next := SafeNext(q.Get("next"))
	d := s.loginData(next, "", "")
	if q.Get("done") == "reset" {
		d.Notice = "Your password was changed and every session of the account ended. Sign in with the new password."
		if e, ok := normalEmail(q.Get("email")); ok {
			d.Email = e
		}
	}
	renderPage(w, http.StatusOK, d)
}

func (s *Surface) renderLogin(w http.ResponseWriter, status int, next, email, msg string) {
	renderPage(w, status, s.loginData(next, email, msg))
}

func (s *Surface) loginData(next, email, msg string) pageData {
	d := pageData{Title: "Sign in", Form: true, CanMint: s.canMint(), Next: next, Email: email, Error: msg, ForgotLink: s.mailOn()}
	q := "?next=" + url.QueryEscape(next)
	for _, p := range s.providers {
		d.Providers = append(d.Providers, providerButton{Label: p.label, URL: "/auth/" + p.path + q})
	}
	return d
}

// login verifies an e-mail and password and starts a session.
func (s *Surface) login(w http.ResponseWriter, r *http.Request) {
	if !s.canMint() {
		writeError(w, errNotConfigured)
		return
	}
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, errBodyTooLarge)
			return
		}
		writeError(w, invalid("the sign-in form could not be read"))
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostForm.Get("email")))
	password := r.PostForm.Get("password")
	next := SafeNext(r.PostForm.Get("next"))
	ip := s.o.ClientIP(r)
	now := s.o.Now()
	if ok, wait := s.o.Guard.Check(ip, email, now); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.renderLogin(w, http.StatusTooManyRequests, next, email,
			"Too many sign-in attempts. Try again in "+strconv.Itoa(secs)+" seconds.")
		return
	}
	userID, ok, err := s.checkPassword(r.Context(), email, password)
	if err != nil {
		s.o.Log.Error("login lookup failed", zap.Error(err))
		s.renderLogin(w, http.StatusBadGateway, next, email, "Sign-in is unavailable right now. Try again shortly.")
		return
	}
	if !ok {
		s.o.Guard.Fail(ip, email, now)
		s.renderLogin(w, http.StatusUnauthorized, next, email, "Invalid email or password.")
		return
	}
	s.o.Guard.Succeed(email)
	s.startSession(w, r, userID, next)
}

// checkPassword looks the user up and verifies the password. Unknown
// e-mails and users without a password verify against a dummy hash, so
// they cost the same time as a wrong password.
func (s *Surface) checkPassword(ctx context.Context, email, password string) (string, bool, error) {
	var id string
	var hash *string
	ok := email != "" && len(email) <= maxAccountLen && password != "" && len(password) <= 1024
	if ok {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := s.o.Pool.QueryRow(ctx, `SELECT id::text, password_hash FROM queen_proxy.users WHERE email = $1`, email).Scan(&id, &hash)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			ok = false
		case err != nil:
			return "", false, err
		}
	}
	if !ok || hash == nil || *hash == "" {
		_, _ = VerifyPassword(dummyHash(), password)
		return "", false, nil
	}
	match, err := VerifyPassword(*hash, password)
	if err != nil {
		s.o.Log.Warn("stored password hash not verifiable", zap.String("user", id), zap.Error(err))
		return "", false, nil
	}
	return id, match, nil
}

// logout revokes the presented session (every token of its sid) on every
// gateway, and clears the cookies. It always answers {"ok":true}.
func (s *Surface) logout(w http.ResponseWriter, r *http.Request) {
	s.endSession(w, r)
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// endSession revokes the presented session, if any, and clears the
// session cookies.
func (s *Surface) endSession(w http.ResponseWriter, r *http.Request) {
	cred, err := tenancy.ExtractCredential(r.Header, s.o.Cookies, s.o.IsHTTPS(r))
	if err == nil && cred.Kind == tenancy.CredentialSession && s.o.Sessions != nil {
		if claims, err := s.o.Sessions.Verify(cred.Value); err == nil {
			s.revokeSession(r.Context(), claims)
		}
	}
	s.clearSessionCookies(w, r)
}

// revokeSession puts the session's sid on the deny-list (revoke_session
// notifies every gateway to drop its cached answers) and pins it here at
// once. The row lives as long as any token of the session can: none
// outlives its login plus the session TTL, and the login came before this
// token was issued.
func (s *Surface) revokeSession(ctx context.Context, c tenancy.SessionClaims) {
	s.o.Identities.NoteRevoked(c.SessionID, c.TokenID)
	expires := c.ExpiresAt
	if !c.IssuedAt.IsZero() {
		if until := c.IssuedAt.Add(s.o.SessionTTL); until.After(expires) {
			expires = until
		}
	}
	expires = expires.Add(time.Minute)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.o.Pool.Exec(ctx, `SELECT queen_proxy.revoke_session($1, $2, 'user', $3::uuid)`,
		c.SessionID, expires, c.UserID); err != nil {
		s.o.Log.Warn("session revocation not recorded", zap.String("user", c.UserID), zap.Error(err))
	}
}

// sessionToken mints a short bearer token of the cookie's session.
func (s *Surface) sessionToken(w http.ResponseWriter, r *http.Request) {
	if !s.canMint() {
		writeError(w, errNotConfigured)
		return
	}
	claims, ok := s.cookieClaims(w, r)
	if !ok {
		return
	}
	if !s.o.Identities.UserExists(r.Context(), claims.UserID) {
		writeError(w, errSessionGone)
		return
	}
	// A short token never outlives the session it was minted from, so the
	// session's deny-list row covers it.
	ttl := min(ShortTokenTTL, claims.ExpiresAt.Sub(s.o.Now()).Truncate(time.Second))
	if ttl < time.Second {
		writeError(w, errInvalidCredential)
		return
	}
	short, _, err := s.o.Sessions.Mint(claims.UserID, claims.SessionID, claims.Role, claims.Cluster, ttl)
	if err != nil {
		writeError(w, errInternal)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"token": short, "expires_in": int(ttl / time.Second)})
}

// serveJWKS publishes the session verification key.
func (s *Surface) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, errMethod)
		return
	}
	body := []byte(`{"keys":[]}`)
	if s.o.Sessions != nil {
		body = s.o.Sessions.JWKS()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// me is the session document (or, for an API key, the key's).
func (s *Surface) me(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Values("Authorization")
	if len(auth) > 1 {
		writeError(w, errDuplicateHeader)
		return
	}
	if len(auth) == 1 {
		v := strings.TrimSpace(strings.TrimPrefix(auth[0], "Bearer "))
		if strings.HasPrefix(v, tenancy.APIKeyPrefix) {
			s.keyDocument(w, r, v)
			return
		}
		if v != "" {
			writeError(w, errNoSession)
			return
		}
	}
	claims, ok := s.cookieClaims(w, r)
	if !ok {
		return
	}
	doc, e := s.sessionDocument(r, claims)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

type clusterRef struct {
	ID   string  `json:"id"`
	Slug string  `json:"slug"`
	Role *string `json:"role"`
}

type memberCluster struct {
	ID         string `json:"id"`
	Slug       string `json:"slug"`
	Role       string `json:"role"`
	TenantSlug string `json:"tenant_slug"`
	TenantID   string `json:"tenant_id"`
	Status     string `json:"status"`
	CellSlug   string `json:"cell_slug"`
}

type meDocument struct {
	Principal       string  `json:"principal"`
	UserID          *string `json:"user_id"`
	Email           *string `json:"email"`
	Name            *string `json:"name"`
	TenantID        *string `json:"tenant_id"`
	TenantSlug      *string `json:"tenant_slug"`
	IsOperator      bool    `json:"is_operator"`
	OperatorEnabled bool    `json:"operator_enabled"`
	OperatorLive    bool    `json:"operator_live"`
	// FleetView says the fleet routes answer this caller (a live operator,
	// the operator API on): the app offers the fleet, and opens on it
	// alone when the caller has no cluster to act on (a new fleet).
	FleetView        bool            `json:"fleet_view"`
	ActingCluster    *clusterRef     `json:"acting_cluster"`
	Clusters         []memberCluster `json:"clusters"`
	ActClusterHeader string          `json:"act_cluster_header"`
	Role             *string         `json:"role"`
	Cluster          *string         `json:"cluster"`
	SessionExpiresAt *string         `json:"session_expires_at,omitempty"`
	KeyID            *string         `json:"key_id,omitempty"`
	Scopes           map[string]bool `json:"scopes,omitempty"`
}

const actClusterHeader = "x-queen-act-cluster"

func (s *Surface) sessionDocument(r *http.Request, c tenancy.SessionClaims) (*meDocument, *apierror.Error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var (
		email, tenantID, tenantSlug string
		name                        *string
		isOperator                  bool
	)
	err := s.o.Pool.QueryRow(ctx, `SELECT u.email, u.name, u.tenant_id::text, t.slug, u.is_operator
		FROM queen_proxy.users u JOIN queen_proxy.tenants t ON t.id = u.tenant_id
		WHERE u.id = $1::uuid`, c.UserID).Scan(&email, &name, &tenantID, &tenantSlug, &isOperator)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errSessionGone
	}
	if err != nil {
		return nil, errDatabase
	}
	live := s.o.OperatorEnabled && isOperator
	var rows pgx.Rows
	if live {
		rows, err = s.o.Pool.Query(ctx, `SELECT c.id::text, c.slug, 'admin', t.slug, t.id::text,
			`+mergedStatusSQL+`, ce.slug
			FROM queen_proxy.clusters c JOIN queen_proxy.tenants t ON t.id = c.tenant_id
			JOIN queen_proxy.cells ce ON ce.id = c.cell_id ORDER BY t.slug, c.slug`)
	} else {
		rows, err = s.o.Pool.Query(ctx, `SELECT c.id::text, c.slug, cr.role, t.slug, t.id::text,
			`+mergedStatusSQL+`, ce.slug
			FROM queen_proxy.cluster_roles cr JOIN queen_proxy.clusters c ON c.id = cr.cluster_id
			JOIN queen_proxy.tenants t ON t.id = c.tenant_id JOIN queen_proxy.cells ce ON ce.id = c.cell_id
			WHERE cr.user_id = $1::uuid ORDER BY t.slug, c.slug`, c.UserID)
	}
	if err != nil {
		return nil, errDatabase
	}
	clusters, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (memberCluster, error) {
		var m memberCluster
		err := row.Scan(&m.ID, &m.Slug, &m.Role, &m.TenantSlug, &m.TenantID, &m.Status, &m.CellSlug)
		return m, err
	})
	if err != nil {
		return nil, errDatabase
	}
	doc := &meDocument{
		Principal: "user", UserID: &c.UserID, Email: &email, Name: name, TenantID: &tenantID,
		TenantSlug: &tenantSlug, IsOperator: isOperator, OperatorEnabled: s.o.OperatorEnabled,
		OperatorLive: live, FleetView: live && s.o.OperatorAPI, Clusters: clusters, ActClusterHeader: actClusterHeader, Role: &c.Role,
	}
	if doc.Clusters == nil {
		doc.Clusters = []memberCluster{}
	}
	if c.Cluster != "" {
		doc.Cluster = &c.Cluster
	}
	exp := c.ExpiresAt.UTC().Format(time.RFC3339)
	doc.SessionExpiresAt = &exp
	if cl := s.actingCluster(r); cl != nil {
		ref := &clusterRef{ID: cl.ID, Slug: cl.Slug}
		for _, m := range clusters {
			if m.ID == cl.ID {
				role := m.Role
				ref.Role = &role
			}
		}
		doc.ActingCluster = ref
	}
	return doc, nil
}

// mergedStatusSQL is the effective status of c under tenant t, worst wins
// (unknown values fail closed as suspended), as tenancy.MergeStatus does.
const mergedStatusSQL = `CASE GREATEST(
		CASE t.status WHEN 'active' THEN 1 WHEN 'grace' THEN 2 WHEN 'suspended' THEN 3 WHEN 'deleting' THEN 4 ELSE 3 END,
		CASE c.status WHEN 'active' THEN 1 WHEN 'push_blocked' THEN 2 WHEN 'suspended' THEN 3 WHEN 'deleting' THEN 4 ELSE 3 END)
	WHEN 1 THEN 'active' WHEN 2 THEN 'push_blocked' WHEN 3 THEN 'suspended' ELSE 'deleting' END`

// actingCluster is the cluster the request's Host names, or on a shared
// host the one x-queen-act-cluster names; nil when there is none.
func (s *Surface) actingCluster(r *http.Request) *tenancy.Cluster {
	host := tenancy.CanonicalHost(r.Host)
	if s.o.Clusters.SharedHost(host) {
		act := strings.TrimSpace(r.Header.Get(actClusterHeader))
		if act == "" {
			return nil
		}
		c, err := s.o.Clusters.ClusterByReference(r.Context(), act)
		if err != nil {
			return nil
		}
		return c
	}
	c, err := s.o.Clusters.ClusterForHost(r.Context(), host)
	if err != nil {
		return nil
	}
	return c
}

// keyDocument describes an API key the way the session document describes
// a user, resolving the cluster as the data plane does.
func (s *Surface) keyDocument(w http.ResponseWriter, r *http.Request, presented string) {
	if strings.TrimSpace(r.Header.Get(actClusterHeader)) != "" {
		writeError(w, errKeyActAs)
		return
	}
	key, err := s.o.Clusters.APIKey(r.Context(), presented)
	if err != nil || key.Expired(s.o.Now()) {
		writeError(w, errUnknownKey)
		return
	}
	host := tenancy.CanonicalHost(r.Host)
	if !s.o.Clusters.SharedHost(host) {
		c, err := s.o.Clusters.ClusterForHost(r.Context(), host)
		if err != nil {
			writeError(w, errClusterUnknown)
			return
		}
		if c.ID != key.Cluster.ID {
			writeError(w, errKeyClusterMismat)
			return
		}
	}
	c := key.Cluster
	role := "admin"
	if !key.Has(tenancy.ScopeAdmin) {
		role = "viewer"
	}
	keyID := key.ID
	tenantSlug := ""
	_ = s.o.Pool.QueryRow(r.Context(), `SELECT slug FROM queen_proxy.tenants WHERE id = $1::uuid`, c.TenantID).Scan(&tenantSlug)
	doc := &meDocument{
		Principal: "api_key", ActClusterHeader: actClusterHeader, KeyID: &keyID,
		ActingCluster: &clusterRef{ID: c.ID, Slug: c.Slug},
		Clusters: []memberCluster{{ID: c.ID, Slug: c.Slug, Role: role, TenantSlug: tenantSlug,
			TenantID: c.TenantID, Status: c.Status.String(), CellSlug: c.CellSlug}},
		Scopes: map[string]bool{
			"produce": key.Has(tenancy.ScopeProduce), "consume": key.Has(tenancy.ScopeConsume),
			"admin": key.Has(tenancy.ScopeAdmin), "read": key.Has(tenancy.ScopeRead),
		},
	}
	writeJSON(w, http.StatusOK, doc)
}
