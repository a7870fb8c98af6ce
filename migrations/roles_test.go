package migrations

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// role returns user's role on cluster, "" for none.
func role(t *testing.T, pool *pgxpool.Pool, user, cluster string) string {
	t.Helper()
	var r string
	err := pool.QueryRow(ctxT(t), "SELECT coalesce((SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1 AND cluster_id = $2), '')", user, cluster).Scan(&r)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGrantClusterRole(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, cell)
	user, email := newUser(t, pool, tenant)
	other, _ := newTenant(t, pool)
	stranger, strangerEmail := newUser(t, pool, other)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'viewer')", cluster, "  "+strings.ToUpper(email)+" ")
	l.expect(t, cluster)
	if r := role(t, pool, user, cluster); r != "viewer" {
		t.Fatalf("role = %q", r)
	}
	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'admin')", cluster, email) // upsert
	l.expect(t, cluster)
	if r := role(t, pool, user, cluster); r != "admin" {
		t.Fatalf("role after re-grant = %q", r)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.cluster_roles WHERE cluster_id = $1", cluster); n != 1 {
		t.Fatalf("%d role rows, want 1", n)
	}
	rows := ops(t, pool, tenant, "cluster_role_granted")
	if len(rows) != 2 || str(rows[0].ActorID) != user || str(rows[0].ClusterID) != cluster ||
		rows[0].Meta["email"] != email || rows[0].Meta["role"] != "viewer" || rows[1].Meta["role"] != "admin" {
		t.Fatalf("audit rows = %+v", rows)
	}

	// The security invariant: never across tenants.
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'viewer')", cluster, strangerEmail), "42501", "grant_cluster_role:", "another tenant")
	if r := role(t, pool, stranger, cluster); r != "" {
		t.Fatalf("cross-tenant grant stored role %q", r)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'owner')", cluster, email), "22023", "grant_cluster_role: role")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.grant_cluster_role($1, 'no-at-sign', 'viewer')", cluster), "22023", "grant_cluster_role: email")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.grant_cluster_role(gen_random_uuid(), $1, 'viewer')", email), "P0002", "grant_cluster_role: unknown cluster")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.grant_cluster_role($1, 'ghost@example.com', 'viewer')", cluster), "P0002", "grant_cluster_role: unknown user")
	l.expect(t)
}

func TestRevokeClusterRole(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	user, email := newUser(t, pool, tenant)
	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'producer')", cluster, email)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.revoke_cluster_role($1, $2)", cluster, strings.ToUpper(email))
	l.expect(t, cluster)
	if r := role(t, pool, user, cluster); r != "" {
		t.Fatalf("role still %q", r)
	}
	o := oneOp(t, pool, tenant, "cluster_role_revoked")
	if str(o.ClusterID) != cluster || str(o.ActorID) != user || o.Meta["email"] != email || o.Meta["role"] != "producer" {
		t.Fatalf("audit row = %+v", o)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_cluster_role($1, $2)", cluster, email), "P0002", "revoke_cluster_role:", "no role")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_cluster_role($1, 'x')", cluster), "22023", "revoke_cluster_role: email")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_cluster_role(gen_random_uuid(), $1)", email), "P0002", "revoke_cluster_role: unknown cluster")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_cluster_role($1, 'ghost@example.com')", cluster), "P0002", "revoke_cluster_role: unknown user")
	l.expect(t)
}
