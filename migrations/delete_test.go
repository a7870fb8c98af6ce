package migrations

import (
	"sort"
	"testing"
)

type deleteResult struct {
	Deleted    bool             `json:"deleted"`
	Existed    bool             `json:"existed"`
	TenantID   string           `json:"tenant_id"`
	TenantSlug string           `json:"tenant_slug"`
	StatusWas  string           `json:"status_was"`
	Forced     bool             `json:"forced"`
	Clusters   []map[string]any `json:"clusters"`
	Counts     map[string]int   `json:"counts"`
}

func TestDeleteTenantThreeSteps(t *testing.T) {
	pool := db(t)
	cell := newCell(t, pool)
	// Another tenant stays on the cell: on a cell not known to scope the
	// keeper could not leave it (tenancy_test.go holds that guard).
	exec(t, pool, "UPDATE queen_proxy.cells SET tenancy_stated = 'scoped' WHERE id = $1", cell)
	email := randHex(4) + "@example.com"
	r, _ := bootstrap(t, uniq("del"), "Doomed", "zz-"+uniq("del"), "free", cell, email, "pw")
	tenant := r.TenantID
	second := scalar[string](t, pool, "SELECT queen_proxy.create_cluster($1, $2, 'dev', $3)::text", tenant, "aa-"+uniq("del"), cell)
	_, viewerEmail := newUser(t, pool, tenant)
	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'viewer')", second, viewerEmail)
	exec(t, pool, "SELECT queen_proxy.issue_api_key($1, 'k2', $2, '{read}')", second, hashOf(randHex(8)))
	revokedKey := scalar[string](t, pool, "SELECT queen_proxy.issue_api_key($1, 'k3', $2, '{read}')::text", second, hashOf(randHex(8)))
	exec(t, pool, "SELECT queen_proxy.revoke_api_key($1)", revokedKey)
	exec(t, pool, "INSERT INTO queen_proxy.queues (cluster_id, name, partitions_count) VALUES ($1, 'q1', 2), ($1, 'q2', 1), ($2, 'q1', 0)", r.ClusterID, second)
	exec(t, pool, "INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs) VALUES ($1, date_trunc('minute', now()), 'push', 3)", second)
	exec(t, pool, "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs) VALUES ($1, current_date - 1, 'push', 3)", second)
	jti := randHex(8)
	exec(t, pool, "SELECT queen_proxy.revoke_session($1, now() + interval '1 hour', 'user', $2)", jti, r.UserID)
	exec(t, pool, `SELECT queen_proxy.emit_outbox('note', jsonb_build_object('cluster_id', $1::text, 'admin_email', 'x@y.z'))`, second)
	// Another tenant's events keep their e-mail.
	otherR, _ := bootstrap(t, uniq("keep"), nil, uniq("keepc"), "free", cell, randHex(4)+"@example.com")
	// An audit row from elsewhere that points at one of the clusters survives, detached.
	foreign := scalar[string](t, pool, "SELECT queen_proxy.record_operation($1, $2, 'system', NULL, 'cross_ref', NULL, NULL)::text", otherR.TenantID, second)
	l := listen(t, pool)
	l.take(t)

	// Step 0: refused while the tenant is live.
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.delete_tenant($1)", tenant), "55000", "delete_tenant:", "set_tenant_status", "deleting")
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.tenants WHERE id = $1", tenant); n != 1 {
		t.Fatal("refused delete removed the tenant")
	}
	l.expect(t)

	// Step 1: stop traffic.
	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1, 'deleting')", tenant)
	l.expect(t, r.ClusterID, second)
	// Step 2 happens on the broker. Step 3:
	var res deleteResult
	if err := pool.QueryRow(ctxT(t), "SELECT queen_proxy.delete_tenant($1)", tenant).Scan(&res); err != nil {
		t.Fatal(err)
	}
	l.expect(t, r.ClusterID, second)

	if !res.Deleted || !res.Existed || res.TenantID != tenant || res.StatusWas != "deleting" || res.Forced || len(res.Clusters) != 2 {
		t.Fatalf("result = %+v", res)
	}
	// Clusters come ordered by slug, with what the broker purge needs.
	if res.Clusters[0]["cluster_id"] != second || res.Clusters[1]["cluster_id"] != r.ClusterID ||
		res.Clusters[0]["cell_id"] != cell || res.Clusters[0]["broker_tenant_uuid"] == nil || res.Clusters[0]["slug"] == nil {
		t.Fatalf("clusters = %v", res.Clusters)
	}
	wantCounts := map[string]int{
		"clusters": 2, "users": 2, "cluster_roles": 2, "queues": 3, "api_keys": 3, "api_keys_revoked": 2,
		"outbox_redacted": 2, // tenant_bootstrapped and the note
	}
	for k, v := range wantCounts {
		if res.Counts[k] != v {
			t.Errorf("counts[%s] = %d, want %d (all: %v)", k, res.Counts[k], v, res.Counts)
		}
	}
	if res.Counts["operations"] < 10 {
		t.Errorf("counts[operations] = %d, want every audit row of the tenant", res.Counts["operations"])
	}

	// Everything the tenant owned is gone.
	for _, q := range []string{
		"SELECT count(*) FROM queen_proxy.tenants WHERE id = $1",
		"SELECT count(*) FROM queen_proxy.users WHERE tenant_id = $1",
		"SELECT count(*) FROM queen_proxy.clusters WHERE tenant_id = $1",
		"SELECT count(*) FROM queen_proxy.operations WHERE tenant_id = $1",
	} {
		if n := scalar[int](t, pool, q, tenant); n != 0 {
			t.Errorf("%s: %d rows left", q, n)
		}
	}
	for _, table := range []string{"api_keys", "cluster_roles", "queues", "usage_minutes", "usage_days"} {
		if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy."+table+" WHERE cluster_id = ANY ($1::uuid[])", []string{r.ClusterID, second}); n != 0 {
			t.Errorf("%s: %d rows left", table, n)
		}
	}
	// The deny-list, the cell and other tenants are untouched.
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.revoked_tokens WHERE jti = $1", jti); n != 1 {
		t.Error("delete_tenant touched revoked_tokens")
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.cells WHERE id = $1", cell); n != 1 {
		t.Error("delete_tenant removed the cell")
	}
	if c := scalar[*string](t, pool, "SELECT cluster_id::text FROM queen_proxy.operations WHERE id = $1", foreign); c != nil {
		t.Errorf("foreign audit row still points at deleted cluster %s", *c)
	}
	if e := scalar[string](t, pool, "SELECT payload->>'admin_email' FROM queen_proxy.outbox WHERE kind = 'tenant_bootstrapped' AND payload->>'tenant_id' = $1", otherR.TenantID); e == "" {
		t.Error("another tenant's outbox event was redacted")
	}
	// The tenant's earlier events stay, without the e-mail.
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.outbox
		WHERE (payload->>'tenant_id' = $1 OR payload->>'cluster_id' = $2) AND kind <> 'tenant_deleted'
		  AND kind NOT IN ('api_key_issued', 'api_key_revoked', 'cluster_status_changed', 'tenant_status_changed')`, tenant, second); n != 2 {
		t.Errorf("%d earlier outbox events kept, want 2", n)
	}
	// Deleting revokes the two live keys first, which is recorded like
	// any other revocation (032): with k3's earlier one, three.
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.outbox
		WHERE kind = 'api_key_revoked' AND payload->>'tenant_id' = $1`, tenant); n != 3 {
		t.Errorf("%d api_key_revoked events for the deleted tenant's keys, want 3", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.outbox
		WHERE (payload->>'tenant_id' = $1 OR payload->>'cluster_id' = $2) AND jsonb_exists(payload, 'admin_email')`, tenant, second); n != 0 {
		t.Errorf("%d outbox events still carry admin_email", n)
	}
	// The tenant_deleted event is the one trace left.
	ev := scalar[map[string]any](t, pool, "SELECT payload FROM queen_proxy.outbox WHERE kind = 'tenant_deleted' AND payload->>'tenant_id' = $1", tenant)
	counts, _ := ev["counts"].(map[string]any)
	clusters, _ := ev["clusters"].([]any)
	if ev["tenant_slug"] != res.TenantSlug || ev["status_was"] != "deleting" || ev["forced"] != false || ev["at"] == nil ||
		len(clusters) != 2 || counts["api_keys_revoked"] != float64(2) || counts["clusters"] != float64(2) {
		t.Fatalf("tenant_deleted payload = %v", ev)
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 6 {
		t.Errorf("tenant_deleted counts keys = %v", keys)
	}

	// Deleting again: the tenant no longer exists, which is not an error.
	var gone deleteResult
	if err := pool.QueryRow(ctxT(t), "SELECT queen_proxy.delete_tenant($1)", tenant).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if gone.Deleted || gone.Existed || gone.TenantID != tenant {
		t.Fatalf("second delete = %+v", gone)
	}
	l.expect(t)
}

func TestDeleteTenantForced(t *testing.T) {
	pool := db(t)
	tenant, slug := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)
	var res deleteResult
	if err := pool.QueryRow(ctxT(t), "SELECT queen_proxy.delete_tenant($1, p_force => true)", tenant).Scan(&res); err != nil {
		t.Fatal(err)
	}
	l.expect(t, cluster)
	if !res.Deleted || !res.Forced || res.StatusWas != "active" || res.TenantSlug != slug || len(res.Clusters) != 1 {
		t.Fatalf("result = %+v", res)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.tenants WHERE id = $1", tenant); n != 0 {
		t.Fatal("forced delete kept the tenant")
	}
}

func TestDeleteTenantUnknown(t *testing.T) {
	pool := db(t)
	l := listen(t, pool)
	id := "6b1d8a3e-0000-4000-8000-000000000001"
	res := scalar[map[string]any](t, pool, "SELECT queen_proxy.delete_tenant($1)", id)
	if len(res) != 3 || res["deleted"] != false || res["existed"] != false || res["tenant_id"] != id {
		t.Fatalf("result = %v", res)
	}
	l.expect(t)
}

func TestDeleteTenantWithoutClusters(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	exec(t, pool, "SELECT queen_proxy.set_tenant_status($1, 'deleting')", tenant)
	var res deleteResult
	if err := pool.QueryRow(ctxT(t), "SELECT queen_proxy.delete_tenant($1)", tenant).Scan(&res); err != nil {
		t.Fatal(err)
	}
	if !res.Deleted || res.Clusters == nil || len(res.Clusters) != 0 || res.Counts["clusters"] != 0 || res.Counts["operations"] != 2 {
		t.Fatalf("result = %+v", res)
	}
}
