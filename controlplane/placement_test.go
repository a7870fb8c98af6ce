package controlplane

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestPlacement: without a cell, CreateCluster places on the least loaded
// open cell of the plan's class, says so, and keeps used_slots exact through
// moves; cell list reports each cell's placement state.
func TestPlacement(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "a", Region: "eu1", BaseURL: "http://a:1", Class: "shared", CapacitySlots: 4, Tenancy: "scoped", Grants: "none"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "b", Region: "eu1", BaseURL: "http://b:1", Class: "shared", CapacitySlots: 2, Tenancy: "scoped", Grants: "none"}))
	var got []string
	for i := range 5 {
		c := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: fmt.Sprintf("c%d", i), Plan: "pro"}))
		if !c.Placed {
			t.Fatalf("cluster %s not marked placed", c.Slug)
		}
		got = append(got, c.CellSlug)
	}
	// a 0/4 = b 0/2, slug; b 0 < a .25; a .25 < b .5; a .5 = b .5, fewer
	// clusters: b; then a .5 < b 1 (full).
	if strings.Join(got, ",") != "a,b,a,b,a" {
		t.Fatalf("placed on %v, want a,b,a,b,a", got)
	}
	named := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "named", Plan: "pro", Cell: "a"}))
	if named.Placed || named.CellSlug != "a" {
		t.Fatalf("named %+v", named)
	}
	_, err := CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "over", Plan: "pro", Cell: "b"})
	wantErr(t, err, WrongState, `cell "b" is full: it holds 2 of its 2 cluster slot(s); raise its capacity (caddy queen cell update b --capacity N) or place the cluster on another cell`)
	_, err = CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "over", Plan: "pro"})
	wantErr(t, err, WrongState, "no active shared cell has room for a cluster of plan pro (shared cells: 2 full): "+
		"add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class shared --capacity N) "+
		"or raise a cell's capacity (caddy queen cell update <cell> --capacity N)")

	cells := must[[]Cell](t)(ListCells(ctx, pool))
	if len(cells) != 2 || cells[0].UsedSlots != 4 || cells[0].Placement != "full" || cells[1].UsedSlots != 2 || cells[1].Placement != "full" {
		t.Fatalf("cells %+v", cells)
	}
	b, _ := json.Marshal(cells[0])
	if !strings.Contains(string(b), `"capacity_slots":4,"used_slots":4,`) || !strings.Contains(string(b), `"placement":"full"`) {
		t.Fatalf("cell JSON %s", b)
	}

	// Raising a cap opens the cell; lowering it below its clusters is refused.
	_, err = UpdateCell(ctx, pool, "a", CellChange{Capacity: ptrTo(3)})
	wantErr(t, err, WrongState, `cell "a" holds 4 cluster(s): its capacity cannot go below that (0 is no cap); move clusters off it first (caddy queen cluster move <cluster> --to <cell>)`)
	if c := must[Cell](t)(UpdateCell(ctx, pool, "b", CellChange{Capacity: ptrTo(0)})); c.CapacitySlots != 0 || c.Placement != "open" {
		t.Fatalf("b without a cap: %+v", c)
	}
	must[Move](t)(MoveCluster(ctx, pool, "named", "b", nil))
	cells = must[[]Cell](t)(ListCells(ctx, pool))
	if cells[0].UsedSlots != 3 || cells[0].Clusters != 3 || cells[1].UsedSlots != 3 || cells[1].Clusters != 3 {
		t.Fatalf("after a move: %+v", cells)
	}
}

// TestPlacementConcurrentCreateCluster: CreateCluster from many goroutines
// fills every cell to its cap and no further.
func TestPlacementConcurrentCreateCluster(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	for slug, n := range map[string]int{"x": 2, "y": 3, "z": 1} {
		must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: slug, Region: "eu1", BaseURL: "http://" + slug + ":1", Class: "shared",
			CapacitySlots: n, Tenancy: "scoped", Grants: "none"}))
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		placed  = map[string]int{}
		refused int
		other   []error
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: fmt.Sprintf("r%d", i), Plan: "pro"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				placed[c.CellSlug]++
			case KindOf(err) == WrongState && strings.HasPrefix(err.Error(), "no active shared cell has room"):
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 || fmt.Sprint(placed) != "map[x:2 y:3 z:1]" || refused != 10 {
		t.Fatalf("placed %v, %d refused, errors %v", placed, refused, other)
	}
}

// TestRemoveCell: refused with the count and the way out while clusters
// live on it; gone from the list once removed.
func TestRemoveCell(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	must[Tenant](t)(CreateTenant(ctx, pool, "acme", ""))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "old", Region: "eu1", BaseURL: "http://old:1", Class: "shared", Tenancy: "scoped", Grants: "none"}))
	must[Cell](t)(AddCell(ctx, pool, NewCell{Slug: "new", Region: "eu1", BaseURL: "http://new:1", Class: "shared", Tenancy: "scoped", Grants: "none"}))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "p1", Plan: "pro", Cell: "old"}))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "p2", Plan: "pro", Cell: "old"}))
	_, err := RemoveCell(ctx, pool, "old", false)
	wantErr(t, err, WrongState, `cell "old" still holds 2 cluster(s): move each to another cell first (caddy queen cluster list --cell old, `+
		`then caddy queen cluster move <cluster> --to <cell>); drain it meanwhile so nothing new is placed there (caddy queen cell drain old)`)
	_, err = RemoveCell(ctx, pool, "gone", false)
	wantErr(t, err, NotFound, `unknown cell "gone"`)
	must[Move](t)(MoveCluster(ctx, pool, "p1", "new", nil))
	must[Move](t)(MoveCluster(ctx, pool, "p2", "new", nil))
	r := must[RemovedCell](t)(RemoveCell(ctx, pool, "OLD", false))
	if r.Slug != "old" || r.BaseURL != "http://old:1" || r.ResidueForgotten != nil {
		t.Fatalf("removed %+v", r)
	}
	if cells := must[[]Cell](t)(ListCells(ctx, pool)); len(cells) != 1 || cells[0].Slug != "new" || cells[0].UsedSlots != 2 {
		t.Fatalf("cells after remove: %+v", cells)
	}
}
