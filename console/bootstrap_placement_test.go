package console

import (
	"context"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

// TestBootstrapPlacesWithoutACell: with no cell configured, a new cluster is
// placed by the database (the least loaded open cell), and a restart keeps
// it where it is even when no cell has room for a new one any more.
func TestBootstrapPlacesWithoutACell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t))
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		slug     string
		capacity int
	}{{"busy", 2}, {"idle", 2}} {
		if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, capacity_slots, tenancy_stated)
			VALUES ($1, 'eu1', 'http://127.0.0.1:1', 'shared', $2, 'scoped')`, c.slug, c.capacity); err != nil {
			t.Fatal(err)
		}
	}
	var tenant string
	if err := pool.QueryRow(ctx, `SELECT queen_proxy.create_tenant('other', 'Other')::text`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.create_cluster($1::uuid, 'other-1', 'dev', (SELECT id FROM queen_proxy.cells WHERE slug = 'busy'))`, tenant); err != nil {
		t.Fatal(err)
	}
	cfg := BootstrapConfig{Tenant: "boot", Plan: "dev"}
	first, err := Bootstrap(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cellOf := func(cluster string) string {
		t.Helper()
		var slug string
		if err := pool.QueryRow(ctx, `SELECT ce.slug FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id
			WHERE c.id = $1::uuid`, cluster).Scan(&slug); err != nil {
			t.Fatal(err)
		}
		return slug
	}
	if got := cellOf(first.ClusterID); got != "idle" {
		t.Fatalf("bootstrap placed on %s, want idle (0/2 before busy 1/2)", got)
	}
	// Fill every cell: a restart must not need room for the cluster it has.
	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.cells SET capacity_slots = used_slots`); err != nil {
		t.Fatal(err)
	}
	again, err := Bootstrap(ctx, pool, cfg)
	if err != nil || again.ClusterID != first.ClusterID || cellOf(again.ClusterID) != "idle" {
		t.Fatalf("second bootstrap: %+v %v", again, err)
	}
	if _, err := Bootstrap(ctx, pool, BootstrapConfig{Tenant: "late", Plan: "dev"}); err == nil {
		t.Fatal("a new cluster was bootstrapped with every cell full")
	}
}
