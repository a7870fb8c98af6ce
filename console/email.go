package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/mailer"
)

// MailSender sends one of the surface's messages; *mailer.Mailer is one.
type MailSender interface {
	Send(ctx context.Context, m mailer.Message) error
}

// The default lives of e-mailed links.
const (
	DefaultInvitationTTL   = 7 * 24 * time.Hour
	DefaultResetTTL        = 30 * time.Minute
	DefaultVerificationTTL = 7 * 24 * time.Hour
)

// DefaultResetRate is the guard of reset requests: three for one address
// typed, then a wait of one minute doubling up to an hour; ten from one
// client address (IPv6: its /64). Every request counts, whether an account
// has the address or not; a count is forgotten after an hour without one.
// (The guard waits after its free failures are spent: 2 free, the third
// request sets the first wait.)
var DefaultResetRate = LoginGuardConfig{
	FreeFailuresIP: 9, FreeFailuresAccount: 2, BackoffBase: time.Minute, Lockout: time.Hour, Window: time.Hour,
}

// maxPendingMails bounds the reset messages being sent at once; a request
// past it is answered the same and sends nothing (logged).
const maxPendingMails = 32

var (
	errLinkInvalid = apiErr(http.StatusBadRequest, apierror.LinkInvalid,
		"this link is not valid: it was already used, was replaced by a newer one, was revoked, or has expired")
	errEmailNotSent = apiErr(http.StatusBadGateway, apierror.EmailNotSent,
		"the invitation could not be sent by e-mail, so it was not kept; try again later")
	errMailOff       = apiErr(http.StatusNotFound, apierror.RouteBlocked, "e-mail is not configured on this gateway")
	errWrongPassword = apiErr(http.StatusForbidden, apierror.Forbidden, "the current password is wrong")
	errNoPassword    = apiErr(http.StatusConflict, apierror.Conflict,
		"this account has no password (it signs in with a provider); set one with \"Forgot password\" on the sign-in page")
	errAccountExists = apiErr(http.StatusConflict, apierror.Conflict,
		"an account has this e-mail address already: sign in with it, and ask the cluster's admin to add it")
)

// mailOn reports whether e-mail flows are offered (a sender and a public
// URL to build links with).
func (s *Surface) mailOn() bool { return s.o.Mail != nil && s.o.PublicURL != "" }

// link is the absolute address of an e-mailed link. Links are built from
// the configured public URL only, never from the request's Host, which a
// client chooses.
func (s *Surface) link(path, token string) string {
	return s.o.PublicURL + path + "?token=" + url.QueryEscape(token)
}

// ttlWords says a duration the way a message does.
func ttlWords(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	case d >= 2*time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " hours"
	case d >= 2*time.Minute:
		return strconv.Itoa(int(d/time.Minute)) + " minutes"
	}
	return d.String()
}

// sendMail sends and logs a failure at WARN level (the relay is the
// operator's to fix; nothing here needs a person at once).
func (s *Surface) sendMail(ctx context.Context, m mailer.Message) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.o.Mail.Send(ctx, m); err != nil {
		s.o.Log.Warn("e-mail not sent", zap.String("template", m.Template), zap.Error(err))
		return err
	}
	return nil
}

// background runs a send after the response, bounded by maxPendingMails.
func (s *Surface) background(what string, f func(context.Context)) {
	select {
	case s.mailSlots <- struct{}{}:
	default:
		s.o.Log.Warn("e-mail dropped: too many being sent", zap.String("what", what))
		return
	}
	go func() {
		defer func() { <-s.mailSlots }()
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		f(ctx)
	}()
}

// readForm parses a posted form; false after answering.
func readForm(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeFailure(w, r, errBodyTooLarge)
			return false
		}
		writeFailure(w, r, invalid("the form could not be read"))
		return false
	}
	return true
}

// pendingLink reads a live link's row without spending it: the page a
// link opens shows what it is for, and only the form's POST spends it (a
// mail scanner that fetches links must not use them up).
type pendingLink struct {
	email, cluster, role string
}

func (s *Surface) pendingLink(ctx context.Context, purpose, raw string) (pendingLink, *apierror.Error) {
	tok, ok := parseLinkToken(raw)
	if !ok {
		return pendingLink{}, errLinkInvalid
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var p pendingLink
	var cluster *string
	err := s.o.Pool.QueryRow(ctx, `SELECT t.email, c.slug, coalesce(t.role, '')
		FROM queen_proxy.email_tokens t LEFT JOIN queen_proxy.clusters c ON c.id = t.cluster_id
		WHERE t.token_hash = $1 AND t.purpose = $2 AND t.used_at IS NULL AND t.revoked_at IS NULL
		  AND t.expires_at > clock_timestamp()
		  AND (t.user_id IS NULL OR EXISTS (SELECT 1 FROM queen_proxy.users u WHERE u.id = t.user_id AND u.email = t.email))`,
		linkHash(purpose, tok), purpose).Scan(&p.email, &cluster, &p.role)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, errLinkInvalid
	}
	if err != nil {
		return p, errDatabase
	}
	if cluster != nil {
		p.cluster = *cluster
	}
	return p, nil
}

// spentLink is a link consume_email_token spent.
type spentLink struct {
	id, email, userID, tenantID, clusterID, role, createdBy string
}

// spendLink spends a link in tx; errLinkInvalid when it is not live.
func spendLink(ctx context.Context, tx pgx.Tx, purpose, raw string) (spentLink, error) {
	tok, ok := parseLinkToken(raw)
	if !ok {
		return spentLink{}, memberError{errLinkInvalid}
	}
	var l spentLink
	var user, tenant, cluster, role, by *string
	err := tx.QueryRow(ctx, `SELECT id::text, email, user_id::text, tenant_id::text, cluster_id::text, role, created_by::text
		FROM queen_proxy.consume_email_token($1, $2)`, purpose, linkHash(purpose, tok)).
		Scan(&l.id, &l.email, &user, &tenant, &cluster, &role, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, memberError{errLinkInvalid}
	}
	if err != nil {
		return l, err
	}
	for dst, src := range map[*string]*string{&l.userID: user, &l.tenantID: tenant, &l.clusterID: cluster, &l.role: role, &l.createdBy: by} {
		if src != nil {
			*dst = *src
		}
	}
	return l, nil
}

// issueLink stores a new link for a user (a reset or a verification) and
// returns its token. Earlier live links of the user for the purpose are
// revoked: the newest one sent is the one that works.
func (s *Surface) issueLink(ctx context.Context, purpose, userID, email, by string, ttl time.Duration) (string, string, error) {
	tok, hash, err := newLinkToken(purpose)
	if err != nil {
		return "", "", err
	}
	var id string
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp()
			WHERE user_id = $1::uuid AND purpose = $2 AND used_at IS NULL AND revoked_at IS NULL`, userID, purpose); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, created_by, expires_at)
			VALUES ($1, $2, $3, $4::uuid, $5::uuid, clock_timestamp() + $6::interval) RETURNING id::text`,
			purpose, hash, email, userID, nilIfEmpty(by), ttl.String()).Scan(&id)
	})
	s.pruneLinks()
	return tok, id, err
}

// keepEndedLinks is how long links that ended (used, revoked, expired)
// stay in email_tokens, for the record; pruning runs at most once an hour
// per process, after a link is issued.
const keepEndedLinks = 30 * 24 * time.Hour

func (s *Surface) pruneLinks() {
	now := s.o.Now()
	last := s.lastPrune.Load()
	if now.UnixNano()-last < int64(time.Hour) || !s.lastPrune.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.o.Pool.Exec(ctx, `SELECT queen_proxy.prune_email_tokens($1)`, now.Add(-keepEndedLinks)); err != nil {
			s.o.Log.Warn("ended e-mail links not pruned", zap.Error(err))
		}
	}()
}

// revokeLink withdraws a link whose message was not sent.
func (s *Surface) revokeLink(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.o.Pool.Exec(ctx, `UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp() WHERE id = $1::uuid AND used_at IS NULL`, id); err != nil {
		s.o.Log.Warn("unsent link not revoked", zap.String("link", id), zap.Error(err))
	}
}

// ---- forgot password ----

func (s *Surface) forgotPage(w http.ResponseWriter, r *http.Request) {
	renderPage(w, http.StatusOK, pageData{Title: "Reset your password", Forgot: true})
}

// forgot answers a reset request the same whether or not an account has
// the address: the same status and page, and no lookup before the
// answer (the lookup, the link and the message happen after it).
func (s *Surface) forgot(w http.ResponseWriter, r *http.Request) {
	if !readForm(w, r) {
		return
	}
	raw := r.PostForm.Get("email")
	email, ok := normalEmail(raw)
	if !ok {
		renderPage(w, http.StatusBadRequest, pageData{Title: "Reset your password", Forgot: true, Email: raw,
			Error: "Enter the e-mail address of your account."})
		return
	}
	ip := s.o.ClientIP(r)
	now := s.o.Now()
	if ok, wait := s.resetGuard.Check(ip, email, now); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		renderPage(w, http.StatusTooManyRequests, pageData{Title: "Reset your password", Forgot: true, Email: email,
			Error: "Too many reset requests. Try again in " + strconv.Itoa(secs) + " seconds."})
		return
	}
	s.resetGuard.Fail(ip, email, now)
	s.background("password reset", func(ctx context.Context) { s.sendReset(ctx, email) })
	renderPage(w, http.StatusOK, pageData{Title: "Check your e-mail", Next: "/",
		Notice: "If an account has this address, a link to choose a new password is on its way to it. The link works once, for " + ttlWords(s.o.ResetTTL) + "."})
}

// sendReset issues and sends a reset link when an account has the
// address; otherwise it does nothing.
func (s *Surface) sendReset(ctx context.Context, email string) {
	var userID string
	err := s.o.Pool.QueryRow(ctx, `SELECT id::text FROM queen_proxy.users WHERE email = $1`, email).Scan(&userID)
	if errors.Is(err, pgx.ErrNoRows) {
		s.o.Log.Debug("password reset for an unknown address: nothing sent")
		return
	}
	if err != nil {
		s.o.Log.Warn("password reset: user lookup failed", zap.Error(err))
		return
	}
	tok, id, err := s.issueLink(ctx, purposeReset, userID, email, "", s.o.ResetTTL)
	if err != nil {
		s.o.Log.Warn("password reset: link not stored", zap.String("user", userID), zap.Error(err))
		return
	}
	if err := s.sendMail(ctx, mailer.Message{To: email, Template: mailer.TemplatePasswordReset, Data: mailer.Data{
		Link: s.link("/auth/reset", tok), Email: email, ExpiresIn: ttlWords(s.o.ResetTTL),
	}}); err != nil {
		s.revokeLink(id)
	}
}

func (s *Surface) resetPage(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("token")
	p, e := s.pendingLink(r.Context(), purposeReset, raw)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	renderPage(w, http.StatusOK, pageData{Title: "Choose a new password", Email: p.email,
		SetPassword: &setPasswordForm{Action: "/auth/reset", Token: raw, Button: "Set the new password",
			Intro: "For the account " + p.email + ". Every session of the account ends."}})
}

// reset spends a reset link: the new password, every session of the user
// ended (set_user_password), the address counted as proven.
func (s *Surface) reset(w http.ResponseWriter, r *http.Request) {
	if !readForm(w, r) {
		return
	}
	raw, password := r.PostForm.Get("token"), r.PostForm.Get("password")
	if e := passwordRule(password); e != nil {
		s.rerenderSetPassword(w, r, purposeReset, raw, e)
		return
	}
	// A dead link is refused before the password is hashed, so posting
	// made-up tokens costs the gateway no hashing.
	if _, e := s.pendingLink(r.Context(), purposeReset, raw); e != nil {
		writeFailure(w, r, e)
		return
	}
	hash, err := HashPassword(password)
	if err != nil {
		writeFailure(w, r, errInternal)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var l spentLink
	var tenant string
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if l, err = spendLink(ctx, tx, purposeReset, raw); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, $2)`, l.userID, hash); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `UPDATE queen_proxy.users SET email_verified_at = coalesce(email_verified_at, clock_timestamp())
			WHERE id = $1::uuid RETURNING tenant_id::text`, l.userID).Scan(&tenant); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, NULL, 'user', $2::uuid, 'password_reset', $2::text, $3::jsonb)`,
			tenant, l.userID, `{"sessions_ended":true}`)
		return err
	})
	if s.linkFailed(w, r, err) {
		return
	}
	s.o.Identities.InvalidateUsers()
	s.o.Guard.Succeed(l.email)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/auth/login?done=reset&next=%2Fconsole%2F&email="+url.QueryEscape(l.email), http.StatusSeeOther)
}

// rerenderSetPassword shows a set-password form again with a refusal.
func (s *Surface) rerenderSetPassword(w http.ResponseWriter, r *http.Request, purpose, raw string, e *apierror.Error) {
	p, le := s.pendingLink(r.Context(), purpose, raw)
	if le != nil {
		writeFailure(w, r, le)
		return
	}
	title, action, button := "Choose a new password", "/auth/reset", "Set the new password"
	if purpose == purposeInvitation {
		title, action, button = "Join "+p.cluster, "/auth/invitation", "Accept and sign in"
	}
	renderPage(w, e.Status, pageData{Title: title, Email: p.email, Error: e.Message,
		SetPassword: &setPasswordForm{Action: action, Token: raw, Button: button}})
}

// linkFailed answers a failed link transaction; false when err is nil.
func (s *Surface) linkFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return false
	}
	var me memberError
	if errors.As(err, &me) {
		writeFailure(w, r, me.e)
		return true
	}
	s.o.Log.Error("e-mail link not applied", zap.Error(err))
	writeFailure(w, r, errDatabase)
	return true
}

// ---- invitations ----

// invitation is one invitation to send: an address, a cluster and a role,
// and who invites.
type invitation struct {
	clusterID, clusterSlug, email, role, inviterID string
	// audit writes the inviter's audit row in the invitation's
	// transaction, where the database checks the inviter's standing (a
	// cluster admin's role, or an operator's bit).
	audit func(ctx context.Context, tx pgx.Tx, tenantID string) error
}

var errInviteeExists = conflict("an account has this e-mail address already: give it a role instead of inviting it")

// sendInvitation records an invitation of an address no account has and
// sends it; the member route and the fleet's route both invite through
// it. The account is made when the invitation is accepted, by whoever
// proves they read the address's mail, in the cluster's tenant. A refusal
// comes back as a memberError; an earlier pending invitation of the
// address to the cluster is replaced.
func (s *Surface) sendInvitation(ctx context.Context, in invitation) (map[string]any, error) {
	tok, hash, err := newLinkToken(purposeInvitation)
	if err != nil {
		return nil, memberError{errInternal}
	}
	txCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var id, inviter string
	var expires time.Time
	err = pgx.BeginFunc(txCtx, s.o.Pool, func(tx pgx.Tx) error {
		tenant, err := lockRoles(txCtx, tx, in.clusterID)
		if errors.Is(err, pgx.ErrNoRows) {
			return memberError{errNoSuchFleetCluster}
		}
		if err != nil {
			return err
		}
		// Audited first: the audit row is where the database checks that
		// the inviter still holds the power to invite.
		if err := in.audit(txCtx, tx, tenant); err != nil {
			return err
		}
		var status string
		var exists bool
		if err := tx.QueryRow(txCtx, `SELECT c.status, EXISTS (SELECT 1 FROM queen_proxy.users WHERE email = $2)
			FROM queen_proxy.clusters c WHERE c.id = $1::uuid`, in.clusterID, in.email).Scan(&status, &exists); err != nil {
			return err
		}
		if status == "deleting" {
			return memberError{conflict("this cluster is being deleted")}
		}
		if exists {
			return memberError{errInviteeExists}
		}
		if _, err := tx.Exec(txCtx, `UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp()
			WHERE purpose = 'invitation' AND cluster_id = $1::uuid AND email = $2 AND used_at IS NULL AND revoked_at IS NULL`,
			in.clusterID, in.email); err != nil {
			return err
		}
		if err := tx.QueryRow(txCtx, `SELECT email FROM queen_proxy.users WHERE id = $1::uuid`, in.inviterID).Scan(&inviter); err != nil {
			return err
		}
		return tx.QueryRow(txCtx, `INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, tenant_id, cluster_id, role, created_by, expires_at)
			VALUES ('invitation', $1, $2, $3::uuid, $4::uuid, $5, $6::uuid, clock_timestamp() + $7::interval) RETURNING id::text, expires_at`,
			hash, in.email, tenant, in.clusterID, in.role, in.inviterID, s.o.InvitationTTL.String()).Scan(&id, &expires)
	})
	if err != nil {
		return nil, err
	}
	s.pruneLinks()
	if err := s.sendMail(ctx, mailer.Message{To: in.email, Template: mailer.TemplateInvitation, Data: mailer.Data{
		Link: s.link("/auth/invitation", tok), Email: in.email, Cluster: in.clusterSlug, Role: in.role, Inviter: inviter,
		ExpiresIn: ttlWords(s.o.InvitationTTL),
	}}); err != nil {
		s.revokeLink(id)
		return nil, memberError{errEmailNotSent}
	}
	return map[string]any{"ok": true, "invited": true, "created": false, "invitation_id": id,
		"email": in.email, "role": in.role, "cluster_id": in.clusterID, "cluster": in.clusterSlug,
		"expires_at": expires.UTC().Format(time.RFC3339)}, nil
}

// invite is the member route's invitation, audited as the cluster admin's
// console_member_invited.
func (s *Surface) invite(w http.ResponseWriter, r *http.Request, c *caller, email, role string) {
	out, err := s.sendInvitation(r.Context(), invitation{clusterID: c.cluster.ID, clusterSlug: c.cluster.Slug,
		email: email, role: role, inviterID: c.claims.UserID,
		audit: func(ctx context.Context, tx pgx.Tx, _ string) error {
			return s.audit(ctx, tx, c, "console_member_invited", email, map[string]any{"email": email, "role": role})
		}})
	if s.memberFailed(w, c, err) {
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

type invitationJSON struct {
	ID          string  `json:"id"`
	Email       string  `json:"email"`
	Role        string  `json:"role"`
	ClusterID   string  `json:"cluster_id"`
	ClusterSlug string  `json:"cluster_slug"`
	TenantSlug  string  `json:"tenant_slug"`
	InvitedBy   *string `json:"invited_by"`
	CreatedAt   string  `json:"created_at"`
	ExpiresAt   string  `json:"expires_at"`
}

// pendingInvitations are the live invitations of one cluster, or of every
// cluster when clusterID is "" (never a token).
func (s *Surface) pendingInvitations(ctx context.Context, clusterID string) ([]invitationJSON, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := s.o.Pool.Query(ctx, `SELECT t.id::text, t.email, t.role, c.id::text, c.slug, tn.slug, u.email, t.created_at, t.expires_at
		FROM queen_proxy.email_tokens t
		JOIN queen_proxy.clusters c ON c.id = t.cluster_id
		JOIN queen_proxy.tenants tn ON tn.id = c.tenant_id
		LEFT JOIN queen_proxy.users u ON u.id = t.created_by
		WHERE t.purpose = 'invitation' AND ($1 = '' OR t.cluster_id = nullif($1, '')::uuid) AND t.used_at IS NULL AND t.revoked_at IS NULL
		  AND t.expires_at > clock_timestamp()
		ORDER BY c.slug, t.email`, clusterID)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (invitationJSON, error) {
		var i invitationJSON
		var created, expires time.Time
		err := row.Scan(&i.ID, &i.Email, &i.Role, &i.ClusterID, &i.ClusterSlug, &i.TenantSlug, &i.InvitedBy, &created, &expires)
		i.CreatedAt, i.ExpiresAt = created.UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339)
		return i, err
	})
	if out == nil {
		out = []invitationJSON{}
	}
	return out, err
}

// listInvitations is the cluster's pending invitations.
func (s *Surface) listInvitations(w http.ResponseWriter, r *http.Request, c *caller) {
	out, err := s.pendingInvitations(r.Context(), c.cluster.ID)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

var errNoSuchInvitation = notFound("no such pending invitation on this cluster")

// withdrawInvitation revokes, in tx, a pending invitation (of the cluster
// when clusterID is not ""): its link stops working. It returns the
// invitation's address, cluster and tenant.
func withdrawInvitation(ctx context.Context, tx pgx.Tx, id, clusterID string) (email, cluster, tenant string, err error) {
	err = tx.QueryRow(ctx, `UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp()
		WHERE id = $1::uuid AND purpose = 'invitation' AND ($2 = '' OR cluster_id = nullif($2, '')::uuid)
		  AND used_at IS NULL AND revoked_at IS NULL
		RETURNING email, cluster_id::text, tenant_id::text`, id, clusterID).Scan(&email, &cluster, &tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		err = memberError{errNoSuchInvitation}
	}
	return email, cluster, tenant, err
}

// revokeInvitation withdraws one of the cluster's pending invitations.
func (s *Surface) revokeInvitation(w http.ResponseWriter, r *http.Request, c *caller, id string) {
	if !uuidLike(id) {
		writeError(w, errNoSuchInvitation)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		email, _, _, err := withdrawInvitation(ctx, tx, id, c.cluster.ID)
		if err != nil {
			return err
		}
		return s.audit(ctx, tx, c, "console_invitation_revoked", id, map[string]any{"email": email})
	})
	if s.memberFailed(w, c, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// uuidLike reports whether s has the shape of a uuid, so that a malformed
// id is a 404 rather than a database error.
func uuidLike(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func (s *Surface) invitationPage(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("token")
	p, e := s.pendingLink(r.Context(), purposeInvitation, raw)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	form := &setPasswordForm{Action: "/auth/invitation", Token: raw, Button: "Accept and sign in",
		Intro: "You are invited to the cluster " + p.cluster + " as " + p.role + ", as " + p.email + ". Choose the password of your new account."}
	for _, q := range s.providers {
		form.Providers = append(form.Providers, providerButton{Label: q.label, URL: q.path})
	}
	renderPage(w, http.StatusOK, pageData{Title: "Join " + p.cluster, Email: p.email, SetPassword: form})
}

// invitationCookie carries an invitation's token through a provider
// sign-in started from the invitation page.
const invitationCookie = "queen_invitation"

var errInvitationOtherAddress = apiErr(http.StatusForbidden, apierror.Forbidden,
	"the invitation is for another e-mail address than the one this sign-in verified; sign in with that address, or choose a password on the invitation page")

// acceptViaProvider starts the provider sign-in that accepts an
// invitation: the token rides in a short-lived HttpOnly cookie to the
// callback, which accepts it only for the address the provider verified.
func (s *Surface) acceptViaProvider(w http.ResponseWriter, r *http.Request, provider, raw string) {
	var prov *oauthProvider
	for _, q := range s.providers {
		if q.path == provider {
			prov = q
		}
	}
	if prov == nil {
		writeFailure(w, r, invalid("no such sign-in provider here"))
		return
	}
	if _, e := s.pendingLink(r.Context(), purposeInvitation, raw); e != nil {
		writeFailure(w, r, e)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: invitationCookie, Value: raw, Path: "/auth/", MaxAge: 600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.o.IsHTTPS(r)})
	http.Redirect(w, r, "/auth/"+prov.path+"?next=%2Fconsole%2F", http.StatusSeeOther)
}

// takeInvitationCookie returns the invitation token a provider sign-in
// carries ("" for none) and clears the cookie: it serves one sign-in.
func (s *Surface) takeInvitationCookie(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(invitationCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: invitationCookie, Value: "", Path: "/auth/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.o.IsHTTPS(r)})
	tok, ok := parseLinkToken(c.Value)
	if !ok {
		return ""
	}
	return tok
}

// acceptWithProvider spends an invitation for a provider identity whose
// verified e-mail is the invited address and no account has: the account
// is created in the cluster's tenant, linked to the identity, with the
// role. The invitation stays live when the addresses differ.
func (s *Surface) acceptWithProvider(ctx context.Context, raw, provider string, id providerIdentity) (string, *apierror.Error) {
	var userID, clusterID string
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		l, err := spendLink(ctx, tx, purposeInvitation, raw)
		if err != nil {
			return err
		}
		if l.email != id.Email {
			return memberError{errInvitationOtherAddress}
		}
		clusterID = l.clusterID
		var err2 error
		userID, err2 = s.createInvited(ctx, tx, l, nil, provider)
		if err2 != nil {
			return err2
		}
		_, err = tx.Exec(ctx, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email, verified)
			VALUES ($1::uuid, $2, $3, $4, true)`, userID, provider, id.ProviderID, id.Email)
		return err
	})
	var me memberError
	if errors.As(err, &me) {
		return "", me.e
	}
	if err != nil {
		s.o.Log.Error("invitation not accepted through a provider", zap.String("provider", provider), zap.Error(err))
		return "", errDatabase
	}
	s.changed(clusterID)
	return userID, nil
}

// acceptInvitation spends an invitation: the account is created in the
// cluster's tenant with the chosen password and the address proven, the
// role granted, and the new user signed in.
func (s *Surface) acceptInvitation(w http.ResponseWriter, r *http.Request) {
	if !readForm(w, r) {
		return
	}
	raw, password := r.PostForm.Get("token"), r.PostForm.Get("password")
	if provider := r.PostForm.Get("provider"); provider != "" {
		s.acceptViaProvider(w, r, provider, raw)
		return
	}
	if e := passwordRule(password); e != nil {
		s.rerenderSetPassword(w, r, purposeInvitation, raw, e)
		return
	}
	if !s.canMint() {
		writeFailure(w, r, errNotConfigured)
		return
	}
	if _, e := s.pendingLink(r.Context(), purposeInvitation, raw); e != nil {
		writeFailure(w, r, e)
		return
	}
	hash, err := HashPassword(password)
	if err != nil {
		writeFailure(w, r, errInternal)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var userID string
	var l spentLink
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if l, err = spendLink(ctx, tx, purposeInvitation, raw); err != nil {
			return err
		}
		userID, err = s.createInvited(ctx, tx, l, &hash, "local")
		return err
	})
	if s.linkFailed(w, r, err) {
		return
	}
	s.changed(l.clusterID)
	s.startSession(w, r, userID, "/console")
}

// createInvited creates, in tx, the account a spent invitation makes: in
// the cluster's tenant, with the password hash (or none), the address
// verified, the role granted, audited invitation_accepted.
func (s *Surface) createInvited(ctx context.Context, tx pgx.Tx, l spentLink, hash *string, provider string) (string, error) {
	if _, err := lockRoles(ctx, tx, l.clusterID); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", memberError{errLinkInvalid}
		}
		return "", err
	}
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM queen_proxy.clusters WHERE id = $1::uuid`, l.clusterID).Scan(&status); err != nil {
		return "", err
	}
	if status == "deleting" {
		return "", memberError{errLinkInvalid}
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen_proxy.users WHERE email = $1)`, l.email).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return "", memberError{errAccountExists}
	}
	var userID string
	if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2, $3, $4)::text`, l.tenantID, l.email, hash, provider).Scan(&userID); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'console', $2::uuid)`, userID, nilIfEmpty(l.createdBy)); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE queen_proxy.users SET email_verified_at = clock_timestamp() WHERE id = $1::uuid`, userID); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, l.clusterID, l.email, l.role); err != nil {
		return "", err
	}
	_, err := tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, $2::uuid, 'user', $3::uuid, 'invitation_accepted', $3::text, $4::jsonb)`,
		l.tenantID, l.clusterID, userID, fmt.Sprintf(`{"invitation":%q,"role":%q,"provider":%q}`, l.id, l.role, provider))
	return userID, err
}

// ---- e-mail verification ----

// sendVerification sends a verification link to an account created for
// an address nobody has proven; the answer says whether it went.
func (s *Surface) sendVerification(ctx context.Context, userID, email, by string) string {
	if !s.mailOn() {
		return "off"
	}
	var inviter string
	_ = s.o.Pool.QueryRow(ctx, `SELECT email FROM queen_proxy.users WHERE id = $1::uuid`, by).Scan(&inviter)
	tok, id, err := s.issueLink(ctx, purposeVerification, userID, email, by, s.o.VerificationTTL)
	if err != nil {
		s.o.Log.Warn("verification link not stored", zap.String("user", userID), zap.Error(err))
		return "failed"
	}
	if err := s.sendMail(ctx, mailer.Message{To: email, Template: mailer.TemplateEmailVerification, Data: mailer.Data{
		Link: s.link("/auth/verify", tok), Email: email, Inviter: inviter, ExpiresIn: ttlWords(s.o.VerificationTTL),
	}}); err != nil {
		s.revokeLink(id)
		return "failed"
	}
	return "sent"
}

func (s *Surface) verifyPage(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("token")
	p, e := s.pendingLink(r.Context(), purposeVerification, raw)
	if e != nil {
		writeFailure(w, r, e)
		return
	}
	renderPage(w, http.StatusOK, pageData{Title: "Confirm your address", Email: p.email,
		Confirm: &setPasswordForm{Action: "/auth/verify", Token: raw, Button: "Confirm " + p.email}})
}

func (s *Surface) verify(w http.ResponseWriter, r *http.Request) {
	if !readForm(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var l spentLink
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if l, err = spendLink(ctx, tx, purposeVerification, r.PostForm.Get("token")); err != nil {
			return err
		}
		var tenant string
		if err := tx.QueryRow(ctx, `UPDATE queen_proxy.users SET email_verified_at = coalesce(email_verified_at, clock_timestamp())
			WHERE id = $1::uuid RETURNING tenant_id::text`, l.userID).Scan(&tenant); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, NULL, 'user', $2::uuid, 'email_verified', $2::text, '{}'::jsonb)`,
			tenant, l.userID)
		return err
	})
	if s.linkFailed(w, r, err) {
		return
	}
	renderPage(w, http.StatusOK, pageData{Title: "Address confirmed", Next: "/console",
		Notice: "The address " + l.email + " is confirmed."})
}

// ---- change password ----

// changePassword sets a signed-in user's password, given the current
// one. Every session of the user ends (set_user_password); the caller
// gets a fresh one.
func (s *Surface) changePassword(w http.ResponseWriter, r *http.Request) {
	if !s.canMint() {
		writeError(w, errNotConfigured)
		return
	}
	claims, ok := s.cookieClaims(w, r)
	if !ok {
		return
	}
	var req struct {
		Current string `json:"current_password"`
		New     string `json:"new_password"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if e := passwordRule(req.New); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var email string
	var stored *string
	err := s.o.Pool.QueryRow(ctx, `SELECT email, password_hash FROM queen_proxy.users WHERE id = $1::uuid`, claims.UserID).Scan(&email, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, errSessionGone)
		return
	}
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	ip, now := s.o.ClientIP(r), s.o.Now()
	if ok, wait := s.o.Guard.Check(ip, email, now); !ok {
		e := *errRateLimitedLogin
		e.RetryAfter = int(math.Ceil(wait.Seconds()))
		writeError(w, &e)
		return
	}
	if stored == nil || *stored == "" {
		writeError(w, errNoPassword)
		return
	}
	match, err := VerifyPassword(*stored, req.Current)
	if err != nil || !match {
		s.o.Guard.Fail(ip, email, now)
		writeError(w, errWrongPassword)
		return
	}
	s.o.Guard.Succeed(email)
	hash, err := HashPassword(req.New)
	if err != nil {
		writeError(w, errInternal)
		return
	}
	var tenant string
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, $2)`, claims.UserID, hash); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT tenant_id::text FROM queen_proxy.users WHERE id = $1::uuid`, claims.UserID).Scan(&tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, NULL, 'user', $2::uuid, 'password_changed', $2::text, $3::jsonb)`,
			tenant, claims.UserID, `{"sessions_ended":true}`)
		return err
	})
	if err != nil {
		s.o.Log.Error("password change failed", zap.String("user", claims.UserID), zap.Error(err))
		writeError(w, errDatabase)
		return
	}
	s.o.Identities.InvalidateUsers()
	// The caller's own session ended with the others; it gets a new one,
	// minted in a later second than the end (tokens carry whole seconds).
	next, err := s.mintAfterEnd(ctx, claims.UserID)
	if err != nil {
		s.o.Log.Error("session not minted after a password change", zap.Error(err))
		s.clearSessionCookies(w, r)
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "signed_out": true})
		return
	}
	s.setSessionCookie(w, r, next)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "signed_out": false})
}

var errRateLimitedLogin = apiErr(http.StatusTooManyRequests, apierror.RateLimited, "too many wrong passwords; try again later")

// mintAfterEnd mints a new login session for a user, waiting first until
// the user's sessions_ended_at lies in a past second: a session token's
// issue time has whole seconds, and one issued in the same second as the
// end would count as issued before it.
func (s *Surface) mintAfterEnd(ctx context.Context, userID string) (string, error) {
	var ended *time.Time
	if err := s.o.Pool.QueryRow(ctx, `SELECT sessions_ended_at FROM queen_proxy.users WHERE id = $1::uuid`, userID).Scan(&ended); err != nil {
		return "", err
	}
	if ended != nil {
		if wait := time.Until(ended.Truncate(time.Second).Add(time.Second)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	token, _, err := s.o.Sessions.Mint(userID, "", "viewer", "", s.o.SessionTTL)
	return token, err
}

// serveLinks dispatches the pages of e-mailed links: GET shows, POST acts.
func (s *Surface) serveLinks(w http.ResponseWriter, r *http.Request, p string) {
	if !s.mailOn() {
		writeFailure(w, r, errMailOff)
		return
	}
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !get && r.Method != http.MethodPost {
		writeError(w, errMethod)
		return
	}
	switch {
	case p == "/auth/forgot" && get:
		s.forgotPage(w, r)
	case p == "/auth/forgot":
		s.forgot(w, r)
	case p == "/auth/reset" && get:
		s.resetPage(w, r)
	case p == "/auth/reset":
		s.reset(w, r)
	case p == "/auth/invitation" && get:
		s.invitationPage(w, r)
	case p == "/auth/invitation":
		s.acceptInvitation(w, r)
	case p == "/auth/verify" && get:
		s.verifyPage(w, r)
	default:
		s.verify(w, r)
	}
}
