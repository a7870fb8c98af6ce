package controlplane

import (
	"errors"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
)

// TestGrantsAtPlacement: on a tenancy cell with grants api, CreateCluster
// issues the plan's grants and DeleteCluster withdraws them; a cell with
// grants api that cannot be reached leaves the cluster unplaced; a cell
// with grants verify whose broker does not grant refuses with the SQL and
// the id, and takes the cluster under that id once it is granted; a cell
// only serving its keeper is not asked.
func TestGrantsAtPlacement(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	b := fakebroker.New(fakebroker.Options{Tenancy: fakebroker.TenancyRust})
	u, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "api", Region: "eu1", BaseURL: u, Class: "shared", Tenancy: "scoped", Grants: "api"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "onex", Region: "eu1", BaseURL: u, Class: "shared", Tenancy: "scoped"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "gone", Region: "eu1", BaseURL: "http://127.0.0.1:1", Class: "shared", Tenancy: "scoped", Grants: "api"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "lone", Region: "eu1", BaseURL: "http://127.0.0.1:1", Class: "shared"}))

	c := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "a1", Plan: "pro", Cell: "api"}))
	for _, k := range []string{fakebroker.GrantKV, fakebroker.GrantEphemeral, fakebroker.GrantStreams} {
		if !b.Granted(c.BrokerTenantUUID, k) {
			t.Fatalf("plan pro on a cell with grants api: %s not granted", k)
		}
	}
	// A plan with more features gets its grants where the cluster is.
	dev := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "a3", Plan: "dev", Cell: "api"}))
	if b.Granted(dev.BrokerTenantUUID, fakebroker.GrantStreams) {
		t.Fatal("plan dev got a streams grant")
	}
	must[Cluster](t)(SetClusterPlan(ctx, pool, "a3", "pro"))
	if !b.Granted(dev.BrokerTenantUUID, fakebroker.GrantStreams) {
		t.Fatal("set-plan to pro did not grant streams")
	}
	d := must[ClusterDeletion](t)(DeleteCluster(ctx, pool, "a1", true, nil))
	if d.GrantsNote != "" || b.Granted(c.BrokerTenantUUID, fakebroker.GrantKV) || b.Granted(c.BrokerTenantUUID, fakebroker.GrantEphemeral) {
		t.Fatalf("after the deletion: note %q, kv %v", d.GrantsNote, b.Granted(c.BrokerTenantUUID, fakebroker.GrantKV))
	}

	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "a2", Plan: "dev", Cell: "gone"})
	if err == nil || !strings.HasPrefix(err.Error(), `cannot issue cluster "a2"'s grants (kv, ephemeral, for plan dev) on cell "gone" (grants: api)`) {
		t.Fatalf("cell that cannot grant: %v", err)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.clusters WHERE slug = 'a2'`); n != 0 {
		t.Fatal("a refused placement left the cluster")
	}

	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "x1", Plan: "dev", Cell: "onex"})
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Kind != WrongState ||
		!strings.Contains(err.Error(), "INSERT INTO queen.kv_quota (tenant_id) SELECT '") {
		t.Fatalf("verify cell without the grant: %v", err)
	}
	id := strings.Fields(strings.SplitN(err.Error(), "--broker-tenant ", 2)[1])[0]
	id = strings.TrimRight(id, ".")
	b.SetGrant(id, fakebroker.GrantKV, true)
	b.SetGrant(id, fakebroker.GrantEphemeral, true)
	x := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "x1", Plan: "dev", Cell: "onex", BrokerTenant: id}))
	if x.BrokerTenantUUID != id {
		t.Fatalf("broker tenant %s, want %s", x.BrokerTenantUUID, id)
	}
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "x2", Plan: "dev", Cell: "onex", BrokerTenant: "00000000-0000-0000-0000-000000000001"})
	if err == nil {
		t.Fatal("a cluster took the broker's default tenant")
	}

	// Not known to scope: its broker gates nothing, nobody is asked.
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "k1", Plan: "pro", Cell: "lone"}))
}
