package migrations

import (
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
)

// The operators' tenant exists after migrate, once however often the
// migration runs, and nothing removes it or turns it into something else.
func TestPlatformTenantIsKept(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	// Migrations run at every start; the file itself must be a no-op the
	// second time, not only skipped because it is recorded.
	sql, err := files.ReadFile("030_platform_tenant.sql")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, pool, string(sql))
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.tenants WHERE is_platform"); n != 1 {
		t.Fatalf("%d platform tenants, want 1", n)
	}
	id := scalar[string](t, pool, "SELECT id::text FROM queen_proxy.tenants WHERE slug = 'platform' AND is_platform AND status = 'active'")
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.clusters WHERE tenant_id = $1::uuid", id); n != 0 {
		t.Fatalf("the platform tenant holds %d clusters, want none", n)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_tenant_status($1::uuid, 'deleting')", id), "23514", "cannot be deleted")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.delete_tenant($1::uuid, true)", id), "23514", "cannot be deleted")
	wantPgErr(t, callErr(t, pool, "DELETE FROM queen_proxy.tenants WHERE id = $1::uuid", id), "23514", "cannot be deleted")
	wantPgErr(t, callErr(t, pool, "UPDATE queen_proxy.tenants SET slug = 'acme' WHERE id = $1::uuid", id), "23514", "renamed")
	wantPgErr(t, callErr(t, pool, "UPDATE queen_proxy.tenants SET is_platform = false WHERE id = $1::uuid", id), "23514", "unmarked")
	// A customer's tenant can neither take the slug nor the mark.
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_tenant('platform', 'Impostor')"), "23505")
	other, _ := newTenant(t, pool)
	wantPgErr(t, callErr(t, pool, "UPDATE queen_proxy.tenants SET is_platform = true WHERE id = $1::uuid", other), "23514", "customer")
	// Suspending it, like any tenant, is still the operator's call.
	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1::uuid, 'suspended')", id)
	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1::uuid, 'active')", id)
}
