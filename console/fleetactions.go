package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/tenancy"
)

// fleetCluster is the row an operator action works on, locked for the
// transaction.
type fleetCluster struct {
	id, slug, tenantID, status, tenantStatus, plan string
}

var errNoSuchFleetCluster = notFound("no such cluster")

// lockFleetCluster finds a cluster by id or slug and locks its row.
func lockFleetCluster(ctx context.Context, tx pgx.Tx, ref string) (fleetCluster, error) {
	ref = strings.ToLower(strings.TrimSpace(ref))
	var c fleetCluster
	var err error
	const q = `SELECT c.id::text, c.slug, c.tenant_id::text, c.status, t.status, p.code
		FROM queen_proxy.clusters c
		JOIN queen_proxy.tenants t ON t.id = c.tenant_id
		JOIN queen_proxy.plans p ON p.id = c.plan_id
		WHERE `
	if uuidtext.ValidLower(ref) {
		err = tx.QueryRow(ctx, q+`c.id = $1::uuid FOR UPDATE OF c`, ref).Scan(&c.id, &c.slug, &c.tenantID, &c.status, &c.tenantStatus, &c.plan)
	} else {
		err = tx.QueryRow(ctx, q+`c.slug = $1 FOR UPDATE OF c`, ref).Scan(&c.id, &c.slug, &c.tenantID, &c.status, &c.tenantStatus, &c.plan)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return c, memberError{errNoSuchFleetCluster}
	}
	return c, err
}

// fleetActionFailed answers an action's error: its own refusal, or 502.
func (s *Surface) fleetActionFailed(w http.ResponseWriter, action string, err error) bool {
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
	s.o.Log.Error("operator action failed", zap.String("action", action), zap.Error(err))
	writeError(w, errDatabase)
	return true
}

// fleetSetStatus suspends a cluster (from active or push_blocked) or
// resumes it (from suspended or push_blocked, as the CLI's cluster resume
// does) through set_cluster_status. A cluster already in the wanted state
// is answered as it is, unchanged and unaudited; a deleting cluster is
// neither.
func (s *Surface) fleetSetStatus(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims, ref string, suspend bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	want, action := "active", "operator_cluster_resumed"
	if suspend {
		want, action = "suspended", "operator_cluster_suspended"
	}
	var c fleetCluster
	changed := false
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if c, err = lockFleetCluster(ctx, tx, ref); err != nil {
			return err
		}
		switch {
		case c.status == want:
			return nil
		case c.status == "deleting":
			return memberError{conflict("this cluster is being deleted")}
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_cluster_status($1::uuid, $2)`, c.id, want); err != nil {
			return err
		}
		changed = true
		return operatorAudit(ctx, tx, c.tenantID, c.id, claims.UserID, action, c.id,
			map[string]any{"slug": c.slug, "status": want, "previous_status": c.status})
	})
	if s.fleetActionFailed(w, action, err) {
		return
	}
	if changed {
		s.changed(c.id)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "id": c.id, "slug": c.slug, "cluster_status": want, "changed": changed,
		"status": tenancy.MergeStatus(c.tenantStatus, want).String(),
	})
}

// fleetSetPlan assigns a plan through assign_plan.
func (s *Surface) fleetSetPlan(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims, ref string) {
	var req struct {
		Plan string `json:"plan"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	plan, perr := controlplane.CheckPlanCode(req.Plan)
	if perr != nil {
		writeError(w, argInvalid("plan", perr))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var c fleetCluster
	changed := false
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if c, err = lockFleetCluster(ctx, tx, ref); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.plans WHERE code = $1`, plan).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return memberError{invalid("no such plan " + strings.ToValidUTF8(plan, "?"))}
		}
		if c.status == "deleting" {
			return memberError{conflict("this cluster is being deleted")}
		}
		if c.plan == plan {
			return nil
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.assign_plan($1::uuid, $2)`, c.id, plan); err != nil {
			return err
		}
		changed = true
		return operatorAudit(ctx, tx, c.tenantID, c.id, claims.UserID, "operator_plan_changed", c.id,
			map[string]any{"slug": c.slug, "plan_code": plan, "previous_plan_code": c.plan})
	})
	if s.fleetActionFailed(w, "operator_plan_changed", err) {
		return
	}
	if changed {
		s.changed(c.id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": c.id, "slug": c.slug, "plan": plan, "changed": changed})
}

// fleetIssueKey issues an API key on any cluster through issue_api_key and
// shows its plaintext once.
func (s *Surface) fleetIssueKey(w http.ResponseWriter, r *http.Request, claims tenancy.SessionClaims, ref string) {
	name, scopes, e := readKeyRequest(r)
	if e != nil {
		writeError(w, e)
		return
	}
	plaintext, hash, err := tenancy.NewAPIKey("live")
	if err != nil {
		writeError(w, errInternal)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var c fleetCluster
	var id string
	var created time.Time
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var err error
		if c, err = lockFleetCluster(ctx, tx, ref); err != nil {
			return err
		}
		if c.status == "deleting" || c.tenantStatus == "deleting" {
			return memberError{conflict("this cluster is being deleted")}
		}
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, $4::text[])::text`,
			c.id, name, hash, scopes).Scan(&id); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT created_at FROM queen_proxy.api_keys WHERE id = $1::uuid`, id).Scan(&created); err != nil {
			return err
		}
		return operatorAudit(ctx, tx, c.tenantID, c.id, claims.UserID, "operator_api_key_issued", id,
			map[string]any{"name": name, "scopes": scopes})
	})
	if s.fleetActionFailed(w, "operator_api_key_issued", err) {
		return
	}
	s.changed(c.id)
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": id, "key": plaintext, "name": name, "scopes": scopes, "cluster_id": c.id, "cluster_slug": c.slug,
		"created_at": utcText(created),
	})
}
