package controlplane

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Roles are the cluster roles a user can hold.
var Roles = []string{"admin", "producer", "consumer", "viewer"}

// Role is a user's role on one cluster.
type Role struct {
	ClusterID   string `json:"cluster_id"`
	ClusterSlug string `json:"cluster_slug"`
	Role        string `json:"role"`
}

// User is one row of queen_proxy.users (never its password hash) with its
// roles.
type User struct {
	ID          string     `json:"id"`
	Email       string     `json:"email"`
	Name        *string    `json:"name"`
	TenantID    string     `json:"tenant_id"`
	TenantSlug  string     `json:"tenant_slug"`
	IsOperator  bool       `json:"is_operator"`
	HasPassword bool       `json:"has_password"`
	Roles       []Role     `json:"roles"`
	CreatedAt   time.Time  `json:"created_at"`
	LastLoginAt *time.Time `json:"last_login_at"`
	// CreatedFrom is where the account was made: control_plane (this CLI
	// or plain SQL), operator, console (by a cluster admin, before the
	// console stopped creating accounts for unknown addresses) or signup
	// (a provider sign-in with autoprovision).
	CreatedFrom string `json:"created_from"`
	// CreatedBy is the e-mail of the user who made it, when one did and
	// still exists.
	CreatedBy *string `json:"created_by"`
}

// Origins are the values of User.CreatedFrom.
var Origins = []string{"control_plane", "operator", "console", "signup"}

const userSelect = `SELECT u.id::text, u.email, u.name, t.id::text, t.slug, u.is_operator,
	u.password_hash IS NOT NULL, u.created_at, u.last_login_at, u.created_from,
	(SELECT b.email FROM queen_proxy.users b WHERE b.id = u.created_by),
	coalesce((SELECT jsonb_agg(jsonb_build_object('cluster_id', c.id, 'cluster_slug', c.slug, 'role', r.role)
	                           ORDER BY c.slug)
	            FROM queen_proxy.cluster_roles r JOIN queen_proxy.clusters c ON c.id = r.cluster_id
	           WHERE r.user_id = u.id), '[]'::jsonb)
	FROM queen_proxy.users u JOIN queen_proxy.tenants t ON t.id = u.tenant_id`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.Name, &u.TenantID, &u.TenantSlug, &u.IsOperator, &u.HasPassword,
		&u.CreatedAt, &u.LastLoginAt, &u.CreatedFrom, &u.CreatedBy, &u.Roles)
	u.Roles = nonNil(u.Roles)
	return u, err
}

func getUser(ctx context.Context, db DB, id string) (User, error) {
	u, err := scanUser(db.QueryRow(ctx, userSelect+` WHERE u.id = $1::uuid`, id))
	if err != nil {
		return User{}, dbError("read user", err)
	}
	return u, nil
}

func checkEmail(raw string) (string, error) { return CheckEmail(raw) }

func checkRole(role string) (string, error) { return CheckRole(role) }

// NewUser describes a user to create.
type NewUser struct {
	Tenant   string // slug or id
	Email    string
	Name     string // optional display name
	Password string // optional; 12 to 128 characters; stored as bcrypt (cost 10)
	// Operator gives the user the operator bit in the same transaction.
	// Without a Tenant, an operator lands in the platform tenant.
	Operator bool
}

// PlatformTenant is the slug of the operators' own tenant, which
// `caddy queen migrate` creates and nothing deletes.
const PlatformTenant = "platform"

// CreateUser creates a local user through create_user (and set_user_name
// for a display name) in one transaction. The password, when given, is
// hashed by pgcrypto's bcrypt in the database, like bootstrap_tenant does.
func CreateUser(ctx context.Context, db DB, n NewUser) (User, error) {
	email, err := checkEmail(n.Email)
	if err != nil {
		return User{}, err
	}
	name, err := CheckUserName(n.Name)
	if err != nil {
		return User{}, err
	}
	var password *string
	if n.Password != "" {
		if err := CheckPassword(n.Password); err != nil {
			return User{}, err
		}
		password = &n.Password
	}
	tenant := n.Tenant
	if strings.TrimSpace(tenant) == "" {
		if !n.Operator {
			return User{}, errorf(Invalid, "a tenant is required for a user who is not an operator")
		}
		tenant = PlatformTenant
	}
	t, err := lookupTenant(ctx, db, tenant)
	if err != nil {
		return User{}, err
	}
	var id string
	err = inTx(ctx, db, "create user", func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2,
			CASE WHEN $3::text IS NULL THEN NULL ELSE public.crypt($3::text, public.gen_salt('bf', 10)) END,
			'local')::text`, t.ID, email, password).Scan(&id); err != nil {
			return err
		}
		if n.Operator {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_operator($1, true)`, email); err != nil {
				return err
			}
		}
		if name == "" {
			return nil
		}
		_, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_name($1::uuid, $2)`, id, name)
		return err
	})
	if err != nil {
		return User{}, err
	}
	return getUser(ctx, db, id)
}

// ListUsers returns the users of a tenant (all users when tenant is empty),
// ordered by e-mail.
func ListUsers(ctx context.Context, db DB, tenant string) ([]User, error) {
	return FindUsers(ctx, db, UserFilter{Tenant: tenant})
}

// UserFilter narrows FindUsers; zero fields do not filter.
type UserFilter struct {
	Tenant        string // slug or id
	CreatedFrom   string // one of Origins
	NeverSignedIn bool   // only users with no sign-in on record
}

// FindUsers lists the users matching f, by e-mail. Accounts a cluster
// admin created in the console that were never signed in to
// (CreatedFrom "console", NeverSignedIn) are the ones to review: the
// console no longer creates accounts for unknown addresses, and a provider
// sign-in does not link to them.
func FindUsers(ctx context.Context, db DB, f UserFilter) ([]User, error) {
	var tenantID, from *string
	if normalize(f.Tenant) != "" {
		t, err := lookupTenant(ctx, db, f.Tenant)
		if err != nil {
			return nil, err
		}
		tenantID = &t.ID
	}
	if o := normalize(f.CreatedFrom); o != "" {
		known := false
		for _, k := range Origins {
			known = known || o == k
		}
		if !known {
			return nil, errorf(Invalid, "invalid origin %q: use %s", f.CreatedFrom, strings.Join(Origins, ", "))
		}
		from = &o
	}
	rows, err := db.Query(ctx, userSelect+` WHERE ($1::uuid IS NULL OR u.tenant_id = $1::uuid)
		AND ($2::text IS NULL OR u.created_from = $2) AND (NOT $3 OR u.last_login_at IS NULL)
		ORDER BY u.email`, tenantID, from, f.NeverSignedIn)
	if err != nil {
		return nil, dbError("list users", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) { return scanUser(r) })
	if err != nil {
		return nil, dbError("list users", err)
	}
	return nonNil(out), nil
}

// Grant is a role change on a cluster. Previous is the role the user had
// before ("" for none); Role is the role after ("" once revoked).
type Grant struct {
	Email    string `json:"email"`
	Cluster  string `json:"cluster"`
	Role     string `json:"role"`
	Previous string `json:"previous"`
}

// userAndCluster resolves both sides of a grant and checks they share a
// tenant, so the refusal names them as the operator did.
func userAndCluster(ctx context.Context, db DB, email, cluster string) (u, c ref, previous string, err error) {
	e, err := checkEmail(email)
	if err != nil {
		return ref{}, ref{}, "", err
	}
	if u, err = lookupUser(ctx, db, e); err != nil {
		return ref{}, ref{}, "", err
	}
	if c, err = lookupCluster(ctx, db, cluster); err != nil {
		return ref{}, ref{}, "", err
	}
	if u.Tenant != c.Tenant {
		return ref{}, ref{}, "", errorf(CrossTenant, "user %q belongs to another tenant than cluster %q", u.Name, c.Name)
	}
	err = db.QueryRow(ctx, `SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid`,
		u.ID, c.ID).Scan(&previous)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ref{}, ref{}, "", dbError("read role", err)
	}
	return u, c, previous, nil
}

// GrantRole gives a user a role on a cluster of its own tenant through
// grant_cluster_role, replacing any role it had there.
func GrantRole(ctx context.Context, db DB, email, cluster, role string) (Grant, error) {
	r, err := checkRole(role)
	if err != nil {
		return Grant{}, err
	}
	u, c, previous, err := userAndCluster(ctx, db, email, cluster)
	if err != nil {
		return Grant{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.grant_cluster_role($1::uuid, $2, $3)`, c.ID, u.Name, r); err != nil {
		return Grant{}, dbError("grant role", err)
	}
	return Grant{Email: u.Name, Cluster: c.Name, Role: r, Previous: previous}, nil
}

// RevokeRole takes a user's role on a cluster away through
// revoke_cluster_role.
func RevokeRole(ctx context.Context, db DB, email, cluster string) (Grant, error) {
	u, c, previous, err := userAndCluster(ctx, db, email, cluster)
	if err != nil {
		return Grant{}, err
	}
	if previous == "" {
		return Grant{}, errorf(NotFound, "user %q has no role on cluster %q", u.Name, c.Name)
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.revoke_cluster_role($1::uuid, $2)`, c.ID, u.Name); err != nil {
		return Grant{}, dbError("revoke role", err)
	}
	return Grant{Email: u.Name, Cluster: c.Name, Previous: previous}, nil
}

// SetOperator grants or withdraws the operator (super-admin) bit through
// set_operator, the only way to change it.
func SetOperator(ctx context.Context, db DB, email string, on bool) (User, error) {
	e, err := checkEmail(email)
	if err != nil {
		return User{}, err
	}
	u, err := lookupUser(ctx, db, e)
	if err != nil {
		return User{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_operator($1, $2)`, u.Name, on); err != nil {
		return User{}, dbError("set operator", err)
	}
	return getUser(ctx, db, u.ID)
}
