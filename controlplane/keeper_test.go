package controlplane

import (
	"context"
	"testing"
)

// recordingReleaser answers like a broker check would and remembers whom
// it was asked about.
type recordingReleaser struct {
	asked  []Keeper
	refuse error
}

func (r *recordingReleaser) release(_ context.Context, k Keeper) (map[string]any, error) {
	r.asked = append(r.asked, k)
	if r.refuse != nil {
		return nil, r.refuse
	}
	return map[string]any{"queues_found": 0}, nil
}

// TestMoveKeeperAsksTheReleaser: moving the keeper of a cell not known to
// scope, with a cluster staying, asks the Releaser in the move's
// transaction; its refusal changes nothing, its agreement moves and audits;
// without a Releaser the database refuses; a cell known to scope, or a
// non-keeper, asks nothing.
func TestMoveKeeperAsksTheReleaser(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[Tenant](t)(CreateTenant(ctx, pool, "globex", "Globex"))
	must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{Secret: ptrTo("cell-secret")}))
	next := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "globex", Slug: "globex-prod", Plan: "pro", Cell: "eu1-a"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-b", Region: "eu1", BaseURL: "http://127.0.0.1:6633", Class: "shared"}))

	_, err := MoveCluster(ctx, pool, "acme-prod", "eu1-b", nil)
	if KindOf(err) != WrongState {
		t.Fatalf("move without a releaser: %v, want the database's refusal", err)
	}

	r := &recordingReleaser{refuse: errorf(WrongState, "has queues")}
	_, err = MoveCluster(ctx, pool, "acme-prod", "eu1-b", r.release)
	wantErr(t, err, WrongState, "has queues")
	if len(r.asked) != 1 {
		t.Fatalf("releaser asked %d times", len(r.asked))
	}
	k := r.asked[0]
	if k.ClusterID != w.cluster.ID || k.ClusterSlug != "acme-prod" || k.BrokerTenant != w.cluster.BrokerTenantUUID ||
		k.CellSlug != "eu1-a" || k.CellURL != "http://127.0.0.1:6632" || k.CellSecret != "cell-secret" || k.Staying != 1 {
		t.Fatalf("releaser asked about %+v", k)
	}
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "acme-prod" || c.Clusters != 2 || !c.KeeperOnly {
		t.Fatalf("a refused release moved the cluster: %+v", c)
	}

	r = &recordingReleaser{}
	m := must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-b", r.release))
	if !m.Moved || m.Released == nil || m.Released.ClusterID != w.cluster.ID {
		t.Fatalf("move %+v", m)
	}
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "globex-prod" || c.KeeperID != next.ID {
		t.Fatalf("keeper after the move: %+v", c)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action = 'keeper_released' AND cluster_id = $1::uuid
		AND meta->>'queues_found' = '0'`, w.cluster.ID); n != 1 {
		t.Fatalf("%d keeper_released audit rows", n)
	}

	// Moving it back places it last: globex keeps eu1-a. It empties eu1-b,
	// which keeps its residue: placing a cluster there again asks about it
	// (and the non-keeper's leave asks nothing).
	r = &recordingReleaser{refuse: errorf(WrongState, "must not be asked")}
	must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-a", r.release))
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "globex-prod" {
		t.Fatalf("an older cluster moved in took the cell: keeper %q", c.KeeperSlug)
	}
	_, err = MoveCluster(ctx, pool, "acme-prod", "eu1-b", r.release)
	wantErr(t, err, WrongState, "must not be asked")
	if len(r.asked) != 1 || !r.asked[0].Residue || r.asked[0].ClusterID != w.cluster.ID || r.asked[0].CellSlug != "eu1-b" {
		t.Fatalf("placing on the emptied cell asked about %+v, want its residue", r.asked)
	}
	_, err = MoveCluster(ctx, pool, "acme-prod", "eu1-b", nil)
	if KindOf(err) != WrongState {
		t.Fatalf("placing on a residue without a releaser: %v", err)
	}
	r = &recordingReleaser{}
	must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-b", r.release))
	if len(r.asked) != 1 || !r.asked[0].Residue {
		t.Fatalf("the releaser was asked about %+v, want the residue only", r.asked)
	}
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-b2", Plan: "pro", Cell: "eu1-b"})
	if err != nil {
		t.Fatalf("a second cluster on a cell whose residue was released: %v", err)
	}

	// On a cell stated scoped the keeper moves freely.
	must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-a", r.release))
	must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{Tenancy: ptrTo("scoped"), Grants: ptrTo("none")}))
	r = &recordingReleaser{}
	must[Move](t)(MoveCluster(ctx, pool, "globex-prod", "eu1-b", r.release))
	if len(r.asked) != 0 {
		t.Fatal("a move off a cell stated scoped asked the releaser")
	}
}

// TestDeleteTenantReleasesItsKeepers: a tenant delete asks about the
// tenant's keepers of shared cells only, and not about a cell it empties.
func TestDeleteTenantReleasesItsKeepers(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	provision(t, pool) // acme-prod, keeper of eu1-a
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-own", Region: "eu1", BaseURL: "http://127.0.0.1:6634", Class: "shared"}))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-own", Plan: "pro", Cell: "eu1-own"}))
	must[Tenant](t)(CreateTenant(ctx, pool, "globex", "Globex"))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "globex", Slug: "globex-prod", Plan: "pro", Cell: "eu1-a"}))

	_, err := DeleteTenant(ctx, pool, "acme", true, nil)
	if KindOf(err) != WrongState {
		t.Fatalf("delete without a releaser: %v", err)
	}
	r := &recordingReleaser{refuse: errorf(WrongState, "has queues")}
	_, err = DeleteTenant(ctx, pool, "acme", true, r.release)
	wantErr(t, err, WrongState, "has queues")
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.tenants WHERE slug = 'acme'`); n != 1 {
		t.Fatal("a refused release deleted the tenant")
	}
	r = &recordingReleaser{}
	d := must[Deletion](t)(DeleteTenant(ctx, pool, "acme", true, r.release))
	if len(r.asked) != 1 || r.asked[0].ClusterSlug != "acme-prod" || len(d.Released) != 1 || d.Counts["clusters"] != 2 {
		t.Fatalf("asked %+v, deletion %+v", r.asked, d)
	}
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "globex-prod" {
		t.Fatalf("keeper after the delete: %q", c.KeeperSlug)
	}
}

// TestUpdateCell: each field changes alone; a new URL or secret resets the
// verdict; bad values are refused before the database.
func TestUpdateCell(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	c := must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://127.0.0.1:6632", Class: "shared", Tenancy: "unscoped"}))
	if c.TenancyStated != "unscoped" || !c.KeeperOnly {
		t.Fatalf("added %+v", c)
	}
	_, err := AddCell(ctx, pool, NewCell{Slug: "eu1-x", Region: "eu1", BaseURL: "http://127.0.0.1:1", Class: "shared", Tenancy: "maybe"})
	wantErr(t, err, Invalid, `invalid tenancy "maybe": use probe, scoped or unscoped`)

	if _, err := pool.Exec(ctx, `SELECT queen_proxy.record_cell_tenant_scoping($1::uuid, 'scoped', 'agreed')`, c.ID); err != nil {
		t.Fatal(err)
	}
	c = must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{Tenancy: ptrTo("probe"), Region: ptrTo("eu2")}))
	if c.TenancyStated != "probe" || c.Region != "eu2" || c.TenantScoping != "scoped" || c.KeeperOnly {
		t.Fatalf("after tenancy and region: %+v", c)
	}
	c = must[Cell](t)(UpdateCell(ctx, pool, "EU1-A", CellChange{BaseURL: ptrTo(" http://127.0.0.1:7000 ")}))
	if c.BaseURL != "http://127.0.0.1:7000" || c.TenantScoping != "unknown" || c.TenantScopingCheckedAt != nil || !c.KeeperOnly {
		t.Fatalf("after a new URL: %+v", c)
	}
	c = must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{Secret: ptrTo("s")}))
	if !c.HasSecret {
		t.Fatal("secret not set")
	}
	c = must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{ClearSecret: true}))
	if c.HasSecret {
		t.Fatal("secret not cleared")
	}

	for _, bad := range []struct {
		ch   CellChange
		want string
	}{
		{CellChange{}, "nothing to change: give --url, --secret, --clear-secret, --tenancy, --region, --capacity or --grants"},
		{CellChange{Capacity: ptrTo(-2)}, "invalid cell capacity -2: use 0 (no cap) or more"},
		{CellChange{Secret: ptrTo("s"), ClearSecret: true}, "give a new secret or clear it, not both"},
		{CellChange{Secret: ptrTo("")}, "the new secret is empty; clear it instead"},
		{CellChange{BaseURL: ptrTo("192.0.2.1:80")}, `invalid cell broker URL "192.0.2.1:80": want http://host:port`},
		{CellChange{Tenancy: ptrTo("")}, `invalid tenancy "": use probe, scoped or unscoped`},
		{CellChange{Region: ptrTo(" ")}, "cell region is required"},
	} {
		_, err := UpdateCell(ctx, pool, "eu1-a", bad.ch)
		wantErr(t, err, Invalid, bad.want)
	}
	_, err = UpdateCell(ctx, pool, "eu9", CellChange{Tenancy: ptrTo("scoped")})
	wantErr(t, err, NotFound, `unknown cell "eu9"`)
}

func ptrTo[T any](v T) *T { return &v }
