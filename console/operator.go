package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/tenancy"
)

// operatorCaller is the operator API's gate: the API must be on, and the
// caller a live operator; everyone else sees the route as absent. The
// acting cluster (x-queen-act-cluster honoured on any host) picks the
// cell the API works on.
func (s *Surface) operatorCaller(w http.ResponseWriter, r *http.Request) (*caller, bool) {
	if !s.o.OperatorAPI || !s.o.OperatorEnabled {
		writeError(w, errOperatorBlocked)
		return nil, false
	}
	c, e := s.target(r, true)
	if e != nil {
		// Only a live operator learns why; to anyone else the API does
		// not exist.
		if !s.requestIsLiveOperator(r) {
			writeError(w, errOperatorBlocked)
			return nil, false
		}
		writeError(w, e)
		return nil, false
	}
	if !c.operator {
		writeError(w, errOperatorBlocked)
		return nil, false
	}
	return c, true
}

// requestIsLiveOperator reports whether the request's session belongs to a
// live operator, whatever the cluster.
func (s *Surface) requestIsLiveOperator(r *http.Request) bool {
	if s.o.Sessions == nil {
		return false
	}
	cred, err := tenancy.ExtractCredential(r.Header, s.o.Cookies, s.o.IsHTTPS(r))
	if err != nil || cred.Kind != tenancy.CredentialSession {
		return false
	}
	claims, e := s.verifySession(r.Context(), cred.Value)
	return e == nil && s.o.Identities.IsOperator(r.Context(), claims.UserID)
}

// serveOperator dispatches /api/operator/*.
func (s *Surface) serveOperator(w http.ResponseWriter, r *http.Request) {
	p := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/operator/"), "/")
	switch p[0] {
	case "cells", "tenants", "plans", "clusters", "accounts":
		s.serveFleet(w, r, p)
		return
	}
	c, ok := s.operatorCaller(w, r)
	if !ok {
		return
	}
	switch {
	case len(p) == 1 && p[0] == "users" && r.Method == http.MethodGet:
		s.operatorUsers(w, r, c)
	case len(p) == 1 && p[0] == "users" && r.Method == http.MethodPost:
		s.operatorCreateUser(w, r, c)
	case len(p) == 2 && p[0] == "users" && r.Method == http.MethodPatch:
		s.operatorRenameUser(w, r, c, strings.ToLower(p[1]))
	case len(p) == 4 && p[0] == "users" && p[2] == "roles" && (r.Method == http.MethodPut || r.Method == http.MethodDelete):
		s.operatorRole(w, r, c.claims.UserID, strings.ToLower(p[1]), strings.ToLower(p[3]), c.cluster.CellID)
	case len(p) >= 1 && p[0] == "users":
		writeError(w, errMethod)
	default:
		writeError(w, errNotFoundRoute)
	}
}

// serveFleet dispatches the fleet routes, which span every cell.
func (s *Surface) serveFleet(w http.ResponseWriter, r *http.Request, p []string) {
	claims, ok := s.fleetCaller(w, r)
	if !ok {
		return
	}
	m := r.Method
	get := m == http.MethodGet || m == http.MethodHead
	switch {
	case len(p) == 1 && p[0] == "cells" && get:
		s.fleetCells(w, r)
	case len(p) == 1 && p[0] == "tenants" && get:
		s.fleetTenants(w, r)
	case len(p) == 1 && p[0] == "plans" && get:
		s.fleetPlans(w, r)
	case len(p) == 3 && p[0] == "clusters" && p[2] == "suspend" && m == http.MethodPost:
		s.fleetSetStatus(w, r, claims, p[1], true)
	case len(p) == 3 && p[0] == "clusters" && p[2] == "resume" && m == http.MethodPost:
		s.fleetSetStatus(w, r, claims, p[1], false)
	case len(p) == 3 && p[0] == "clusters" && p[2] == "plan" && m == http.MethodPut:
		s.fleetSetPlan(w, r, claims, p[1])
	case len(p) == 3 && p[0] == "clusters" && p[2] == "keys" && m == http.MethodPost:
		s.fleetIssueKey(w, r, claims, p[1])
	case len(p) == 3 && p[0] == "clusters" && p[2] == "requests" && get:
		cl, err := s.o.Clusters.ClusterByReference(r.Context(), p[1])
		if err != nil {
			writeError(w, errNoSuchFleetCluster)
			return
		}
		s.requests(w, r, &caller{claims: claims, cluster: cl, role: tenancy.RoleAdmin, operator: true})
	case len(p) == 2 && p[0] == "accounts" && p[1] == "invitations" && get:
		s.fleetInvitations(w, r)
	case len(p) == 2 && p[0] == "accounts" && p[1] == "invitations" && m == http.MethodPost:
		s.fleetInvite(w, r, claims)
	case len(p) == 3 && p[0] == "accounts" && p[1] == "invitations" && m == http.MethodDelete:
		s.fleetRevokeInvitation(w, r, claims, strings.ToLower(p[2]))
	case len(p) == 2 && p[0] == "accounts" && p[1] == "invitations",
		len(p) == 3 && p[0] == "accounts" && p[1] == "invitations":
		writeError(w, errMethod)
	case len(p) == 1 && p[0] == "accounts" && get:
		s.fleetAccounts(w, r)
	case len(p) == 1 && p[0] == "accounts" && m == http.MethodPost:
		s.fleetCreateAccount(w, r, claims)
	case len(p) == 3 && p[0] == "accounts" && p[2] == "operator" && m == http.MethodPut:
		s.fleetSetOperator(w, r, claims, strings.ToLower(p[1]))
	case len(p) == 4 && p[0] == "accounts" && p[2] == "roles" && (m == http.MethodPut || m == http.MethodDelete):
		s.operatorRole(w, r, claims.UserID, strings.ToLower(p[1]), strings.ToLower(p[3]), "")
	case len(p) == 3 && p[0] == "accounts" && p[2] == "operator",
		len(p) == 4 && p[0] == "accounts" && p[2] == "roles":
		writeError(w, errMethod)
	case len(p) == 1 || (len(p) == 3 && p[0] == "clusters" &&
		(p[2] == "suspend" || p[2] == "resume" || p[2] == "plan" || p[2] == "keys" || p[2] == "requests")):
		writeError(w, errMethod)
	default:
		writeError(w, errNotFoundRoute)
	}
}

type opUser struct {
	ID               string   `json:"id"`
	Email            string   `json:"email"`
	Name             *string  `json:"name"`
	TenantID         string   `json:"tenant_id"`
	TenantSlug       string   `json:"tenant_slug"`
	IsOperator       bool     `json:"is_operator"`
	HasLocalPassword bool     `json:"has_local_password"`
	CreatedAt        string   `json:"created_at"`
	LastLoginAt      *string  `json:"last_login_at"`
	Roles            []opRole `json:"roles"`
}

type opRole struct {
	ClusterID   string `json:"cluster_id"`
	ClusterSlug string `json:"cluster_slug"`
	Role        string `json:"role"`
}

// operatorUsers lists the tenants, clusters and users of the acting
// cluster's cell.
func (s *Surface) operatorUsers(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	cell := c.cluster.CellID
	type tenantJSON struct {
		ID   string `json:"id"`
		Slug string `json:"slug"`
		Name string `json:"name"`
	}
	type clusterJSON struct {
		ID       string `json:"id"`
		Slug     string `json:"slug"`
		TenantID string `json:"tenant_id"`
		Status   string `json:"status"`
	}
	rows, err := s.o.Pool.Query(ctx, `SELECT t.id::text, t.slug, t.name FROM queen_proxy.tenants t
		WHERE EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.tenant_id = t.id AND c.cell_id = $1::uuid)
		ORDER BY t.slug`, cell)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	tenants, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tenantJSON, error) {
		var t tenantJSON
		return t, row.Scan(&t.ID, &t.Slug, &t.Name)
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	rows, err = s.o.Pool.Query(ctx, `SELECT id::text, slug, tenant_id::text, status FROM queen_proxy.clusters
		WHERE cell_id = $1::uuid ORDER BY slug`, cell)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	clusters, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (clusterJSON, error) {
		var cl clusterJSON
		return cl, row.Scan(&cl.ID, &cl.Slug, &cl.TenantID, &cl.Status)
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	rows, err = s.o.Pool.Query(ctx, `SELECT u.id::text, u.email, u.name, u.tenant_id::text, t.slug, u.is_operator,
			u.password_hash IS NOT NULL, u.created_at, u.last_login_at
		FROM queen_proxy.users u JOIN queen_proxy.tenants t ON t.id = u.tenant_id
		WHERE EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.tenant_id = u.tenant_id AND c.cell_id = $1::uuid)
		ORDER BY u.email`, cell)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	users, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (opUser, error) {
		var u opUser
		var created time.Time
		var login *time.Time
		err := row.Scan(&u.ID, &u.Email, &u.Name, &u.TenantID, &u.TenantSlug, &u.IsOperator, &u.HasLocalPassword, &created, &login)
		u.CreatedAt, u.LastLoginAt, u.Roles = created.UTC().Format(time.RFC3339), timeJSON(login), []opRole{}
		return u, err
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	byUser := map[string]int{}
	for i, u := range users {
		byUser[u.ID] = i
	}
	rows, err = s.o.Pool.Query(ctx, `SELECT cr.user_id::text, c.id::text, c.slug, cr.role
		FROM queen_proxy.cluster_roles cr JOIN queen_proxy.clusters c ON c.id = cr.cluster_id
		WHERE c.cell_id = $1::uuid ORDER BY c.slug`, cell)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	var uid string
	var role opRole
	_, err = pgx.ForEachRow(rows, []any{&uid, &role.ClusterID, &role.ClusterSlug, &role.Role}, func() error {
		if i, ok := byUser[uid]; ok {
			users[i].Roles = append(users[i].Roles, role)
		}
		return nil
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"cell":    map[string]string{"id": c.cluster.CellID, "slug": c.cluster.CellSlug},
		"tenants": nonNil(tenants), "clusters": nonNil(clusters), "users": nonNil(users),
	})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// operatorAudit writes the operator's audit row.
func operatorAudit(ctx context.Context, tx pgx.Tx, tenantID, clusterID, actor, action, target string, meta map[string]any) error {
	var cluster any
	if clusterID != "" {
		cluster = clusterID
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, $2::uuid, 'user', $3::uuid, $4, $5, $6::jsonb)`,
		tenantID, cluster, actor, action, target, string(m))
	return err
}

// operatorCreateUser creates a user of a tenant on this cell, with a role
// on one of its clusters.
func (s *Surface) operatorCreateUser(w http.ResponseWriter, r *http.Request, c *caller) {
	var req struct {
		TenantID  string `json:"tenant_id"`
		Email     string `json:"email"`
		Name      string `json:"name"`
		Provider  string `json:"provider"`
		Password  string `json:"password"`
		ClusterID string `json:"cluster_id"`
		Role      string `json:"role"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	email, ok := normalEmail(req.Email)
	name, nameErr := controlplane.CheckUserName(req.Name)
	provider := req.Provider
	if provider == "" {
		provider = "local"
	}
	req.TenantID, req.ClusterID = strings.ToLower(req.TenantID), strings.ToLower(req.ClusterID)
	switch {
	case !ok:
		writeError(w, invalid("email must be an e-mail address"))
		return
	case !uuidtext.ValidLower(req.TenantID) || !uuidtext.ValidLower(req.ClusterID):
		writeError(w, invalid("tenant_id and cluster_id must be ids"))
		return
	case nameErr != nil:
		writeError(w, argInvalid("name", nameErr))
		return
	case provider != "local" && provider != "google" && provider != "github":
		writeError(w, invalid("provider must be local, google or github"))
		return
	case !validRole(&req.Role):
		writeError(w, invalid("role must be admin, producer, consumer or viewer"))
		return
	case provider != "local" && req.Password != "":
		writeError(w, invalid("a password is only for local users"))
		return
	case provider == "local" && req.Password != "" && passwordRule(req.Password) != nil:
		writeError(w, passwordRule(req.Password))
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
	var userID string
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.clusters
			WHERE id = $1::uuid AND tenant_id = $2::uuid AND cell_id = $3::uuid`,
			req.ClusterID, req.TenantID, c.cluster.CellID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return memberError{notFound("no such cluster of that tenant on this cell")}
		}
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2, $3, $4)::text`,
			req.TenantID, email, hash, provider).Scan(&userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'operator', $2::uuid)`,
			userID, c.claims.UserID); err != nil {
			return err
		}
		if name != "" {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_name($1::uuid, $2)`, userID, name); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, req.ClusterID, email, req.Role); err != nil {
			return err
		}
		return operatorAudit(ctx, tx, req.TenantID, req.ClusterID, c.claims.UserID, "operator_user_created", userID,
			map[string]any{"email": email, "name": name, "provider": provider, "role": req.Role})
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		writeError(w, conflict("a user with this e-mail address exists"))
		return
	}
	if s.memberFailed(w, c, err) {
		return
	}
	s.changed(req.ClusterID)
	// An operator typed the address: its owner is asked to confirm it.
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": userID, "email": email, "name": name, "tenant_id": req.TenantID, "cluster_id": req.ClusterID, "role": req.Role,
		"verification_email": s.sendVerification(r.Context(), userID, email, c.claims.UserID),
	})
}

// operatorRenameUser sets a user's display name.
func (s *Surface) operatorRenameUser(w http.ResponseWriter, r *http.Request, c *caller, userID string) {
	var req struct {
		Name string `json:"name"`
	}
	if e := readJSON(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if !uuidtext.ValidLower(userID) {
		writeError(w, invalid("malformed user id"))
		return
	}
	name, err := controlplane.CheckUserName(req.Name)
	if err == nil && name == "" {
		writeError(w, invalid("name: a display name is required"))
		return
	}
	if err != nil {
		writeError(w, argInvalid("name", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var tenant string
		var old *string
		err := tx.QueryRow(ctx, `SELECT u.tenant_id::text, u.name FROM queen_proxy.users u
			WHERE u.id = $1::uuid AND EXISTS (SELECT 1 FROM queen_proxy.clusters c
				WHERE c.tenant_id = u.tenant_id AND c.cell_id = $2::uuid) FOR UPDATE OF u`,
			userID, c.cluster.CellID).Scan(&tenant, &old)
		if errors.Is(err, pgx.ErrNoRows) {
			return memberError{notFound("no such user on this cell")}
		}
		if err != nil {
			return err
		}
		if old != nil && *old == name {
			return nil
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_name($1::uuid, $2)`, userID, name); err != nil {
			return err
		}
		return operatorAudit(ctx, tx, tenant, "", c.claims.UserID, "operator_user_updated", userID,
			map[string]any{"old_name": old, "name": name})
	})
	if s.memberFailed(w, c, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": userID, "name": name})
}

// operatorRole grants (PUT) or revokes (DELETE) a user's role on a
// cluster, under the last-admin rule: a cluster of the given cell (the
// user routes'), or of any cell when cell is "" (the fleet's). actor is the
// operator's user id, for the audit row.
func (s *Surface) operatorRole(w http.ResponseWriter, r *http.Request, actor, userID, clusterID, cell string) {
	if !uuidtext.ValidLower(userID) || !uuidtext.ValidLower(clusterID) {
		writeError(w, invalid("malformed user or cluster id"))
		return
	}
	grant := r.Method == http.MethodPut
	var req struct {
		Role string `json:"role"`
	}
	if grant {
		if e := readJSON(r, &req); e != nil {
			writeError(w, e)
			return
		}
		if !validRole(&req.Role) {
			writeError(w, invalid("role must be admin, producer, consumer or viewer"))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var tenant, email, userTenant string
		err := tx.QueryRow(ctx, `SELECT tenant_id::text FROM queen_proxy.clusters
			WHERE id = $1::uuid AND ($2::text = '' OR cell_id::text = $2::text) FOR UPDATE`, clusterID, cell).Scan(&tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			if cell == "" {
				return memberError{errNoSuchFleetCluster}
			}
			return memberError{notFound("no such cluster on this cell")}
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT email, tenant_id::text FROM queen_proxy.users WHERE id = $1::uuid`, userID).Scan(&email, &userTenant)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && userTenant != tenant) {
			return memberError{notFound("no such user of this cluster's tenant")}
		}
		if err != nil {
			return err
		}
		var current string
		err = tx.QueryRow(ctx, `SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid`,
			userID, clusterID).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if !grant && current == "" {
			return memberError{notFound("no such member on this cluster")}
		}
		if last, err := lastAdmin(ctx, tx, clusterID, current, req.Role); err != nil {
			return err
		} else if last {
			if grant {
				return memberError{errLastAdminDemote}
			}
			return memberError{errLastAdminRemove}
		}
		if grant {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, clusterID, email, req.Role); err != nil {
				return err
			}
			return operatorAudit(ctx, tx, tenant, clusterID, actor, "operator_role_granted", userID,
				map[string]any{"email": email, "role": req.Role, "previous_role": nilIfEmpty(current)})
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.revoke_cluster_role($1::uuid, $2)`, clusterID, email); err != nil {
			return err
		}
		return operatorAudit(ctx, tx, tenant, clusterID, actor, "operator_role_revoked", userID,
			map[string]any{"email": email, "role": current})
	})
	if s.fleetActionFailed(w, "operator_role", err) {
		return
	}
	s.changed(clusterID)
	if grant {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "role": req.Role})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "role": nil})
}
