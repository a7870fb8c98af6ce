package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// LockKey is the pg_advisory_lock key held while migrating, so that gateways
// starting together against one database migrate one after the other.
const LockKey int64 = 0x71676d6967726174 // "qgmigrat"

// migration is one embedded SQL file.
type migration struct {
	name string // file name without .sql, as recorded in schema_migrations
	sql  string
}

// load returns the embedded migrations ordered by name.
func load() ([]migration, error) {
	paths, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: list embedded files: %w", err)
	}
	sort.Strings(paths)
	out := make([]migration, 0, len(paths))
	for _, p := range paths {
		b, err := files.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", p, err)
		}
		out = append(out, migration{name: strings.TrimSuffix(p, ".sql"), sql: string(b)})
	}
	return out, nil
}

// Names returns the migration names in the order they are applied.
func Names() []string {
	ms, err := load()
	if err != nil {
		panic(err) // the files are compiled in; this cannot happen at run time
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return names
}

const bootstrapSQL = `
CREATE SCHEMA IF NOT EXISTS queen_proxy;
CREATE TABLE IF NOT EXISTS queen_proxy.schema_migrations (
    name       TEXT PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

// Apply brings the database up to date and returns the names of the
// migrations it applied (none when it was already current). It holds a
// session advisory lock (LockKey) on one connection for the whole run, so
// concurrent callers wait for each other and all succeed. Each migration runs
// in its own transaction together with the row that records it.
func Apply(ctx context.Context, pool *pgxpool.Pool) (applied []string, err error) {
	ms, err := load()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer conn.Release()

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", LockKey); err != nil {
		return nil, fmt.Errorf("migrations: take advisory lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", LockKey); uerr != nil {
			// The lock belongs to the session: ending the session frees it.
			_ = conn.Conn().Close(uctx)
			err = errors.Join(err, fmt.Errorf("migrations: release advisory lock: %w", uerr))
		}
	}()

	if _, err := conn.Exec(ctx, bootstrapSQL); err != nil {
		return nil, fmt.Errorf("migrations: create queen_proxy.schema_migrations: %w", err)
	}
	done := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT name FROM queen_proxy.schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrations: read queen_proxy.schema_migrations: %w", err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("migrations: read queen_proxy.schema_migrations: %w", err)
		}
		done[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read queen_proxy.schema_migrations: %w", err)
	}

	for _, m := range ms {
		if done[m.name] {
			continue
		}
		if err := applyOne(ctx, conn, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.name)
	}
	return applied, nil
}

// applyOne runs one migration and records it in a single transaction.
func applyOne(ctx context.Context, conn *pgxpool.Conn, m migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %s: begin: %w", m.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit
	// Without arguments pgx uses the simple protocol, which runs the whole
	// multi-statement file as one batch.
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return fmt.Errorf("migrations: %s: %w", m.name, err)
	}
	if _, err := tx.Exec(ctx,
		"INSERT INTO queen_proxy.schema_migrations (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", m.name); err != nil {
		return fmt.Errorf("migrations: %s: record: %w", m.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrations: %s: commit: %w", m.name, err)
	}
	return nil
}
