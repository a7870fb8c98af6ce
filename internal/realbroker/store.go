package realbroker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CountMessages returns how many messages the broker has stored in queue
// (all partitions), read from its database.
func (b *Broker) CountMessages(t testing.TB, queue string) int {
	t.Helper()
	return b.queryInt(t, `
		SELECT count(*) FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue)
}

// CountAllMessages returns how many messages the broker has stored in all
// queues.
func (b *Broker) CountAllMessages(t testing.TB) int {
	t.Helper()
	return b.queryInt(t, `SELECT count(*) FROM queen.messages`)
}

// Queues returns the names of the queues the broker has stored, sorted.
func (b *Broker) Queues(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := b.storePool(t).Query(ctx, `SELECT name FROM queen.queues ORDER BY name`)
	if err != nil {
		t.Fatalf("realbroker: list queues: %v", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatalf("realbroker: list queues: %v", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("realbroker: list queues: %v", err)
	}
	return names
}

func (b *Broker) queryInt(t testing.TB, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := b.storePool(t).QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("realbroker: %s: %v", sql, err)
	}
	return n
}

// storePool is one pool on the broker's database for the helpers, so that
// calling them often opens no new pools; it closes when the broker stops.
func (b *Broker) storePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	b.storeMu.Lock()
	defer b.storeMu.Unlock()
	if b.store == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, b.DatabaseURL)
		if err != nil {
			t.Fatalf("realbroker: pool on the broker's database: %v", err)
		}
		b.store = pool
	}
	return b.store
}

func (b *Broker) closeStore() {
	b.storeMu.Lock()
	defer b.storeMu.Unlock()
	if b.store != nil {
		b.store.Close()
		b.store = nil
	}
}
