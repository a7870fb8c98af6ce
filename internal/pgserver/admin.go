package pgserver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates database name (owned by the superuser).
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	return s.adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// DropDatabase drops database name if it exists, disconnecting its sessions.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// adminExec runs one statement in the maintenance database.
func (s *Server) adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgserver: %s: %w", sql, err)
	}
	return nil
}
