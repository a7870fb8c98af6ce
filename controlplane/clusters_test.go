package controlplane

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCells(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	c := must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://192.0.2.7:6632",
		Class: "Dedicated", CapacitySlots: 1, Secret: "s3cret", BrokerVersion: "0.15.1"}))
	if c.Slug != "eu1-a" || c.Class != "dedicated" || c.Status != CellActive || !c.HasSecret || c.CapacitySlots != 1 ||
		c.BrokerVersion != "0.15.1" {
		t.Fatalf("added %+v", c)
	}
	if s := scalar[string](t, pool, `SELECT cell_secret FROM queen_proxy.cells WHERE slug = 'eu1-a'`); s != "s3cret" {
		t.Fatalf("stored secret %q", s)
	}
	if b := must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: " EU1-B ", Region: "eu1", BaseURL: "https://b.example.com", Class: "shared"})); b.Slug != "eu1-b" {
		t.Fatalf("slug stored as %q, want it trimmed and lowercased", b.Slug)
	}

	bad := []struct {
		cell NewCell
		kind Kind
		msg  string
	}{
		{NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://x:1", Class: "shared"}, Taken, `cell slug "eu1-a" is already taken`},
		{NewCell{Slug: "", Region: "eu1", BaseURL: "http://x:1", Class: "shared"}, Invalid, "cell slug is required"},
		{NewCell{Slug: "a b", Region: "eu1", BaseURL: "http://x:1", Class: "shared"}, Invalid, `invalid cell slug "a b": no spaces or slashes`},
		{NewCell{Slug: "c", Region: " ", BaseURL: "http://x:1", Class: "shared"}, Invalid, "cell region is required"},
		{NewCell{Slug: "c", Region: "eu1", BaseURL: "", Class: "shared"}, Invalid, "cell broker URL is required"},
		{NewCell{Slug: "c", Region: "eu1", BaseURL: "inprocess://self", Class: "shared"}, Invalid, `invalid cell broker URL "inprocess://self": want http://host:port`},
		{NewCell{Slug: "c", Region: "eu1", BaseURL: "http://x:1", Class: "big"}, Invalid, `invalid cell class "big": use shared or dedicated`},
		{NewCell{Slug: "c", Region: "eu1", BaseURL: "http://x:1", Class: "shared", CapacitySlots: -1}, Invalid, "invalid cell capacity -1: use 0 (no cap) or more"},
	}
	for _, b := range bad {
		_, err := AddCell(ctx, pool, b.cell)
		wantErr(t, err, b.kind, b.msg)
	}

	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "one", Plan: "free", Cell: "eu1-b"}))
	drained := must[Cell](t)(SetCellStatus(ctx, pool, "eu1-b", CellDraining))
	if drained.Status != CellDraining || drained.Clusters != 1 {
		t.Fatalf("drained %+v", drained)
	}
	_, err := CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "two", Plan: "free", Cell: "eu1-b"})
	wantErr(t, err, WrongState, `cell "eu1-b" is draining and takes no new clusters`)
	_, err = SetCellStatus(ctx, pool, "nope", CellDraining)
	wantErr(t, err, NotFound, `unknown cell "nope"`)
	_, err = SetCellStatus(ctx, pool, "eu1-b", "gone")
	wantErr(t, err, Invalid, `invalid cell status "gone": use active, draining or dead`)

	cells := must[[]Cell](t)(ListCells(ctx, pool))
	if len(cells) != 2 || cells[0].Slug != "eu1-a" || cells[1].Status != CellDraining || cells[1].Clusters != 1 {
		t.Fatalf("listed %+v", cells)
	}
	if b, _ := json.Marshal(cells); strings.Contains(string(b), "s3cret") {
		t.Fatalf("the cell secret is in the JSON: %s", b)
	}
	undone := must[Cell](t)(SetCellStatus(ctx, pool, "eu1-b", CellActive))
	if undone.Status != CellActive {
		t.Fatalf("undrained %+v", undone)
	}
}

func TestCreateCluster(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	_, err := CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "x", Plan: "pro"})
	wantErr(t, err, NotFound, `unknown tenant "acme"`)
	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "x", Plan: "pro"})
	wantErr(t, err, WrongState, "no active shared cell has room for a cluster of plan pro (shared cells: none): "+
		"add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class shared --capacity N)")

	cell := must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://a:1", Class: "shared"}))
	c := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "Acme-Prod", Plan: "pro"}))
	if c.Slug != "acme-prod" || c.TenantSlug != "acme" || c.PlanCode != "pro" || c.CellID != cell.ID || c.Status != "active" ||
		c.BrokerTenantUUID == "" || string(c.Overrides) != "{}" || !c.Placed {
		t.Fatalf("created %+v", c)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action = 'cluster_created'`); n != 1 {
		t.Fatalf("%d cluster_created audit rows", n)
	}

	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-b", Region: "eu1", BaseURL: "http://b:1", Class: "shared"}))
	must[Cell](t)(SetCellStatus(ctx, pool, "eu1-b", CellDraining))
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "y", Plan: "pro"})
	// No cell is full: more capacity would help none of them.
	wantErr(t, err, WrongState, "no active shared cell has room for a cluster of plan pro (shared cells: 1 draining, 1 keeper-only): "+
		"add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class shared --capacity N)"+
		"; a keeper-only cell takes no second cluster whatever its capacity: its broker does not keep clusters apart (docs/isolation.md)")
	must[Cell](t)(SetCellStatus(ctx, pool, "eu1-b", CellActive))
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-prod", Plan: "pro", Cell: "eu1-b"})
	wantErr(t, err, Taken, `cluster slug "acme-prod" is already taken`)
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "y", Plan: "gold", Cell: "eu1-b"})
	wantErr(t, err, NotFound, `unknown plan "gold"`)
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "y", Plan: "pro", Cell: "eu9"})
	wantErr(t, err, NotFound, `unknown cell "eu9"`)
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "y.z", Plan: "pro", Cell: "eu1-b"})
	wantErr(t, err, Invalid, `invalid cluster slug "y.z": use 1 to 63 characters from a-z, 0-9 and inner hyphens`)

	must[Tenant](t)(CreateTenant(ctx, pool, "beta", ""))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "beta", Slug: "beta-1", Plan: "free", Cell: "eu1-b"}))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-dev", Plan: "free", Cell: cell.ID}))

	slugs := func(f ClusterFilter) string {
		cs := must[[]Cluster](t)(ListClusters(ctx, pool, f))
		out := ""
		for _, c := range cs {
			out += c.Slug + " "
		}
		return out
	}
	for _, c := range []struct {
		f    ClusterFilter
		want string
	}{
		{ClusterFilter{}, "acme-dev acme-prod beta-1 "},
		{ClusterFilter{Tenant: "acme"}, "acme-dev acme-prod "},
		{ClusterFilter{Cell: "eu1-b"}, "beta-1 "},
		{ClusterFilter{Plan: "free"}, "acme-dev beta-1 "},
		{ClusterFilter{Tenant: "acme", Plan: "free"}, "acme-dev "},
	} {
		if got := slugs(c.f); got != c.want {
			t.Errorf("ListClusters(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	_, err = ListClusters(ctx, pool, ClusterFilter{Tenant: "nope"})
	wantErr(t, err, NotFound, `unknown tenant "nope"`)
}

func TestMoveCluster(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "eu1-b", Region: "eu1", BaseURL: "http://b:1", Class: "shared"}))
	l := listen(t, url)

	m := must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-b", nil))
	if !m.Moved || m.FromCell != "eu1-a" || m.ToCell != "eu1-b" || m.Cluster.CellSlug != "eu1-b" ||
		m.Cluster.BrokerTenantUUID != w.cluster.BrokerTenantUUID {
		t.Fatalf("move %+v", m)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("move announced %q, want the cluster", p)
	}
	if meta := scalar[string](t, pool, `SELECT meta->>'to_cell' FROM queen_proxy.operations WHERE action = 'cluster_moved'`); meta != m.Cluster.CellID {
		t.Fatalf("audit to_cell %q", meta)
	}
	same := must[Move](t)(MoveCluster(ctx, pool, "acme-prod", "eu1-b", nil))
	if same.Moved {
		t.Fatalf("moving to the same cell reported a move: %+v", same)
	}
	if p := l.next(); p != "" {
		t.Fatalf("a no-op move announced %q", p)
	}

	must[Cell](t)(SetCellStatus(ctx, pool, "eu1-a", CellDraining))
	_, err := MoveCluster(ctx, pool, "acme-prod", "eu1-a", nil)
	wantErr(t, err, WrongState, `cell "eu1-a" is draining and takes no new clusters`)
	_, err = MoveCluster(ctx, pool, "nope", "eu1-a", nil)
	wantErr(t, err, NotFound, `unknown cluster "nope"`)
	_, err = MoveCluster(ctx, pool, "acme-prod", "eu9", nil)
	wantErr(t, err, NotFound, `unknown cell "eu9"`)
}

func TestSetClusterPlanAndOverrides(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	l := listen(t, url)

	c := must[Cluster](t)(SetClusterPlan(ctx, pool, "acme-prod", "free"))
	if c.PlanCode != "free" {
		t.Fatalf("plan %q", c.PlanCode)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("assign_plan announced %q", p)
	}
	_, err := SetClusterPlan(ctx, pool, "acme-prod", "gold")
	wantErr(t, err, NotFound, `unknown plan "gold"`)

	lim := must[Limits](t)(SetOverrides(ctx, pool, "acme-prod", []byte(`{"max_queues": 500, "req_burst": null, "monthly_msgs_quota": 1000}`)))
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("set_limit_override announced %q", p)
	}
	byName := map[string]Limit{}
	for _, x := range lim.Limits {
		byName[x.Name] = x
	}
	if len(lim.Limits) != len(LimitNames) || lim.Plan != "free" || lim.Cluster != "acme-prod" {
		t.Fatalf("limits %+v", lim)
	}
	check := func(name string, plan, eff *int64, override string) {
		t.Helper()
		x := byName[name]
		if !sameLimit(x.Plan, plan) || !sameLimit(x.Effective, eff) || string(x.Override) != override {
			t.Errorf("%s: plan %v override %q effective %v; want %v %q %v", name, show(x.Plan), x.Override, show(x.Effective),
				show(plan), override, show(eff))
		}
	}
	check("max_queues", ptr(20), ptr(500), "500")
	check("req_burst", ptr(25), nil, "null")
	check("max_req_per_sec", ptr(5), ptr(5), "")
	check("monthly_msgs_quota", nil, ptr(1000), "1000")
	if stored := scalar[string](t, pool, `SELECT limit_overrides::text FROM queen_proxy.clusters WHERE slug = 'acme-prod'`); stored !=
		`{"req_burst": null, "max_queues": 500, "monthly_msgs_quota": 1000}` {
		t.Fatalf("stored overrides %s", stored)
	}

	shown := must[Limits](t)(ClusterLimits(ctx, pool, w.cluster.ID))
	if string(shown.Overrides) != scalar[string](t, pool, `SELECT limit_overrides::text FROM queen_proxy.clusters`) {
		t.Fatalf("ClusterLimits overrides %s", shown.Overrides)
	}

	cleared := must[Limits](t)(SetOverrides(ctx, pool, "acme-prod", nil))
	if string(cleared.Overrides) != "{}" {
		t.Fatalf("cleared overrides %s", cleared.Overrides)
	}

	for doc, msg := range map[string]string{
		`[1]`:                  `invalid overrides: want a JSON object such as {"max_queues": 500, "req_burst": null}`,
		`{"max_queues": 5} {}`: `invalid overrides: want a JSON object such as {"max_queues": 500, "req_burst": null}`,
		`{"max_topics": 5}`:    `invalid overrides: unknown limit "max_topics" (known: max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst, max_queues, max_partitions_per_queue, max_parked_pops, max_payload_bytes, max_batch_items, max_retained_bytes, max_retention_seconds, monthly_msgs_quota)`,
		`{"max_queues": -1}`:   `invalid overrides: max_queues must be a whole number of at least 0, or null for unlimited (got -1)`,
		`{"max_queues": 1.5}`:  `invalid overrides: max_queues must be a whole number of at least 0, or null for unlimited (got 1.5)`,
		`{"max_queues": "5"}`:  `invalid overrides: max_queues must be a whole number of at least 0, or null for unlimited`,
	} {
		_, err := SetOverrides(ctx, pool, "acme-prod", []byte(doc))
		wantErr(t, err, Invalid, msg)
	}
	_, err = SetOverrides(ctx, pool, "nope", []byte(`{}`))
	wantErr(t, err, NotFound, `unknown cluster "nope"`)
}

// TestLimitsShowWhatTheGatewayEnforces covers overrides written by other
// tools (straight SQL) that the CLI would refuse.
func TestLimitsShowWhatTheGatewayEnforces(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	provision(t, pool)
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.set_limit_override(id, '{"max_queues": "lots", "msgs_burst": 0, "monthly_msgs_quota": null}')
		FROM queen_proxy.clusters`); err != nil {
		t.Fatal(err)
	}
	lim := must[Limits](t)(ClusterLimits(ctx, pool, "acme-prod"))
	for _, x := range lim.Limits {
		switch x.Name {
		case "max_queues": // not a number: the plan value stays
			if !sameLimit(x.Effective, ptr(200)) || string(x.Override) != `"lots"` {
				t.Errorf("max_queues %+v", x)
			}
		case "msgs_burst":
			if !sameLimit(x.Effective, ptr(0)) {
				t.Errorf("msgs_burst %+v", x)
			}
		case "monthly_msgs_quota":
			if x.Effective != nil || string(x.Override) != "null" {
				t.Errorf("monthly_msgs_quota %+v", x)
			}
		}
	}
}

func ptr(n int64) *int64 { return &n }

func sameLimit(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show(v *int64) any {
	if v == nil {
		return "unlimited"
	}
	return *v
}
