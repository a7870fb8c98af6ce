package console

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
)

type memberJSON struct {
	UserID      string  `json:"user_id"`
	Email       string  `json:"email"`
	Name        *string `json:"name"`
	Role        string  `json:"role"`
	GrantedAt   string  `json:"granted_at"`
	LastLoginAt *string `json:"last_login_at"`
	CanLogin    bool    `json:"can_login"`
	// EmailVerified: the address was proven (an accepted invitation, a
	// used reset or verification link).
	EmailVerified bool `json:"email_verified"`
}

// listMembers is the cluster's roles, by e-mail; never a password hash.
func (s *Surface) listMembers(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rows, err := s.o.Pool.Query(ctx, `SELECT u.id::text, u.email, u.name, cr.role, cr.created_at, u.last_login_at,
			(u.password_hash IS NOT NULL OR EXISTS (SELECT 1 FROM queen_proxy.identities i WHERE i.user_id = u.id)),
			u.email_verified_at IS NOT NULL
		FROM queen_proxy.cluster_roles cr JOIN queen_proxy.users u ON u.id = cr.user_id
		WHERE cr.cluster_id = $1::uuid ORDER BY u.email`, c.cluster.ID)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	members, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (memberJSON, error) {
		var m memberJSON
		var granted time.Time
		var login *time.Time
		err := row.Scan(&m.UserID, &m.Email, &m.Name, &m.Role, &granted, &login, &m.CanLogin, &m.EmailVerified)
		m.GrantedAt = granted.UTC().Format(time.RFC3339)
		m.LastLoginAt = timeJSON(login)
		return m, err
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	if members == nil {
		members = []memberJSON{}
	}
	writeJSON(w, http.StatusOK, members)
}

// normalEmail lower-cases and trims an e-mail and checks its shape, as
// the CLI and the provisioning API do.
func normalEmail(raw string) (string, bool) {
	e, err := controlplane.CheckEmail(raw)
	return e, err == nil
}

// checkedRole reads a role as the CLI and the provisioning API do; ok is
// false for anything but a known role.
func checkedRole(raw string) (string, bool) {
	r, err := controlplane.CheckRole(raw)
	return r, err == nil
}

var (
	errNoSuchMember    = notFound("no such member on this cluster")
	errLastAdminDemote = invalid("cannot demote the last admin of this cluster")
	errLastAdminRemove = invalid("cannot remove the last admin of this cluster")
	errOtherTenant     = conflict("this e-mail address belongs to a user of another tenant")
	// Until the address's owner can accept an e-mail invitation, only an
	// operator creates an account for a new address.
	errInvitationRequired = apiErr(http.StatusForbidden, apierror.InvitationRequired,
		"no account has this e-mail address, and the console does not create one for an address it cannot verify; ask an operator to create the account, then add it here")
)

// errInviteInstead ends a member grant's transaction, with nothing
// written, when the address is to be invited by e-mail instead.
var errInviteInstead = errors.New("invite by e-mail")

// memberError carries a refusal out of a transaction.
type memberError struct{ e *apierror.Error }

func (m memberError) Error() string { return m.e.Message }

// lockRoles serializes role changes on one cluster (the last-admin rule
// reads then writes) and returns the cluster's tenant.
func lockRoles(ctx context.Context, tx pgx.Tx, clusterID string) (string, error) {
	var tenant string
	err := tx.QueryRow(ctx, `SELECT tenant_id::text FROM queen_proxy.clusters WHERE id = $1::uuid FOR UPDATE`, clusterID).Scan(&tenant)
	return tenant, err
}

// lastAdmin reports whether a change away from admin would leave the
// cluster without one.
func lastAdmin(ctx context.Context, tx pgx.Tx, clusterID, current, next string) (bool, error) {
	if current != "admin" || next == "admin" {
		return false, nil
	}
	var admins int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.cluster_roles WHERE cluster_id = $1::uuid AND role = 'admin'`,
		clusterID).Scan(&admins)
	return admins <= 1, err
}

// grantMember invites (creating the user in the cluster's tenant when the
// e-mail is new) or changes a role; existingOnly refuses non-members.
func (s *Surface) grantMember(w http.ResponseWriter, r *http.Request, c *caller, existingOnly bool) {
	var req struct {
		Email string `json:"email"`
		Role  string `json:"role"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	email, ok := normalEmail(req.Email)
	if !ok {
		writeError(w, invalid("email must be an e-mail address"))
		return
	}
	role, ok := checkedRole(req.Role)
	if !ok {
		writeError(w, invalid("role must be admin, producer, consumer or viewer"))
		return
	}
	req.Role = role
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var userID string
	created := false
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		tenant, err := lockRoles(ctx, tx, c.cluster.ID)
		if err != nil {
			return err
		}
		var userTenant string
		err = tx.QueryRow(ctx, `SELECT id::text, tenant_id::text FROM queen_proxy.users WHERE email = $1`, email).Scan(&userID, &userTenant)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if existingOnly {
				return memberError{errNoSuchMember}
			}
			// Whoever creates the account for an address decides whose
			// tenant its owner lands in: not a cluster admin, who need
			// not own the address.
			if !c.operator {
				if s.mailOn() {
					return errInviteInstead
				}
				return memberError{errInvitationRequired}
			}
			if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2, NULL, 'local')::text`,
				tenant, email).Scan(&userID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'operator', $2::uuid)`,
				userID, c.claims.UserID); err != nil {
				return err
			}
			created = true
			if err := s.audit(ctx, tx, c, "console_user_invited", userID, map[string]any{"email": email}); err != nil {
				return err
			}
		case err != nil:
			return err
		case userTenant != tenant:
			if existingOnly {
				return memberError{errNoSuchMember}
			}
			return memberError{errOtherTenant}
		}
		var current string
		err = tx.QueryRow(ctx, `SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid`,
			userID, c.cluster.ID).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if current == "" && existingOnly {
			return memberError{errNoSuchMember}
		}
		if last, err := lastAdmin(ctx, tx, c.cluster.ID, current, req.Role); err != nil {
			return err
		} else if last {
			return memberError{errLastAdminDemote}
		}
		// Audited first: the audit row is where the database checks the
		// caller's admin role, which this very change may take away (an
		// admin demoting themselves).
		meta := map[string]any{"email": email, "role": req.Role, "previous_role": nilIfEmpty(current)}
		if err := s.audit(ctx, tx, c, "console_member_granted", userID, meta); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, c.cluster.ID, email, req.Role)
		return err
	})
	if errors.Is(err, errInviteInstead) {
		s.invite(w, r, c, email, req.Role)
		return
	}
	if s.memberFailed(w, c, err) {
		return
	}
	s.changed(c.cluster.ID)
	out := map[string]any{"ok": true, "user_id": userID, "email": email, "role": req.Role, "created": created}
	if created {
		// An operator typed the address: its owner is asked to confirm it.
		out["verification_email"] = s.sendVerification(r.Context(), userID, email, c.claims.UserID)
	}
	writeJSON(w, http.StatusOK, out)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// removeMember takes a member's role on the cluster away.
func (s *Surface) removeMember(w http.ResponseWriter, r *http.Request, c *caller) {
	var req struct {
		Email string `json:"email"`
	}
	if q := r.URL.Query().Get("email"); q != "" {
		req.Email = q
	} else if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	email, ok := normalEmail(req.Email)
	if !ok {
		writeError(w, invalid("email must be an e-mail address"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		if _, err := lockRoles(ctx, tx, c.cluster.ID); err != nil {
			return err
		}
		var userID, current string
		err := tx.QueryRow(ctx, `SELECT u.id::text, cr.role FROM queen_proxy.cluster_roles cr
			JOIN queen_proxy.users u ON u.id = cr.user_id
			WHERE cr.cluster_id = $1::uuid AND u.email = $2`, c.cluster.ID, email).Scan(&userID, &current)
		if errors.Is(err, pgx.ErrNoRows) {
			return memberError{errNoSuchMember}
		}
		if err != nil {
			return err
		}
		if last, err := lastAdmin(ctx, tx, c.cluster.ID, current, ""); err != nil {
			return err
		} else if last {
			return memberError{errLastAdminRemove}
		}
		// Audited first, as in grantMember: an admin may remove themselves.
		if err := s.audit(ctx, tx, c, "console_member_revoked", userID, map[string]any{"email": email, "role": current}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.revoke_cluster_role($1::uuid, $2)`, c.cluster.ID, email)
		return err
	})
	if s.memberFailed(w, c, err) {
		return
	}
	s.changed(c.cluster.ID)
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// memberFailed answers a failed member change; false when err is nil.
func (s *Surface) memberFailed(w http.ResponseWriter, c *caller, err error) bool {
	if err == nil {
		return false
	}
	var me memberError
	if errors.As(err, &me) {
		writeError(w, me.e)
		return true
	}
	if s.standingWithdrawn(w, err) {
		return true
	}
	s.o.Log.Error("member change failed", zap.String("cluster", c.cluster.Slug), zap.Error(err))
	writeError(w, errDatabase)
	return true
}
