package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/tenancy"
)

// The fleet's accounts: every user of every tenant, the platform's
// operators included, for the console's fleet view. The user routes
// (/api/operator/users) keep the reference's scope of one cell; these see
// the fleet, as the other fleet routes do, so that an operator manages
// people without the command line (and without a cluster to act on).

// fleetAccounts lists every user as `caddy queen user list --json` does:
// tenant, operator bit, where the account came from, last sign-in, roles.
func (s *Surface) fleetAccounts(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	users, err := controlplane.FindUsers(ctx, s.o.Pool, controlplane.UserFilter{})
	if err != nil {
		s.fleetFailed(w, "users", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": users})
}

// fleetCreateAccount creates a local user: in a tenant, or, for an
// operator without one, in the platform tenant (as `user create
// --operator` does); optionally with the operator bit and a role on one
// of the tenant's clusters. One transaction, audited as the operator's
// operator_user_created, which the database refuses unless the caller
// still holds the operator bit when it commits.
func (s *Surface) fleetCreateAccount(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims) {
	var req struct {
		Tenant   string `json:"tenant"`
		Email    string `json:"email"`
		Name     string `json:"name"`
		Password string `json:"password"`
		Operator bool   `json:"operator"`
		Cluster  string `json:"cluster"`
		Role     string `json:"role"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	email, ok := normalEmail(req.Email)
	name := strings.TrimSpace(req.Name)
	tenantRef := strings.ToLower(strings.TrimSpace(req.Tenant))
	clusterRef := strings.ToLower(strings.TrimSpace(req.Cluster))
	pwLen := utf8.RuneCountInString(req.Password)
	switch {
	case !ok:
		writeError(w, invalid("email must be an e-mail address"))
		return
	case utf8.RuneCountInString(name) > 160:
		writeError(w, invalid("name must be at most 160 characters"))
		return
	case req.Password != "" && (pwLen < MinPasswordLen || pwLen > MaxPasswordLen):
		writeError(w, invalid("password must be 12 to 128 characters long"))
		return
	case tenantRef == "" && !req.Operator:
		writeError(w, invalid("tenant is required for a user who is not an operator"))
		return
	case clusterRef != "" && tenancy.ParseRole(req.Role) == tenancy.RoleNone:
		writeError(w, invalid("role must be admin, producer, consumer or viewer"))
		return
	case clusterRef == "" && req.Role != "":
		writeError(w, invalid("a role needs a cluster"))
		return
	}
	var hash *string
	if req.Password != "" {
		h, err := HashPassword(req.Password)
		if err != nil {
			writeError(w, errInternal)
			return
		}
		hash = &h
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var userID, tenantID, tenantSlug, clusterID string
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var status string
		var err error
		if tenantRef == "" {
			err = tx.QueryRow(ctx, `SELECT id::text, slug, status FROM queen_proxy.tenants WHERE is_platform`).
				Scan(&tenantID, &tenantSlug, &status)
		} else {
			err = tx.QueryRow(ctx, `SELECT id::text, slug, status FROM queen_proxy.tenants WHERE slug = $1 OR id::text = $1`,
				tenantRef).Scan(&tenantID, &tenantSlug, &status)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return memberError{notFound("no such tenant")}
		}
		if err != nil {
			return err
		}
		if status == "deleting" {
			return memberError{conflict("this tenant is being deleted")}
		}
		if clusterRef != "" {
			var clusterTenant, clusterStatus string
			err := tx.QueryRow(ctx, `SELECT id::text, tenant_id::text, status FROM queen_proxy.clusters
				WHERE slug = $1 OR id::text = $1`, clusterRef).Scan(&clusterID, &clusterTenant, &clusterStatus)
			switch {
			case errors.Is(err, pgx.ErrNoRows) || (err == nil && clusterTenant != tenantID):
				return memberError{notFound("no such cluster of that tenant")}
			case err != nil:
				return err
			case clusterStatus == "deleting":
				return memberError{conflict("this cluster is being deleted")}
			}
		}
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2, $3, 'local')::text`,
			tenantID, email, hash).Scan(&userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'operator', $2::uuid)`, userID, claims.UserID); err != nil {
			return err
		}
		if name != "" {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_name($1::uuid, $2)`, userID, name); err != nil {
				return err
			}
		}
		if req.Operator {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_operator($1, true)`, email); err != nil {
				return err
			}
		}
		if clusterID != "" {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, clusterID, email, req.Role); err != nil {
				return err
			}
		}
		return operatorAudit(ctx, tx, tenantID, clusterID, claims.UserID, "operator_user_created", userID,
			map[string]any{"email": email, "name": name, "provider": "local", "operator": req.Operator,
				"role": nilIfEmpty(req.Role), "password": hash != nil})
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		writeError(w, conflict("a user with this e-mail address exists"))
		return
	}
	if s.fleetActionFailed(w, "operator_user_created", err) {
		return
	}
	if clusterID != "" {
		s.changed(clusterID)
	}
	if req.Operator {
		s.o.Identities.InvalidateUsers()
	}
	// An operator typed the address: its owner is asked to confirm it, as
	// for an account an operator creates from a cluster's members.
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": userID, "email": email, "name": name, "tenant_id": tenantID, "tenant_slug": tenantSlug,
		"is_operator": req.Operator, "cluster_id": nilIfEmpty(clusterID), "role": nilIfEmpty(req.Role),
		"verification_email": s.sendVerification(r.Context(), userID, email, claims.UserID),
	})
}

var errOwnOperatorBit = conflict("you cannot withdraw your own operator bit; another operator must")

// fleetSetOperator grants or withdraws a user's operator bit through
// set_operator, the only way to change it, which also tells every gateway
// at once. An operator cannot withdraw their own bit, so the fleet always
// keeps one operator who can grant it again; two operators withdrawing
// each other's at once are serialised on both rows: the second finds its
// own bit gone and is refused, changing nothing.
func (s *Surface) fleetSetOperator(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims, userID string) {
	var req struct {
		Operator *bool `json:"operator"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case !uuidtext.ValidLower(userID):
		writeError(w, invalid("malformed user id"))
		return
	case req.Operator == nil:
		writeError(w, invalid("operator must be true or false"))
		return
	case !*req.Operator && userID == claims.UserID:
		writeError(w, errOwnOperatorBit)
		return
	}
	on := *req.Operator
	action := "operator_bit_revoked"
	if on {
		action = "operator_bit_granted"
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var email, tenant string
	changed := false
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		// The caller's row and the target's are locked together, in id
		// order, before anything reads them: the audit below checks the
		// caller's bit, so two operators changing each other's bits would
		// otherwise each hold the row the other waits for.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM queen_proxy.users WHERE id IN ($1::uuid, $2::uuid)
			ORDER BY id FOR UPDATE`, userID, claims.UserID); err != nil {
			return err
		}
		var was bool
		err := tx.QueryRow(ctx, `SELECT email, tenant_id::text, is_operator FROM queen_proxy.users
			WHERE id = $1::uuid`, userID).Scan(&email, &tenant, &was)
		if errors.Is(err, pgx.ErrNoRows) {
			return memberError{notFound("no such user")}
		}
		if err != nil {
			return err
		}
		if was == on {
			return nil
		}
		if err := operatorAudit(ctx, tx, tenant, "", claims.UserID, action, userID,
			map[string]any{"email": email, "is_operator": on, "was": was}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_operator($1, $2)`, email, on); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if s.fleetActionFailed(w, action, err) {
		return
	}
	if changed {
		s.o.Identities.InvalidateUsers()
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": userID, "email": email, "is_operator": on, "changed": changed})
}

var errMailNotConfigured = apiErr(http.StatusServiceUnavailable, apierror.NotConfigured,
	"e-mail is not configured on this gateway, so it sends no invitations; create the account instead")

// fleetInvite invites an address no account has to a cluster with a role,
// by e-mail, through the member route's invitation: the account is made in
// the cluster's tenant when the invitation is accepted. Audited as the
// operator's operator_member_invited, which the database refuses unless
// the caller still holds the operator bit when it commits.
func (s *Surface) fleetInvite(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims) {
	var req struct {
		Email   string `json:"email"`
		Cluster string `json:"cluster"`
		Role    string `json:"role"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	email, ok := normalEmail(req.Email)
	role, roleOK := checkedRole(req.Role)
	clusterRef := strings.ToLower(strings.TrimSpace(req.Cluster))
	switch {
	case !ok:
		writeError(w, invalid("email must be an e-mail address"))
		return
	case clusterRef == "":
		writeError(w, invalid("cluster is required"))
		return
	case !roleOK:
		writeError(w, invalid("role must be admin, producer, consumer or viewer"))
		return
	case !s.mailOn():
		writeError(w, errMailNotConfigured)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var clusterID, slug string
	err := s.o.Pool.QueryRow(ctx, `SELECT id::text, slug FROM queen_proxy.clusters WHERE slug = $1 OR id::text = $1`,
		clusterRef).Scan(&clusterID, &slug)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, errNoSuchFleetCluster)
		return
	}
	if s.fleetActionFailed(w, "operator_member_invited", err) {
		return
	}
	out, err := s.sendInvitation(r.Context(), invitation{clusterID: clusterID, clusterSlug: slug, email: email, role: role,
		inviterID: claims.UserID,
		audit: func(ctx context.Context, tx pgx.Tx, tenantID string) error {
			return operatorAudit(ctx, tx, tenantID, clusterID, claims.UserID, "operator_member_invited", email,
				map[string]any{"email": email, "role": role})
		}})
	if s.fleetActionFailed(w, "operator_member_invited", err) {
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

// fleetInvitations lists the pending invitations of every cluster.
func (s *Surface) fleetInvitations(w http.ResponseWriter, r *http.Request) {
	out, err := s.pendingInvitations(r.Context(), "")
	if err != nil {
		s.fleetFailed(w, "invitations", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"invitations": out, "mail": s.mailOn()})
}

// fleetRevokeInvitation withdraws any cluster's pending invitation,
// audited as the operator's operator_invitation_revoked.
func (s *Surface) fleetRevokeInvitation(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims, id string) {
	if !uuidLike(id) {
		writeError(w, errNoSuchInvitation)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		email, cluster, tenant, err := withdrawInvitation(ctx, tx, id, "")
		if err != nil {
			return err
		}
		return operatorAudit(ctx, tx, tenant, cluster, claims.UserID, "operator_invitation_revoked", id, map[string]any{"email": email})
	})
	if s.fleetActionFailed(w, "operator_invitation_revoked", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}
