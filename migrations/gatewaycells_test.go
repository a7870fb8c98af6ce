package migrations

import (
	"context"
	"testing"
	"time"
)

// TestClaimGatewayCells holds the claim to its contract: the first group
// to claim a cell holds it, a member restating the claim changes nothing
// but stated_at, another group's claim leaves the holder in place and says
// so, a claim may name a cell not added yet, and a release frees the cell
// for the next claim. Every change of holder invalidates the cell's
// clusters on queen_proxy_inval, so a gateway that no longer fronts the
// cell refuses them at once.
func TestClaimGatewayCells(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	tenant, _ := newTenant(t, pool)
	cellID := newCell(t, pool)
	cell := scalar[string](t, pool, `SELECT slug FROM queen_proxy.cells WHERE id = $1::uuid`, cellID)
	cluster := newCluster(t, pool, tenant, cellID)
	missing := uniq("not-added")
	groupA, groupB := uniq("grp-a"), uniq("grp-b")

	type claim struct {
		cell, group, by string
		claimed, exists bool
	}
	claimAs := func(group, gateway string, cells ...string) []claim {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT cell_slug, group_name, claimed_by, claimed, cell_exists
			FROM queen_proxy.claim_gateway_cells($1, $2, $3)`, group, gateway, cells)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []claim
		for rows.Next() {
			var c claim
			if err := rows.Scan(&c.cell, &c.group, &c.by, &c.claimed, &c.exists); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN queen_proxy_inval"); err != nil {
		t.Fatal(err)
	}
	notified := func(what string, want bool) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		for {
			n, err := conn.Conn().WaitForNotification(wctx)
			if err != nil {
				if want {
					t.Fatalf("%s: cluster %s not invalidated", what, cluster)
				}
				return
			}
			if n.Payload == cluster {
				if !want {
					t.Fatalf("%s: cluster %s invalidated, nothing changed", what, cluster)
				}
				return
			}
		}
	}

	got := claimAs(groupA, "gw-1", cell, missing)
	want := map[string]claim{
		cell:    {cell, groupA, "gw-1", true, true},
		missing: {missing, groupA, "gw-1", true, false},
	}
	if len(got) != 2 || got[0] != want[got[0].cell] || got[1] != want[got[1].cell] {
		t.Fatalf("first claim: %+v", got)
	}
	notified("first claim", true)

	stated := scalar[time.Time](t, pool, `SELECT stated_at FROM queen_proxy.gateway_group_cells WHERE cell_slug = $1`, cell)
	if got := claimAs(groupA, "gw-2", cell); len(got) != 1 || got[0] != (claim{cell, groupA, "gw-1", true, true}) {
		t.Fatalf("the group's other member restating: %+v", got)
	}
	if after := scalar[time.Time](t, pool, `SELECT stated_at FROM queen_proxy.gateway_group_cells WHERE cell_slug = $1`, cell); !after.After(stated) {
		t.Fatalf("stated_at not refreshed: %s then %s", stated, after)
	}
	notified("a restated claim", false)

	if got := claimAs(groupB, "gw-9", cell); len(got) != 1 || got[0] != (claim{cell, groupA, "gw-1", false, true}) {
		t.Fatalf("another group's claim: %+v", got)
	}
	notified("a refused claim", false)

	if held := scalar[string](t, pool, `SELECT queen_proxy.release_gateway_cell($1)`, cell); held != groupA {
		t.Fatalf("release returned %q, want %q", held, groupA)
	}
	notified("a release", true)
	if got := claimAs(groupB, "gw-9", cell); len(got) != 1 || got[0] != (claim{cell, groupB, "gw-9", true, true}) {
		t.Fatalf("claim after the release: %+v", got)
	}
	notified("the new group's claim", true)

	for _, bad := range [][]any{{"", "gw", []string{cell}}, {groupA, "gw", []string{" "}}} {
		if _, err := pool.Exec(ctx, `SELECT * FROM queen_proxy.claim_gateway_cells($1, $2, $3)`, bad...); err == nil {
			t.Errorf("claim %v accepted", bad)
		}
	}
}
