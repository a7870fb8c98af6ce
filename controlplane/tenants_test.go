package controlplane

import (
	"testing"
)

func TestCreateAndListTenants(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	acme := must[Tenant](t)(CreateTenant(ctx, pool, " Acme ", "  Acme Inc "))
	if acme.Slug != "acme" || acme.Name != "Acme Inc" || acme.Status != TenantActive || acme.ID == "" {
		t.Fatalf("created %+v", acme)
	}
	bare := must[Tenant](t)(CreateTenant(ctx, pool, "beta", ""))
	if bare.Name != "beta" {
		t.Fatalf("name defaults to %q, want the slug", bare.Name)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action = 'tenant_created'`); n != 2 {
		t.Fatalf("%d tenant_created audit rows, want 2 (through create_tenant)", n)
	}

	_, err := CreateTenant(ctx, pool, "acme", "Other")
	wantErr(t, err, Taken, `tenant slug "acme" is already taken`)
	_, err = CreateTenant(ctx, pool, "Acme_Corp", "")
	wantErr(t, err, Invalid, `invalid tenant slug "Acme_Corp": use 1 to 63 characters from a-z, 0-9 and inner hyphens`)
	_, err = CreateTenant(ctx, pool, "-acme", "")
	wantErr(t, err, Invalid, `invalid tenant slug "-acme": use 1 to 63 characters from a-z, 0-9 and inner hyphens`)
	_, err = CreateTenant(ctx, pool, "", "")
	wantErr(t, err, Invalid, "tenant slug is required")

	provisionCluster(t, pool, "acme", "acme-prod")
	ts := must[[]Tenant](t)(ListTenants(ctx, pool))
	if len(ts) != 3 || ts[0].Slug != "acme" || ts[1].Slug != "beta" || ts[2].Slug != PlatformTenant || ts[0].Clusters != 1 || ts[1].Clusters != 0 {
		t.Fatalf("listed %+v", ts)
	}
}

// provisionCluster adds a cell (once) and a pro cluster for tenant.
func provisionCluster(t *testing.T, db DB, tenant, slug string) Cluster {
	t.Helper()
	ctx := ctxT(t)
	if scalar[int](t, db, `SELECT count(*)::int FROM queen_proxy.cells`) == 0 {
		must[Cell](t)(AddCell(ctx, db, NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://127.0.0.1:6632", Class: "shared"}))
	}
	return must[Cluster](t)(CreateCluster(ctx, db, NewCluster{Tenant: tenant, Slug: slug, Plan: "pro"}))
}

func TestTenantStatus(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	l := listen(t, url)

	got := must[Tenant](t)(SetTenantStatus(ctx, pool, "acme", TenantSuspended, false))
	if got.Status != TenantSuspended {
		t.Fatalf("status %q", got.Status)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("suspending announced %q, want the cluster %s", p, w.cluster.ID)
	}
	got = must[Tenant](t)(SetTenantStatus(ctx, pool, w.tenant.ID, TenantGrace, false))
	if got.Status != TenantGrace {
		t.Fatalf("status %q", got.Status)
	}
	got = must[Tenant](t)(SetTenantStatus(ctx, pool, "ACME", TenantActive, false))
	if got.Status != TenantActive {
		t.Fatalf("status %q", got.Status)
	}

	_, err := SetTenantStatus(ctx, pool, "nope", TenantSuspended, false)
	wantErr(t, err, NotFound, `unknown tenant "nope"`)
	_, err = SetTenantStatus(ctx, pool, "acme", TenantDeleting, false)
	wantErr(t, err, Invalid, `invalid tenant status "deleting": use active, grace or suspended`)

	must[DeletionPlan](t)(BeginTenantDeletion(ctx, pool, "acme"))
	_, err = SetTenantStatus(ctx, pool, "acme", TenantActive, false)
	wantErr(t, err, WrongState, `tenant "acme" is being deleted (status deleting); finish the deletion, or force the change if no cluster has been purged yet`)
	if got := must[Tenant](t)(SetTenantStatus(ctx, pool, "acme", TenantActive, true)); got.Status != TenantActive {
		t.Fatalf("forced resume left status %q", got.Status)
	}
}

func TestTenantDeletionInThreeSteps(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[IssuedKey](t)(CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: "ci", Scopes: []string{"produce"}}))
	must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "ops@acme.test"}))

	// Step 3 before step 1 is refused and changes nothing.
	_, err := DeleteTenant(ctx, pool, "acme", false, nil)
	wantErr(t, err, WrongState, `tenant "acme" is active, not deleting: stop its traffic and purge its clusters first`)

	l := listen(t, url)
	plan := must[DeletionPlan](t)(BeginTenantDeletion(ctx, pool, "acme"))
	if plan.AlreadyDeleting || plan.Tenant.Status != TenantDeleting || len(plan.Purge) != 1 {
		t.Fatalf("plan %+v", plan)
	}
	p := plan.Purge[0]
	if p.ClusterSlug != "acme-prod" || p.BrokerTenantUUID != w.cluster.BrokerTenantUUID || p.CellSlug != "eu1-a" ||
		p.CellURL != "http://127.0.0.1:6632" {
		t.Fatalf("purge target %+v", p)
	}
	if p.PurgeSQL() != "SELECT queen.delete_tenant_data_v1('"+w.cluster.BrokerTenantUUID+"');" {
		t.Fatalf("purge SQL %q", p.PurgeSQL())
	}
	if got := l.next(); got != w.cluster.ID {
		t.Fatalf("step 1 announced %q, want the cluster", got)
	}
	again := must[DeletionPlan](t)(BeginTenantDeletion(ctx, pool, "acme"))
	if !again.AlreadyDeleting || len(again.Purge) != 1 {
		t.Fatalf("repeated step 1: %+v", again)
	}

	d := must[Deletion](t)(DeleteTenant(ctx, pool, "acme", false, nil))
	if !d.Deleted || !d.Existed || d.TenantSlug != "acme" || d.StatusWas != TenantDeleting || d.Forced ||
		len(d.Clusters) != 1 || d.Clusters[0].BrokerTenantUUID != w.cluster.BrokerTenantUUID ||
		d.Counts["users"] != 1 || d.Counts["api_keys"] != 1 || d.Counts["api_keys_revoked"] != 1 {
		t.Fatalf("deletion %+v", d)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.tenants WHERE NOT is_platform`); n != 0 {
		t.Fatalf("%d tenants left", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.outbox WHERE kind = 'tenant_deleted'`); n != 1 {
		t.Fatalf("%d tenant_deleted events", n)
	}
	_, err = DeleteTenant(ctx, pool, "acme", false, nil)
	wantErr(t, err, NotFound, `unknown tenant "acme"`)
}

func TestTenantDeletionForced(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	provision(t, pool)
	d := must[Deletion](t)(DeleteTenant(ctx, pool, "acme", true, nil))
	if !d.Deleted || !d.Forced || d.StatusWas != TenantActive || len(d.Clusters) != 1 {
		t.Fatalf("forced deletion %+v", d)
	}
	_, err := BeginTenantDeletion(ctx, pool, "acme")
	wantErr(t, err, NotFound, `unknown tenant "acme"`)
}
