package controlplane

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fresh returns a pool on a new, migrated database and its URL.
func fresh(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := migrations.Apply(ctxT(t), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, url
}

// wantErr checks that err is an *Error of kind with exactly msg.
func wantErr(t *testing.T, err error, kind Kind, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Error %s %q", err, err, kind, msg)
	}
	if e.Kind != kind || e.Msg != msg {
		t.Fatalf("error %s %q, want %s %q", e.Kind, e.Msg, kind, msg)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func scalar[T any](t *testing.T, db DB, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// world is a cell, a tenant and a cluster on plan pro.
type world struct {
	cell    Cell
	tenant  Tenant
	cluster Cluster
}

func provision(t *testing.T, db DB) world {
	t.Helper()
	ctx := ctxT(t)
	var w world
	w.cell = must[Cell](t)(AddCell(ctx, db, NewCell{Slug: "eu1-a", Region: "eu1", BaseURL: "http://127.0.0.1:6632", Class: "shared"}))
	w.tenant = must[Tenant](t)(CreateTenant(ctx, db, "acme", "Acme Inc"))
	w.cluster = must[Cluster](t)(CreateCluster(ctx, db, NewCluster{Tenant: "acme", Slug: "acme-prod", Plan: "pro", Cell: "eu1-a"}))
	return w
}

// listener receives the cluster invalidations sent on url's database.
type listener struct {
	t    *testing.T
	conn *pgx.Conn
}

func listen(t *testing.T, url string) *listener {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctxT(t), "LISTEN "+migrations.InvalidationChannel); err != nil {
		t.Fatal(err)
	}
	return &listener{t: t, conn: conn}
}

// next returns the payload of the next notification, or "" when none comes
// within a second.
func (l *listener) next() string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return ""
	}
	return n.Payload
}
