package migrations

import (
	"strings"
	"testing"
	"time"
)

func TestCreateTenant(t *testing.T) {
	pool := db(t)
	l := listen(t, pool)
	slug := uniq("acme")
	id := scalar[string](t, pool, "SELECT queen_proxy.create_tenant($1, $2)::text", "  "+strings.ToUpper(slug)+" ", "  Acme Inc ")
	l.expect(t) // no cluster: nothing to invalidate

	var gotSlug, name, status string
	if err := pool.QueryRow(ctxT(t), "SELECT slug, name, status FROM queen_proxy.tenants WHERE id = $1", id).Scan(&gotSlug, &name, &status); err != nil {
		t.Fatal(err)
	}
	if gotSlug != slug || name != "Acme Inc" || status != "active" {
		t.Fatalf("tenant = %q %q %q", gotSlug, name, status)
	}
	o := oneOp(t, pool, id, "tenant_created")
	if o.Actor != "control_plane" || o.ClusterID != nil || o.Meta["slug"] != slug || o.Meta["name"] != "Acme Inc" {
		t.Fatalf("audit row = %+v", o)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant('  ', 'x')"), "22023", "create_tenant: slug")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant(NULL, 'x')"), "22023", "create_tenant: slug")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant($1, ' ')", uniq("n")), "22023", "create_tenant: name")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant('bad_slug', 'x')"), "22023", "create_tenant: slug", "DNS label")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant($1, 'x')", slug), "23505")
	l.expect(t)
}

func TestCreateUser(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	other, _ := newTenant(t, pool)
	l := listen(t, pool)
	email := randHex(4) + "@Example.COM"
	id := scalar[string](t, pool, "SELECT queen_proxy.create_user($1, $2, 'hash', 'github')::text", tenant, "  "+email+" ")
	l.expect(t)

	var gotEmail, hash, gotTenant string
	if err := pool.QueryRow(ctxT(t), "SELECT email, password_hash, tenant_id::text FROM queen_proxy.users WHERE id = $1", id).
		Scan(&gotEmail, &hash, &gotTenant); err != nil {
		t.Fatal(err)
	}
	if gotEmail != strings.ToLower(email) || hash != "hash" || gotTenant != tenant {
		t.Fatalf("user = %q %q %q", gotEmail, hash, gotTenant)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.identities WHERE user_id = $1", id); n != 0 {
		t.Fatalf("create_user wrote %d identities", n)
	}
	o := oneOp(t, pool, tenant, "user_created")
	if o.Actor != "control_plane" || str(o.ActorID) != id || o.ClusterID != nil ||
		o.Meta["email"] != strings.ToLower(email) || o.Meta["provider"] != "github" {
		t.Fatalf("audit row = %+v", o)
	}
	// A NULL password hash is allowed (OAuth-only users).
	newUser(t, pool, tenant)

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_user($1, 'nobody', NULL, 'local')", tenant), "22023", "create_user: email")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_user($1, 'a@b.c', NULL, 'gitlab')", tenant), "22023", "create_user: provider")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_user(gen_random_uuid(), 'a@b.c', NULL, 'local')"), "P0002", "create_user: unknown tenant")
	// E-mail is unique across tenants.
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_user($1, $2, NULL, 'local')", other, strings.ToUpper(email)), "23505")
	l.expect(t)
}

func TestSetTenantStatus(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tenant, _ := newTenant(t, pool)
	c1 := newCluster(t, pool, tenant, cell)
	c2 := newCluster(t, pool, tenant, cell)
	other, _ := newTenant(t, pool)
	newCluster(t, pool, other, cell)
	lonely, _ := newTenant(t, pool)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1, 'grace')", tenant)
	l.expect(t, c1, c2) // once per cluster of the tenant, none for others
	if s := scalar[string](t, pool, "SELECT status FROM queen_proxy.tenants WHERE id = $1", tenant); s != "grace" {
		t.Fatalf("status = %q", s)
	}
	o := oneOp(t, pool, tenant, "tenant_status_changed")
	if o.Actor != "control_plane" || o.ClusterID != nil || o.Meta["status"] != "grace" {
		t.Fatalf("audit row = %+v", o)
	}

	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1, 'suspended')", lonely)
	l.expect(t)

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_tenant_status($1, 'push_blocked')", tenant), "22023", "set_tenant_status: status")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_tenant_status($1, NULL)", tenant), "22023", "set_tenant_status: status")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_tenant_status(gen_random_uuid(), 'active')"), "P0002", "set_tenant_status: unknown tenant")
	l.expect(t)
}

func TestSetUserName(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, _ := newUser(t, pool, tenant)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.set_user_name($1, '  Ada Lovelace ')", user)
	exec(t, pool, "SELECT queen_proxy.set_user_name($1, $2)", user, strings.Repeat("é", 160))
	l.expect(t)
	if n := scalar[string](t, pool, "SELECT name FROM queen_proxy.users WHERE id = $1", user); n != strings.Repeat("é", 160) {
		t.Fatalf("name = %q", n)
	}
	rows := ops(t, pool, tenant, "user_name_changed")
	if len(rows) != 2 {
		t.Fatalf("%d audit rows, want 2", len(rows))
	}
	if rows[0].Meta["old_name"] != nil || rows[0].Meta["name"] != "Ada Lovelace" || str(rows[0].ActorID) != user ||
		rows[1].Meta["old_name"] != "Ada Lovelace" || rows[0].ClusterID != nil {
		t.Fatalf("audit rows = %+v", rows)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_name($1, '   ')", user), "22023", "set_user_name: name")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_name($1, NULL)", user), "22023", "set_user_name: name")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_name($1, $2)", user, strings.Repeat("x", 161)), "22023", "set_user_name: name")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_name(gen_random_uuid(), 'x')"), "P0002", "set_user_name: unknown user")
}

func TestRecordUserLogin(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, _ := newUser(t, pool, tenant)
	l := listen(t, pool)

	at := scalar[time.Time](t, pool, "SELECT queen_proxy.record_user_login($1)", user)
	l.expect(t)
	if time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Fatalf("login stamp %v is not now", at)
	}
	if stored := scalar[time.Time](t, pool, "SELECT last_login_at FROM queen_proxy.users WHERE id = $1", user); !stored.Equal(at) {
		t.Fatalf("last_login_at = %v, returned %v", stored, at)
	}
	o := oneOp(t, pool, tenant, "login")
	if o.Actor != "user" || str(o.ActorID) != user || str(o.Target) != user || o.ClusterID != nil {
		t.Fatalf("audit row = %+v", o)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.record_user_login(gen_random_uuid())"), "P0002", "record_user_login: unknown user")
}

func TestSetOperator(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, email := newUser(t, pool, tenant)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", "  "+strings.ToUpper(email)+" ")
	if !scalar[bool](t, pool, "SELECT is_operator FROM queen_proxy.users WHERE id = $1", user) {
		t.Fatal("is_operator not set")
	}
	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", email) // unchanged, still audited
	exec(t, pool, "SELECT queen_proxy.set_operator($1, false)", email)
	// Each change of the bit tells every gateway to drop what it caches
	// about users (the unchanged call changes nothing to drop).
	l.expect(t, nilUUID, nilUUID)
	if scalar[bool](t, pool, "SELECT is_operator FROM queen_proxy.users WHERE id = $1", user) {
		t.Fatal("is_operator not cleared")
	}
	granted := ops(t, pool, tenant, "operator_granted")
	revoked := ops(t, pool, tenant, "operator_revoked")
	if len(granted) != 2 || len(revoked) != 1 {
		t.Fatalf("%d grants, %d revokes audited; want 2, 1", len(granted), len(revoked))
	}
	if str(granted[0].Target) != email || granted[0].Meta["is_operator"] != true || granted[0].Meta["was"] != false ||
		granted[1].Meta["was"] != true || revoked[0].Meta["is_operator"] != false || revoked[0].Meta["was"] != true ||
		granted[0].ClusterID != nil || granted[0].Actor != "control_plane" {
		t.Fatalf("audit rows = %+v %+v", granted, revoked)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_operator($1, NULL)", email), "22023", "set_operator: enabled")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_operator('nobody@example.com', true)"), "P0002", "set_operator: unknown user")
}
