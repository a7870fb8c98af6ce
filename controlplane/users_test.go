package controlplane

import (
	"strings"
	"testing"
)

func TestUsersAndRoles(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[Tenant](t)(CreateTenant(ctx, pool, "beta", ""))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "beta", Slug: "beta-1", Plan: "free", Cell: "eu1-a"}))

	u := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: " Ops@Acme.Test ", Name: "Ops Team",
		Password: "correct horse battery"}))
	if u.Email != "ops@acme.test" || u.Name == nil || *u.Name != "Ops Team" || !u.HasPassword || u.TenantSlug != "acme" ||
		u.IsOperator || len(u.Roles) != 0 {
		t.Fatalf("created %+v", u)
	}
	if !scalar[bool](t, pool, `SELECT password_hash = public.crypt('correct horse battery', password_hash) AND password_hash LIKE '$2a$10$%'
		FROM queen_proxy.users WHERE id = $1::uuid`, u.ID) {
		t.Fatal("the stored password hash is not bcrypt (cost 10) of the password")
	}
	plain := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "beta", Email: "dev@beta.test"}))
	if plain.HasPassword || plain.Name != nil {
		t.Fatalf("created %+v", plain)
	}

	_, err := CreateUser(ctx, pool, NewUser{Tenant: "beta", Email: "OPS@acme.test"})
	wantErr(t, err, Taken, `user e-mail "ops@acme.test" is already taken`)
	_, err = CreateUser(ctx, pool, NewUser{Tenant: "nope", Email: "x@y.test"})
	wantErr(t, err, NotFound, `unknown tenant "nope"`)
	_, err = CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "nobody"})
	wantErr(t, err, Invalid, `invalid e-mail "nobody"`)
	_, err = CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "x@y.test", Password: "short"})
	wantErr(t, err, Invalid, "password must be 12 to 128 characters long")
	_, err = CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "x@y.test", Name: strings.Repeat("n", 161)})
	wantErr(t, err, Invalid, "user name is longer than 160 characters")
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.users WHERE email = 'x@y.test'`); n != 0 {
		t.Fatal("a refused user was created")
	}

	l := listen(t, url)
	g := must[Grant](t)(GrantRole(ctx, pool, "ops@acme.test", "acme-prod", "Viewer"))
	if g.Role != "viewer" || g.Previous != "" || g.Cluster != "acme-prod" || g.Email != "ops@acme.test" {
		t.Fatalf("grant %+v", g)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("grant announced %q", p)
	}
	g = must[Grant](t)(GrantRole(ctx, pool, "ops@acme.test", "acme-prod", "admin"))
	if g.Role != "admin" || g.Previous != "viewer" {
		t.Fatalf("regrant %+v", g)
	}
	_, err = GrantRole(ctx, pool, "ops@acme.test", "beta-1", "admin")
	wantErr(t, err, CrossTenant, `user "ops@acme.test" belongs to another tenant than cluster "beta-1"`)
	_, err = GrantRole(ctx, pool, "ops@acme.test", "acme-prod", "owner")
	wantErr(t, err, Invalid, `invalid role "owner": use admin, producer, consumer or viewer`)
	_, err = GrantRole(ctx, pool, "who@acme.test", "acme-prod", "admin")
	wantErr(t, err, NotFound, `unknown user "who@acme.test"`)
	_, err = GrantRole(ctx, pool, "ops@acme.test", "nope", "admin")
	wantErr(t, err, NotFound, `unknown cluster "nope"`)

	us := must[[]User](t)(ListUsers(ctx, pool, "acme"))
	if len(us) != 1 || len(us[0].Roles) != 1 || us[0].Roles[0].Role != "admin" || us[0].Roles[0].ClusterSlug != "acme-prod" {
		t.Fatalf("acme users %+v", us)
	}
	if all := must[[]User](t)(ListUsers(ctx, pool, "")); len(all) != 2 || all[0].Email != "dev@beta.test" {
		t.Fatalf("all users %+v", all)
	}

	r := must[Grant](t)(RevokeRole(ctx, pool, "ops@acme.test", "acme-prod"))
	if r.Previous != "admin" || r.Role != "" {
		t.Fatalf("revoke %+v", r)
	}
	_, err = RevokeRole(ctx, pool, "ops@acme.test", "acme-prod")
	wantErr(t, err, NotFound, `user "ops@acme.test" has no role on cluster "acme-prod"`)
	_, err = RevokeRole(ctx, pool, "dev@beta.test", "acme-prod")
	wantErr(t, err, CrossTenant, `user "dev@beta.test" belongs to another tenant than cluster "acme-prod"`)

	op := must[User](t)(SetOperator(ctx, pool, "OPS@acme.test", true))
	if !op.IsOperator {
		t.Fatalf("operator bit not set: %+v", op)
	}
	op = must[User](t)(SetOperator(ctx, pool, "ops@acme.test", false))
	if op.IsOperator {
		t.Fatalf("operator bit still set: %+v", op)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action IN ('operator_granted', 'operator_revoked')`); n != 2 {
		t.Fatalf("%d operator audit rows, want 2 (through set_operator)", n)
	}
	_, err = SetOperator(ctx, pool, "who@acme.test", true)
	wantErr(t, err, NotFound, `unknown user "who@acme.test"`)
}

// TestFindUsersCreatedFromConsole lists the accounts a cluster admin made
// in the console that nobody signed in to: the ones an operator reviews.
func TestFindUsersCreatedFromConsole(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	provision(t, pool)
	admin := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "admin@acme.test"}))
	squat := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "ceo@other.test"}))
	claimed := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "dev@acme.test"}))
	must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "cli@acme.test"}))
	for _, id := range []string{squat.ID, claimed.ID} {
		if _, err := pool.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'console', $2::uuid)`, id, admin.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.record_user_login($1::uuid)`, claimed.ID); err != nil {
		t.Fatal(err)
	}

	emails := func(us []User) string {
		var out []string
		for _, u := range us {
			out = append(out, u.Email+"="+u.CreatedFrom)
		}
		return strings.Join(out, ",")
	}
	got := must[[]User](t)(FindUsers(ctx, pool, UserFilter{CreatedFrom: "Console", NeverSignedIn: true}))
	if emails(got) != "ceo@other.test=console" || got[0].CreatedBy == nil || *got[0].CreatedBy != "admin@acme.test" {
		t.Fatalf("console accounts never signed in to: %q %+v", emails(got), got)
	}
	if got := emails(must[[]User](t)(FindUsers(ctx, pool, UserFilter{CreatedFrom: "console"}))); got != "ceo@other.test=console,dev@acme.test=console" {
		t.Fatalf("console accounts: %q", got)
	}
	if got := emails(must[[]User](t)(FindUsers(ctx, pool, UserFilter{Tenant: "acme", NeverSignedIn: true}))); got != "admin@acme.test=control_plane,ceo@other.test=console,cli@acme.test=control_plane" {
		t.Fatalf("never signed in: %q", got)
	}
	_, err := FindUsers(ctx, pool, UserFilter{CreatedFrom: "invite"})
	wantErr(t, err, Invalid, `invalid origin "invite": use control_plane, operator, console, signup`)
}

// An operator needs no customer's tenant: without one it lands in the
// platform tenant, holding the operator bit from its first transaction.
func TestCreateOperatorInThePlatformTenant(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	provision(t, pool)
	_, err := CreateUser(ctx, pool, NewUser{Email: "nobody@ops.test"})
	wantErr(t, err, Invalid, "a tenant is required for a user who is not an operator")
	op := must[User](t)(CreateUser(ctx, pool, NewUser{Email: "Root@Ops.Test", Operator: true, Password: "an operator's password"}))
	if op.TenantSlug != PlatformTenant || !op.IsOperator || op.CreatedFrom != "control_plane" || !op.HasPassword {
		t.Fatalf("created %+v, want an operator of the platform tenant", op)
	}
	if !scalar[bool](t, pool, `SELECT is_platform FROM queen_proxy.tenants WHERE id = $1::uuid`, op.TenantID) {
		t.Fatal("the operator's tenant is not the platform tenant")
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations
		WHERE action = 'operator_granted' AND actor = 'control_plane' AND actor_id = $1::uuid`, op.ID); n != 1 {
		t.Fatalf("%d operator_granted audit rows, want 1", n)
	}
	// The platform tenant is not deletable through the control plane either.
	_, err = BeginTenantDeletion(ctx, pool, PlatformTenant)
	wantErr(t, err, Invalid, "the platform tenant platform holds the operators; it cannot be deleted, renamed or unmarked")
	_, err = DeleteTenant(ctx, pool, PlatformTenant, true, nil)
	wantErr(t, err, Invalid, "the platform tenant platform holds the operators and cannot be deleted")
	// A customer's operator is still possible, in the customer's tenant.
	acme := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "lead@acme.test", Operator: true}))
	if acme.TenantSlug != "acme" || !acme.IsOperator {
		t.Fatalf("created %+v", acme)
	}
}
