package migrations

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnscopedCellTakesOneCluster holds the trigger to its contract: on a
// cell recorded as not scoping by tenant, a second cluster is refused on
// insert and on a move, with SQLSTATE 55000 and a message naming the
// remedy; the keeper is the oldest cluster; scoped and unknown cells take
// any number.
func TestUnscopedCellTakesOneCluster(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	scalar := func(sql string, args ...any) string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	cell := func(slug string) string {
		return scalar(`INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ($1, 'r', 'http://127.0.0.1:1', 'shared') RETURNING id::text`, slug)
	}
	tenant := scalar(`SELECT queen_proxy.create_tenant($1, 'Iso')::text`, uniq("iso"))
	create := func(slug, cellID string) (string, error) {
		var id string
		err := pool.QueryRow(ctx, `SELECT queen_proxy.create_cluster($1::uuid, $2, 'pro', $3::uuid)::text`, tenant, uniq(slug), cellID).Scan(&id)
		return id, err
	}
	mustCreate := func(slug, cellID string) string {
		t.Helper()
		id, err := create(slug, cellID)
		if err != nil {
			t.Fatalf("create %s: %v", slug, err)
		}
		return id
	}
	refused := func(err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55000" || !strings.Contains(pe.Message, "does not scope by x-queen-tenant") ||
			!strings.Contains(pe.Message, "dedicated cell") {
			t.Fatalf("want SQLSTATE 55000 naming the remedy, got %v", err)
		}
	}

	unscoped, scoped := cell(uniq("iso-unscoped")), cell(uniq("iso-scoped"))
	first := mustCreate("iso-first", unscoped)
	if ok := scalar(`SELECT queen_proxy.record_cell_tenant_scoping($1::uuid, 'unscoped', 'probe saw it')::text`, unscoped); ok != "true" {
		t.Fatalf("record returned %s", ok)
	}
	_, err := create("iso-second", unscoped)
	refused(err)

	// Unknown and scoped cells take any number of clusters.
	mustCreate("iso-a", scoped)
	b := mustCreate("iso-b", scoped)
	scalar(`SELECT queen_proxy.record_cell_tenant_scoping($1::uuid, 'scoped', NULL)::text`, scoped)
	mustCreate("iso-c", scoped)

	// A move onto the unscoped cell is refused; a move within stays allowed.
	_, err = pool.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2::uuid WHERE id = $1::uuid`, b, unscoped)
	refused(err)
	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.clusters SET status = 'suspended' WHERE id = $1::uuid`, first); err != nil {
		t.Fatalf("an update that does not move the cluster: %v", err)
	}
	if got := scalar(`SELECT queen_proxy.cell_keeper_cluster($1::uuid)::text`, unscoped); got != first {
		t.Fatalf("keeper %s, want the oldest %s", got, first)
	}
	if got := scalar(`SELECT tenant_scoping || '|' || tenant_scoping_detail FROM queen_proxy.cells WHERE id = $1::uuid`, unscoped); got != "unscoped|probe saw it" {
		t.Fatalf("recorded %q", got)
	}
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.record_cell_tenant_scoping($1::uuid, 'maybe', NULL)`, unscoped); err == nil {
		t.Fatal("an unknown verdict was recorded")
	}
	if got := scalar(`SELECT queen_proxy.record_cell_tenant_scoping(gen_random_uuid(), 'scoped', NULL)::text`); got != "false" {
		t.Fatalf("recording for a missing cell returned %s", got)
	}
}
