package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvDatabaseURL names the environment variable that holds the control-plane
// database URL when no flag gives it. The Caddyfile of a gateway reads the
// same variable, so the commands and the gateway agree by default.
const EnvDatabaseURL = "QUEENGATE_DATABASE_URL"

// ApplicationName is the application_name the commands connect with, so
// operators can tell them apart in pg_stat_activity.
const ApplicationName = "queengate-cli"

// DB is what the functions of this package query through: a *pgxpool.Pool,
// a *pgx.Conn or a pgx.Tx. Functions that make several changes run them in
// one transaction started with Begin (a savepoint inside a pgx.Tx).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Connect opens a small pool on the database at url and checks that the
// database answers. connectTimeout bounds each connection attempt when the
// URL sets none (0 means 10 s). The caller closes the pool.
func Connect(ctx context.Context, url string, connectTimeout time.Duration) (*pgxpool.Pool, error) {
	if strings.TrimSpace(url) == "" {
		return nil, errorf(Invalid, "no database URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &Error{Kind: Invalid, Msg: "invalid database URL: " + parseProblem(err), Err: err}
	}
	if connectTimeout <= 0 {
		connectTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	}
	cfg.MaxConns = 2
	where := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		where = cfg.ConnConfig.Host // a Unix socket directory
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &Error{Kind: Invalid, Msg: "invalid database URL: " + err.Error(), Err: err}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &Error{Kind: Unavailable, Msg: fmt.Sprintf("cannot reach the database at %s: no answer in time", where), Err: err}
		}
		return nil, &Error{Kind: Unavailable, Msg: fmt.Sprintf("cannot reach the database at %s: %s", where, rootCause(err)), Err: err}
	}
	return pool, nil
}

// parseProblem extracts the reason from a pgx configuration parse error
// without repeating the URL (which may hold a password).
func parseProblem(err error) string {
	msg := rootCause(err)
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	return msg
}

// inTx runs fn in a transaction on db (a savepoint when db is a
// transaction) and commits when fn succeeds.
func inTx(ctx context.Context, db DB, what string, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return dbError(what, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return dbError(what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError(what, err)
	}
	return nil
}
