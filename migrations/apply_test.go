package migrations

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
)

func recorded(t *testing.T, url string) []string {
	t.Helper()
	pool := pgtest.PoolFor(t, url)
	rows, err := pool.Query(ctxT(t), "SELECT name FROM queen_proxy.schema_migrations ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func TestApplyTwiceIsNoop(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	ctx := ctxT(t)
	applied, err := Apply(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(applied, ",") != strings.Join(Names(), ",") {
		t.Fatalf("first Apply applied %v, want %v", applied, Names())
	}
	if got := recorded(t, url); strings.Join(got, ",") != strings.Join(Names(), ",") {
		t.Fatalf("schema_migrations = %v", got)
	}
	again, err := Apply(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Apply = %v, %v; want nothing applied", again, err)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.plans"); n != 4 {
		t.Fatalf("%d plans after two Apply calls, want 4", n)
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"); n != 0 {
		t.Fatalf("%d advisory locks still held after Apply", n)
	}
}

func TestApplyConcurrently(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const callers = 4
	pools := make([]*pgxpool.Pool, callers)
	for i := range pools {
		pools[i] = pgtest.PoolFor(t, url)
	}
	var wg sync.WaitGroup
	results := make([][]string, callers)
	errs := make([]error, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = Apply(context.Background(), pools[i])
		}(i)
	}
	wg.Wait()
	total := 0
	for i := range errs {
		if errs[i] != nil {
			t.Errorf("caller %d: %v", i, errs[i])
		}
		total += len(results[i])
	}
	if total != len(Names()) {
		t.Fatalf("callers applied %d migrations in total, want each of the %d exactly once: %v", total, len(Names()), results)
	}
	if got := recorded(t, url); len(got) != len(Names()) {
		t.Fatalf("schema_migrations = %v", got)
	}
}

func TestApplySkipsRecordedNames(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	exec(t, pool, bootstrapSQL)
	for _, n := range Names() {
		exec(t, pool, "INSERT INTO queen_proxy.schema_migrations (name) VALUES ($1)", n)
	}
	applied, err := Apply(ctxT(t), pool)
	if err != nil || len(applied) != 0 {
		t.Fatalf("Apply = %v, %v; want nothing applied", applied, err)
	}
	if scalar[bool](t, pool, "SELECT to_regclass('queen_proxy.tenants') IS NOT NULL") {
		t.Fatal("a recorded migration ran anyway")
	}
}

func TestApplyResumesAfterPartialHistory(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	ctx := ctxT(t)
	// Simulate a database migrated by an older release that knew only 001-005.
	ms, _ := load()
	exec(t, pool, bootstrapSQL)
	for _, m := range ms[:5] {
		exec(t, pool, m.sql)
		exec(t, pool, "INSERT INTO queen_proxy.schema_migrations (name) VALUES ($1)", m.name)
	}
	applied, err := Apply(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(applied, ",") != strings.Join(Names()[5:], ",") {
		t.Fatalf("applied %v, want %v", applied, Names()[5:])
	}
}

func TestApplyFailureNamesMigrationAndRollsBack(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	// A foreign cells table (integer ids) makes 001_init fail part-way, when
	// clusters references it.
	exec(t, pool, "CREATE SCHEMA queen_proxy; CREATE TABLE queen_proxy.cells (id int PRIMARY KEY)")
	applied, err := Apply(ctxT(t), pool)
	if err == nil {
		t.Fatal("Apply succeeded on a conflicting schema")
	}
	t.Logf("Apply error: %v", err)
	if len(applied) != 0 || !strings.Contains(err.Error(), "001_init") {
		t.Fatalf("Apply = %v, %v; want an error naming 001_init", applied, err)
	}
	if got := recorded(t, url); len(got) != 0 {
		t.Fatalf("schema_migrations = %v after a failed migration", got)
	}
	if scalar[bool](t, pool, "SELECT to_regclass('queen_proxy.tenants') IS NOT NULL") {
		t.Fatal("a failed migration left tables behind")
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"); n != 0 {
		t.Fatalf("%d advisory locks still held after a failed Apply", n)
	}
}
