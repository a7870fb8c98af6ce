package migrations

import (
	"encoding/json"
	"testing"
)

func TestCreateCluster(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	tenant, _ := newTenant(t, pool)
	other, _ := newTenant(t, pool)
	l := listen(t, pool)
	slug := uniq("c")

	id := scalar[string](t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'pro', $3)::text", tenant, "  "+slug+"  ", cell)
	l.expect(t, id)

	var gotSlug, plan, status, broker, gotCell string
	err := pool.QueryRow(ctxT(t), `SELECT c.slug, p.code, c.status, c.broker_tenant_uuid::text, c.cell_id::text
		FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE c.id = $1`, id).
		Scan(&gotSlug, &plan, &status, &broker, &gotCell)
	if err != nil {
		t.Fatal(err)
	}
	if gotSlug != slug || plan != "pro" || status != "active" || gotCell != cell || broker == "" || broker == tenant || broker == id {
		t.Fatalf("cluster = %q %q %q %q %q", gotSlug, plan, status, broker, gotCell)
	}
	o := oneOp(t, pool, tenant, "cluster_created")
	if o.Actor != "control_plane" || str(o.ClusterID) != id || o.Meta["slug"] != slug || o.Meta["plan_code"] != "pro" || o.Meta["cell_id"] != cell {
		t.Fatalf("audit row = %+v", o)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster($1, ' ', 'free', $2)", tenant, cell), "22023", "create_cluster: slug")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster($1, 'a.b', 'free', $2)", tenant, cell), "22023", "create_cluster: slug")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster(gen_random_uuid(), $1, 'free', $2)", uniq("c"), cell), "P0002", "create_cluster: unknown tenant")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'gold', $3)", tenant, uniq("c"), cell), "P0002", "create_cluster: unknown plan")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'free', gen_random_uuid())", tenant, uniq("c")), "P0002", "create_cluster: unknown cell")
	// Cluster slugs are global.
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'free', $3)", other, slug, cell), "23505")
	l.expect(t)
}

func TestAssignPlan(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.assign_plan($1, 'dedicated-s')", cluster)
	l.expect(t, cluster)
	if p := scalar[string](t, pool, "SELECT p.code FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE c.id = $1", cluster); p != "dedicated-s" {
		t.Fatalf("plan = %q", p)
	}
	o := oneOp(t, pool, tenant, "plan_assigned")
	if str(o.ClusterID) != cluster || o.Meta["plan_code"] != "dedicated-s" || o.Actor != "control_plane" {
		t.Fatalf("audit row = %+v", o)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.assign_plan($1, 'gold')", cluster), "P0002", "assign_plan: unknown plan")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.assign_plan(gen_random_uuid(), 'free')"), "P0002", "assign_plan: unknown cluster")
	l.expect(t)
}

func TestSetClusterStatus(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.set_cluster_status($1, 'push_blocked')", cluster)
	l.expect(t, cluster)
	if s := scalar[string](t, pool, "SELECT status FROM queen_proxy.clusters WHERE id = $1", cluster); s != "push_blocked" {
		t.Fatalf("status = %q", s)
	}
	o := oneOp(t, pool, tenant, "cluster_status_changed")
	if str(o.ClusterID) != cluster || o.Meta["status"] != "push_blocked" {
		t.Fatalf("audit row = %+v", o)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_cluster_status($1, 'grace')", cluster), "22023", "set_cluster_status: status")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_cluster_status(gen_random_uuid(), 'active')"), "P0002", "set_cluster_status: unknown cluster")
	l.expect(t)
}

func TestSetLimitOverride(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)

	exec(t, pool, `SELECT queen_proxy.set_limit_override($1, '{"max_queues": 5, "req_burst": null}')`, cluster)
	l.expect(t, cluster)
	var got map[string]any
	raw := scalar[[]byte](t, pool, "SELECT limit_overrides FROM queen_proxy.clusters WHERE id = $1", cluster)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got["req_burst"]; len(got) != 2 || got["max_queues"] != float64(5) || !ok || v != nil {
		t.Fatalf("limit_overrides = %v", got)
	}
	o := oneOp(t, pool, tenant, "limit_override_set")
	if str(o.ClusterID) != cluster || o.Meta["max_queues"] != float64(5) || len(o.Meta) != 2 {
		t.Fatalf("audit row = %+v", o)
	}

	exec(t, pool, "SELECT queen_proxy.set_limit_override($1, NULL)", cluster)
	l.expect(t, cluster)
	if s := scalar[string](t, pool, "SELECT limit_overrides::text FROM queen_proxy.clusters WHERE id = $1", cluster); s != "{}" {
		t.Fatalf("limit_overrides after clearing = %s", s)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_limit_override($1, '[1]')", cluster), "22023", "set_limit_override: overrides")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_limit_override(gen_random_uuid(), '{}')"), "P0002", "set_limit_override: unknown cluster")
	l.expect(t)
}
