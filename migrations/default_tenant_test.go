package migrations

import "testing"

// The broker's default tenant is where every request without a tenant
// header lands; no cluster may be given it, whether inserted by hand or
// changed afterwards.
func TestClusterCannotUseTheBrokersDefaultTenant(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tenant, _ := newTenant(t, pool)
	const def = "00000000-0000-0000-0000-000000000001"
	cluster := newCluster(t, pool, tenant, cell)
	wantPgErr(t, callErr(t, pool, "UPDATE queen_proxy.clusters SET broker_tenant_uuid = $1::uuid WHERE id = $2::uuid", def, cluster),
		"23514", "clusters_broker_tenant_not_default")
	wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.clusters (tenant_id, slug, plan_id, cell_id, broker_tenant_uuid)
		SELECT $1::uuid, $2, id, $3::uuid, $4::uuid FROM queen_proxy.plans WHERE code = 'free'`, tenant, uniq("c"), cell, def),
		"23514", "clusters_broker_tenant_not_default")
	// Any other id is still accepted, in upper case too.
	exec(t, pool, "UPDATE queen_proxy.clusters SET broker_tenant_uuid = $1::uuid WHERE id = $2::uuid", "00000000-0000-0000-0000-00000000000A", cluster)
}
