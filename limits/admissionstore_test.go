package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

var (
	limitsMigrateOnce sync.Once
	limitsMigrateErr  error
)

// limitsDB returns a pool on the package database with the schema applied.
func limitsDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	limitsMigrateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, limitsMigrateErr = migrations.Apply(ctx, pool)
	})
	if limitsMigrateErr != nil {
		t.Fatalf("migrations: %v", limitsMigrateErr)
	}
	return pool
}

func limitsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func limitsSlug(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// newTestCluster inserts a tenant, a cell, a plan and a cluster, and returns
// the cluster id.
func newTestCluster(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := limitsCtx(t)
	var id string
	err := pool.QueryRow(ctx, `
		WITH t AS (INSERT INTO queen_proxy.tenants (slug, name) VALUES ($1, 'Tenant') RETURNING id),
		     ce AS (INSERT INTO queen_proxy.cells (slug, region, base_url, class)
		            VALUES ($2, 'local', 'http://127.0.0.1:1', 'shared') RETURNING id),
		     p AS (INSERT INTO queen_proxy.plans (code, cell_class) VALUES ($3, 'shared') RETURNING id)
		INSERT INTO queen_proxy.clusters (tenant_id, cell_id, plan_id, slug)
		SELECT t.id, ce.id, p.id, $4 FROM t, ce, p RETURNING id::text`,
		limitsSlug("t"), limitsSlug("cell"), limitsSlug("plan"), limitsSlug("c")).Scan(&id)
	if err != nil {
		t.Fatalf("cluster fixture: %v", err)
	}
	return id
}

// liveRows returns a cluster's live rows as name -> count.
func liveRows(t *testing.T, pool *pgxpool.Pool, cluster string) map[string]int {
	t.Helper()
	rows, err := (&PgAdmissionStore{Pool: pool}).LoadQueues(limitsCtx(t), cluster)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.Name] = r.Partitions
	}
	return out
}

// countingStore counts the statements a store runs.
type countingStore struct {
	inner      *PgAdmissionStore
	statements atomic.Int64
}

func (s *countingStore) LoadQueues(ctx context.Context, id string) ([]QueueRow, error) {
	s.statements.Add(1)
	return s.inner.LoadQueues(ctx, id)
}

func (s *countingStore) PersistQueues(ctx context.Context, rows []QueueRow) error {
	s.statements.Add(1)
	return s.inner.PersistQueues(ctx, rows)
}

func (s *countingStore) SweepQueues(ctx context.Context, id string, live []string) error {
	s.statements.Add(1)
	return s.inner.SweepQueues(ctx, id, live)
}

func TestPgAdmissionExactAtCapAfterRestart(t *testing.T) {
	pool := limitsDB(t)
	cluster := newTestCluster(t, pool)
	store := &PgAdmissionStore{Pool: pool}
	lim := capsQP(2, 3)
	ctx := limitsCtx(t)

	a := NewAdmission(store)
	wantAdmit(t, a, cluster, lim, Admitted, "orders", "Default") // /configure
	wantAdmit(t, a, cluster, lim, Admitted, "orders", "p1", "orders", "p2", "orders", "p3")
	wantAdmit(t, a, cluster, lim, OverPartitions, "orders", "p4")
	wantAdmit(t, a, cluster, lim, Admitted, "audit", "Default")
	wantAdmit(t, a, cluster, lim, OverQueues, "third", "Default")
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); got["orders"] != 3 || got["audit"] != 0 || len(got) != 2 {
		t.Fatalf("rows %v", got)
	}

	// Restart: a new registry over the same database. Every existing
	// partition of the queue at its cap works, Default too; a new one and a
	// new queue are refused.
	b := NewAdmission(store)
	wantAdmit(t, b, cluster, lim, Admitted, "orders", "p3")
	wantAdmit(t, b, cluster, lim, Admitted, "orders", "Default", "orders", "p1", "orders", "p2")
	wantAdmit(t, b, cluster, lim, OverPartitions, "orders", "p4")
	wantAdmit(t, b, cluster, lim, OverQueues, "third", "Default")
	wantAdmit(t, b, cluster, lim, Admitted, "audit", "Default")
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); got["orders"] != 3 {
		t.Fatalf("count after restart %v, want orders=3 (not inflated)", got)
	}

	// A second restart behaves the same (the count did not ratchet).
	c := NewAdmission(store)
	wantAdmit(t, c, cluster, lim, Admitted, "orders", "p1", "orders", "p2", "orders", "p3")
	wantAdmit(t, c, cluster, lim, OverPartitions, "orders", "p5")
}

func TestPgPersistQueues(t *testing.T) {
	pool := limitsDB(t)
	cluster := newTestCluster(t, pool)
	store := &PgAdmissionStore{Pool: pool}
	ctx := limitsCtx(t)
	gone := "33333333-3333-4333-8333-333333333333" // no such cluster
	err := store.PersistQueues(ctx, []QueueRow{
		{ClusterID: cluster, Name: "a", Partitions: 5},
		{ClusterID: cluster, Name: "b", Partitions: math.MaxInt32 + 10},
		{ClusterID: cluster, Name: "c", Partitions: -4},
		{ClusterID: gone, Name: "a", Partitions: 1},
		{ClusterID: "not-a-uuid", Name: "a", Partitions: 1},
		{ClusterID: cluster, Name: " ", Partitions: 1},
	})
	if err != nil {
		t.Fatalf("one bad row failed the batch: %v", err)
	}
	got := liveRows(t, pool, cluster)
	if got["a"] != 5 || got["b"] != math.MaxInt32 || got["c"] != 0 || len(got) != 3 {
		t.Fatalf("rows %v", got)
	}
	// GREATEST: a lower count never lowers the row.
	if err := store.PersistQueues(ctx, []QueueRow{{ClusterID: cluster, Name: "a", Partitions: 2}, {ClusterID: cluster, Name: "c", Partitions: 7}}); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); got["a"] != 5 || got["c"] != 7 {
		t.Fatalf("rows %v", got)
	}
	// Sweep, then a queue of the same name comes back as a new live row.
	if err := store.SweepQueues(ctx, cluster, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); len(got) != 1 || got["b"] != math.MaxInt32 {
		t.Fatalf("after sweep %v", got)
	}
	if err := store.PersistQueues(ctx, []QueueRow{{ClusterID: cluster, Name: "a", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); got["a"] != 1 {
		t.Fatalf("recreated %v", got)
	}
	var tombstones int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.queues WHERE cluster_id = $1 AND deleted_at IS NOT NULL`, cluster).Scan(&tombstones); err != nil {
		t.Fatal(err)
	}
	if tombstones != 2 {
		t.Fatalf("tombstones = %d, want 2", tombstones)
	}
	// An empty live list sweeps everything; odd ids are no-ops.
	if err := store.SweepQueues(ctx, cluster, nil); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); len(got) != 0 {
		t.Fatalf("after empty sweep %v", got)
	}
	if rows, err := store.LoadQueues(ctx, "not-a-uuid"); err != nil || rows != nil {
		t.Fatalf("non-uuid load: %v %v", rows, err)
	}
	if err := store.SweepQueues(ctx, "not-a-uuid", nil); err != nil {
		t.Fatal(err)
	}
	if err := store.PersistQueues(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestPgAdmissionReconcileSweepsAndInvalidateFrees(t *testing.T) {
	pool := limitsDB(t)
	cluster := newTestCluster(t, pool)
	store := &PgAdmissionStore{Pool: pool}
	ctx := limitsCtx(t)
	lim := capsQP(2, Unlimited)
	a := NewAdmission(store)
	wantAdmit(t, a, cluster, lim, Admitted, "q1", "Default", "q2", "Default")
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The broker lost q1 (deleted through the broker's own API).
	a.Reconcile(cluster, []QueueRow{{ClusterID: cluster, Name: "q2", Partitions: 1}})
	a.Reconcile(cluster, []QueueRow{{ClusterID: cluster, Name: "q2", Partitions: 1}})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, pool, cluster); len(got) != 1 || got["q2"] != 0 {
		t.Fatalf("rows after sweep %v", got)
	}
	wantAdmit(t, a, cluster, lim, Admitted, "q3", "Default")
	wantAdmit(t, a, cluster, lim, OverQueues, "q4", "Default")
	// The console soft-deletes q2 and notifies: the slot is free at once.
	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.queues SET deleted_at = now() WHERE cluster_id = $1 AND name = 'q2'`, cluster); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil { // q3 reaches the table first
		t.Fatal(err)
	}
	a.Invalidate(cluster)
	wantAdmit(t, a, cluster, lim, Admitted, "q4", "Default")
}

// TestAdmissionStatementsPer1000Pushes measures the database statements the
// registry costs: 1,000 pushes of 5 items each over 200 distinct partitions
// (of 4 queues), the persister flushing every 100 pushes (a push rate of 100
// per second), then 1,000 more once warm.
func TestAdmissionStatementsPer1000Pushes(t *testing.T) {
	pool := limitsDB(t)
	cluster := newTestCluster(t, pool)
	store := &countingStore{inner: &PgAdmissionStore{Pool: pool}}
	a := NewAdmission(store)
	lim := capsQP(10, 100)
	ctx := limitsCtx(t)
	push := func(i int) {
		var b ProduceBatch
		b.reset()
		for j := 0; j < 5; j++ {
			p := (i*5 + j) % 200
			b.addPair([]byte(fmt.Sprintf("queue-%d", p%4)), []byte(fmt.Sprintf("partition-%d", p)))
		}
		if res, _, err := a.Admit(ctx, cluster, b.Pairs, lim); res != Admitted || err != nil {
			t.Fatalf("push %d: %v %v", i, res, err)
		}
	}
	run := func() int64 {
		before := store.statements.Load()
		for i := 0; i < 1000; i++ {
			push(i)
			if (i+1)%100 == 0 {
				if err := a.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		return store.statements.Load() - before
	}
	cold := run()
	warm := run()
	t.Logf("database statements per 1,000 pushes over 200 partitions: cold %d (1 load + 1 upsert of 4 rows), warm %d", cold, warm)
	if cold > 2 || warm > 1 {
		t.Fatalf("statements: cold %d, warm %d", cold, warm)
	}
	if got := liveRows(t, pool, cluster); len(got) != 4 || got["queue-0"] != 50 {
		t.Fatalf("rows %v", got)
	}
}

func BenchmarkAdmitKnownPairs(b *testing.B) {
	a := NewAdmission(newMemStore())
	lim := capsQP(100, 1000)
	ps := pairs("orders", "customer-0", "orders", "customer-1", "orders", "customer-2", "orders", "customer-3")
	ctx := context.Background()
	if res, _, _ := a.Admit(ctx, clA, ps, lim); res != Admitted {
		b.Fatal(res)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, _, _ := a.Admit(ctx, clA, ps, lim); res != Admitted {
				b.Fatal(res)
			}
		}
	})
}

// Gateways persist the same queues at once, each in its own order: every
// write lands, and none fails on a deadlock.
func TestPgPersistQueuesOfGatewaysAtOnce(t *testing.T) {
	pool := limitsDB(t)
	cluster := newTestCluster(t, pool)
	store := &PgAdmissionStore{Pool: pool}
	const gateways, queues, rounds = 4, 300, 6
	for round := range rounds {
		errs := make(chan error, gateways)
		for g := range gateways {
			rows := make([]QueueRow, queues)
			for q := range queues {
				i := q
				if g%2 == 1 {
					i = queues - 1 - q // the other order
				}
				rows[q] = QueueRow{ClusterID: cluster, Name: fmt.Sprintf("q%03d", (i+g*37)%queues), Partitions: round*gateways + g}
			}
			go func() { errs <- store.PersistQueues(limitsCtx(t), rows) }()
		}
		for range gateways {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a gateway's write beside the others failed: %v", round, err)
			}
		}
	}
	got := liveRows(t, pool, cluster)
	if want := (rounds-1)*gateways + gateways - 1; len(got) != queues || got["q000"] != want || got["q299"] != want {
		t.Fatalf("%d rows, q000=%d q299=%d; want %d rows at %d", len(got), got["q000"], got["q299"], queues, want)
	}
}
