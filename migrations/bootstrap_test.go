package migrations

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/internal/pgtest"
)

var apiKeyFormat = regexp.MustCompile(`^qk_live_[A-Za-z0-9_-]{43}$`)

type bootstrapResult struct {
	TenantID    string  `json:"tenant_id"`
	ClusterID   string  `json:"cluster_id"`
	UserID      string  `json:"user_id"`
	APIKey      *string `json:"api_key"`
	PasswordSet bool    `json:"password_set"`
	CanLogin    bool    `json:"can_login"`
}

// bootstrap calls bootstrap_tenant on a dedicated connection and returns the
// result and the WARNING messages it raised.
func bootstrap(t *testing.T, args ...any) (bootstrapResult, []string) {
	t.Helper()
	ctx := ctxT(t)
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var warnings []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			warnings = append(warnings, n.Message+" / "+n.Hint)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var r bootstrapResult
	placeholders := make([]string, len(args))
	for i := range args {
		placeholders[i] = fmt.Sprintf("$%d", i+1)
	}
	sql := "SELECT queen_proxy.bootstrap_tenant(" + strings.Join(placeholders, ", ") + ")"
	if err := conn.QueryRow(ctx, sql, args...).Scan(&r); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return r, warnings
}

func TestBootstrapTenant(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tslug, cslug := uniq("boot"), uniq("bootc")
	email := randHex(4) + "@example.com"
	l := listen(t, pool)

	r, warnings := bootstrap(t, " "+strings.ToUpper(tslug), "Boot Co", cslug, "pro", cell, strings.ToUpper(email), "s3cret!", "deploy")
	if r.APIKey == nil || !apiKeyFormat.MatchString(*r.APIKey) {
		t.Fatalf("api_key = %v, want qk_live_ + 43 base64url characters", r.APIKey)
	}
	key := *r.APIKey
	if !r.PasswordSet || !r.CanLogin || len(warnings) != 0 {
		t.Fatalf("password_set=%v can_login=%v warnings=%v", r.PasswordSet, r.CanLogin, warnings)
	}
	// Every step notified the same cluster inside one transaction: one event.
	l.expect(t, r.ClusterID)

	if s := scalar[string](t, pool, "SELECT slug FROM queen_proxy.tenants WHERE id = $1", r.TenantID); s != tslug {
		t.Fatalf("tenant slug = %q", s)
	}
	if s := scalar[string](t, pool, "SELECT c.slug || '/' || p.code FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE c.id = $1 AND c.tenant_id = $2", r.ClusterID, r.TenantID); s != cslug+"/pro" {
		t.Fatalf("cluster = %q", s)
	}
	if r := role(t, pool, r.UserID, r.ClusterID); r != "admin" {
		t.Fatalf("admin role = %q", r)
	}
	// The password is stored as a bcrypt hash (cost 10) that verifies.
	hash := scalar[string](t, pool, "SELECT password_hash FROM queen_proxy.users WHERE id = $1 AND email = $2", r.UserID, email)
	if !strings.HasPrefix(hash, "$2a$10$") || !scalar[bool](t, pool, "SELECT public.crypt('s3cret!', $1) = $1", hash) {
		t.Fatalf("password hash %q does not verify", hash)
	}
	// Only the sha256 hex of the key is stored, under the given name, with all scopes.
	var name, keyHash string
	var scopes []string
	if err := pool.QueryRow(ctxT(t), "SELECT name, key_hash, scopes FROM queen_proxy.api_keys WHERE cluster_id = $1", r.ClusterID).
		Scan(&name, &keyHash, &scopes); err != nil {
		t.Fatal(err)
	}
	if name != "deploy" || keyHash != hashOf(key) || strings.Join(scopes, ",") != "produce,consume,admin,read" {
		t.Fatalf("key row = %q %q %v", name, keyHash, scopes)
	}
	leaked := scalar[int](t, pool, `SELECT
		(SELECT count(*) FROM queen_proxy.operations WHERE meta::text LIKE '%' || $1 || '%' OR target LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM queen_proxy.outbox WHERE payload::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM queen_proxy.api_keys WHERE key_hash = $1 OR name = $1)`, key[8:])
	if leaked != 0 {
		t.Fatalf("the plaintext key appears in %d rows", leaked)
	}
	o := oneOp(t, pool, r.TenantID, "tenant_bootstrapped")
	if str(o.ClusterID) != r.ClusterID || str(o.Target) != r.TenantID || o.Meta["tenant_slug"] != tslug || o.Meta["cluster_slug"] != cslug ||
		o.Meta["plan_code"] != "pro" || o.Meta["admin_email"] != email || o.Meta["key_issued"] != true ||
		o.Meta["password_set"] != true || o.Meta["can_login"] != true {
		t.Fatalf("audit row = %+v", o)
	}
	for _, action := range []string{"tenant_created", "cluster_created", "user_created", "cluster_role_granted", "api_key_issued"} {
		oneOp(t, pool, r.TenantID, action)
	}
	outbox := scalar[map[string]any](t, pool, "SELECT payload FROM queen_proxy.outbox WHERE kind = 'tenant_bootstrapped' AND payload->>'tenant_id' = $1", r.TenantID)
	if outbox["tenant_slug"] != tslug || outbox["cluster_id"] != r.ClusterID || outbox["cluster_slug"] != cslug ||
		outbox["plan_code"] != "pro" || outbox["admin_email"] != email {
		t.Fatalf("outbox payload = %v", outbox)
	}

	// A re-run is idempotent: same ids, no new key, no new outbox event.
	again, _ := bootstrap(t, tslug, "Other Name", cslug, "pro", cell, email, nil, "deploy")
	if again.APIKey != nil || again.TenantID != r.TenantID || again.ClusterID != r.ClusterID || again.UserID != r.UserID {
		t.Fatalf("re-run = %+v", again)
	}
	if !again.CanLogin || again.PasswordSet {
		t.Fatalf("re-run without password: can_login=%v password_set=%v", again.CanLogin, again.PasswordSet)
	}
	l.expect(t, r.ClusterID)
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.api_keys WHERE cluster_id = $1", r.ClusterID); n != 1 {
		t.Fatalf("%d keys after re-run, want 1", n)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.outbox WHERE kind = 'tenant_bootstrapped' AND payload->>'tenant_id' = $1", r.TenantID); n != 1 {
		t.Fatalf("%d tenant_bootstrapped events, want 1", n)
	}
	if rows := ops(t, pool, r.TenantID, "tenant_bootstrapped"); len(rows) != 2 || rows[1].Meta["key_issued"] != false {
		t.Fatalf("re-run audit rows = %+v", rows)
	}
	if n := scalar[string](t, pool, "SELECT name FROM queen_proxy.tenants WHERE id = $1", r.TenantID); n != "Boot Co" {
		t.Fatalf("re-run renamed the tenant to %q", n)
	}

	// Once the key is revoked, a re-run issues a new one.
	exec(t, pool, "SELECT queen_proxy.revoke_api_key(id) FROM queen_proxy.api_keys WHERE cluster_id = $1", r.ClusterID)
	third, _ := bootstrap(t, tslug, nil, cslug, "pro", cell, email, nil, "deploy")
	if third.APIKey == nil || *third.APIKey == key || !apiKeyFormat.MatchString(*third.APIKey) {
		t.Fatalf("after revocation api_key = %v", third.APIKey)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.api_keys WHERE key_hash = $1 AND revoked_at IS NULL", hashOf(*third.APIKey)); n != 1 {
		t.Fatal("the new key's hash is not stored")
	}
}

func TestBootstrapTenantWithoutPassword(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tslug := uniq("nopw")
	r, warnings := bootstrap(t, tslug, nil, uniq("nopwc"), "free", cell, randHex(4)+"@example.com")
	if r.APIKey == nil || !apiKeyFormat.MatchString(*r.APIKey) {
		t.Fatalf("api_key = %v", r.APIKey)
	}
	if r.PasswordSet || r.CanLogin {
		t.Fatalf("password_set=%v can_login=%v, want false, false", r.PasswordSet, r.CanLogin)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "bootstrap_tenant:") || !strings.Contains(warnings[0], "cannot log in") {
		t.Fatalf("warnings = %v", warnings)
	}
	if n := scalar[string](t, pool, "SELECT name FROM queen_proxy.tenants WHERE id = $1", r.TenantID); n != tslug {
		t.Fatalf("tenant name = %q, want the slug", n)
	}
	if k := scalar[string](t, pool, "SELECT name FROM queen_proxy.api_keys WHERE cluster_id = $1", r.ClusterID); k != "default" {
		t.Fatalf("key name = %q, want default", k)
	}
	// A linked identity is enough to log in.
	exec(t, pool, "INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email, verified) SELECT id, 'google', $2, email, true FROM queen_proxy.users WHERE id = $1", r.UserID, randHex(6))
	again, warnings := bootstrap(t, tslug, nil, scalar[string](t, pool, "SELECT slug FROM queen_proxy.clusters WHERE id = $1", r.ClusterID),
		"free", cell, scalar[string](t, pool, "SELECT email FROM queen_proxy.users WHERE id = $1", r.UserID))
	if !again.CanLogin || len(warnings) != 0 {
		t.Fatalf("with an identity: can_login=%v warnings=%v", again.CanLogin, warnings)
	}
}

func TestBootstrapTenantErrors(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	owner, _ := newTenant(t, pool)
	takenCluster := scalar[string](t, pool, "SELECT slug FROM queen_proxy.clusters WHERE id = $1", newCluster(t, pool, owner, cell))
	_, takenEmail := newUser(t, pool, owner)
	l := listen(t, pool)
	call := "SELECT queen_proxy.bootstrap_tenant($1, 'n', $2, 'free', $3, $4, NULL, $5)"
	mail := randHex(4) + "@example.com"

	wantPgErr(t, callErr(t, pool, call, " ", uniq("c"), cell, mail, "k"), "22023", "bootstrap_tenant: tenant slug")
	wantPgErr(t, callErr(t, pool, call, uniq("t"), "", cell, mail, "k"), "22023", "bootstrap_tenant: cluster slug")
	wantPgErr(t, callErr(t, pool, call, uniq("t"), uniq("c"), cell, "nobody", "k"), "22023", "bootstrap_tenant: admin email")
	wantPgErr(t, callErr(t, pool, call, uniq("t"), uniq("c"), nil, mail, "k"), "22023", "bootstrap_tenant: cell")
	wantPgErr(t, callErr(t, pool, call, uniq("t"), uniq("c"), cell, mail, " "), "22023", "bootstrap_tenant: key name")
	wantPgErr(t, callErr(t, pool, call, uniq("t"), uniq("c"), "00000000-0000-0000-0000-000000000000", mail, "k"), "P0002", "create_cluster: unknown cell")

	newSlug := uniq("t")
	wantPgErr(t, callErr(t, pool, call, newSlug, takenCluster, cell, mail, "k"), "23505", "bootstrap_tenant: cluster slug", "another tenant")
	wantPgErr(t, callErr(t, pool, call, newSlug, uniq("c"), cell, takenEmail, "k"), "23505", "bootstrap_tenant: user", "another tenant")
	// A failed bootstrap leaves nothing behind.
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.tenants WHERE slug = $1", newSlug); n != 0 {
		t.Fatal("a failed bootstrap created its tenant")
	}
	l.expect(t)
}
