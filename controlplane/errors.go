package controlplane

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Kind says why an operation failed, which decides how a command reports it
// and with which exit code.
type Kind int

// The kinds of failure. Invalid, NotFound, Taken, CrossTenant, WrongState
// and NotMigrated mean the request itself cannot succeed as given; retrying
// it unchanged is pointless. Unavailable and Failed mean the database did not
// do its part; a retry may succeed.
const (
	// Invalid is a malformed argument or a combination the operation refuses
	// (SQLSTATE 22023 and the other data and constraint errors).
	Invalid Kind = iota + 1
	// NotFound is an unknown tenant, cluster, cell, plan, user, key or grant
	// (SQLSTATE P0002).
	NotFound
	// Taken is a slug, code or e-mail that already exists (SQLSTATE 23505).
	Taken
	// CrossTenant is a grant between a user and a cluster of different
	// tenants (SQLSTATE 42501).
	CrossTenant
	// WrongState is an object whose lifecycle status forbids the operation,
	// such as deleting a tenant that is not 'deleting' (SQLSTATE 55000) or
	// placing a cluster on a draining cell.
	WrongState
	// NotMigrated is a database without the queen_proxy schema or with an
	// older one than this binary needs.
	NotMigrated
	// Unavailable is a database that could not be reached, refused the
	// connection or did not answer in time.
	Unavailable
	// Failed is any other database error.
	Failed
)

// String names the kind for logs and tests.
func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not found"
	case Taken:
		return "taken"
	case CrossTenant:
		return "cross-tenant"
	case WrongState:
		return "wrong state"
	case NotMigrated:
		return "not migrated"
	case Unavailable:
		return "unavailable"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is the error every function of this package returns. Msg is a
// complete, one-line sentence fragment meant for an operator, such as
// `tenant slug "acme" is already taken`; Err, when set, is the underlying
// cause.
type Error struct {
	Kind Kind
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, or Failed when err is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Failed
}

func errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// takenNouns names, per unique constraint of the schema, what an operator
// calls the value that collided.
var takenNouns = map[string]string{
	"tenants_slug_key":           "tenant slug",
	"clusters_slug_key":          "cluster slug",
	"cells_slug_key":             "cell slug",
	"users_email_key":            "user e-mail",
	"plans_code_key":             "plan code",
	"api_keys_key_hash_key":      "API key hash",
	"webhook_endpoints_name_key": "webhook endpoint name",
}

// uniqueDetail matches PostgreSQL's detail of a unique violation:
// Key (slug)=(acme) already exists.
var uniqueDetail = regexp.MustCompile(`^Key \((.+)\)=\((.*)\) already exists\.$`)

// functionPrefix matches the "function_name: " that the SQL functions put in
// front of every message they raise.
var functionPrefix = regexp.MustCompile(`^[a-z_]+: `)

// dbError turns an error from the database into an *Error. what names the
// operation for messages about unexpected failures ("create tenant").
func dbError(what string, err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pgError(what, pg)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &Error{Kind: Unavailable, Msg: "the database did not answer in time (" + what + ")", Err: err}
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || isConnectionLoss(err) {
		return &Error{Kind: Unavailable, Msg: "lost the database connection during " + what + ": " + rootCause(err), Err: err}
	}
	return &Error{Kind: Failed, Msg: what + ": " + err.Error(), Err: err}
}

// isConnectionLoss reports errors of a connection that broke mid-way.
func isConnectionLoss(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset")
}

func pgError(what string, pg *pgconn.PgError) *Error {
	msg := functionPrefix.ReplaceAllString(pg.Message, "")
	switch {
	case pg.Code == "23505":
		if noun, ok := takenNouns[pg.ConstraintName]; ok {
			if m := uniqueDetail.FindStringSubmatch(pg.Detail); m != nil {
				return &Error{Kind: Taken, Msg: fmt.Sprintf("%s %q is already taken", noun, m[2]), Err: pg}
			}
			return &Error{Kind: Taken, Msg: noun + " is already taken", Err: pg}
		}
		return &Error{Kind: Taken, Msg: msg, Err: pg}
	case pg.Code == "P0002":
		return &Error{Kind: NotFound, Msg: msg, Err: pg}
	case pg.Code == "42501":
		return &Error{Kind: CrossTenant, Msg: msg, Err: pg}
	case pg.Code == "55000":
		return &Error{Kind: WrongState, Msg: msg, Err: pg}
	case pg.Code == "42P01" || pg.Code == "3F000" || pg.Code == "42883" || pg.Code == "42703":
		return &Error{Kind: NotMigrated, Msg: "the database lacks the queen_proxy schema this command needs (" +
			pg.Message + "); run `caddy queen migrate` first", Err: pg}
	case strings.HasPrefix(pg.Code, "22") || strings.HasPrefix(pg.Code, "23"):
		return &Error{Kind: Invalid, Msg: msg, Err: pg}
	case strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "57P") || strings.HasPrefix(pg.Code, "53") ||
		pg.Code == "28000" || pg.Code == "28P01" || pg.Code == "3D000":
		return &Error{Kind: Unavailable, Msg: "the database refused " + what + ": " + pg.Message, Err: pg}
	}
	return &Error{Kind: Failed, Msg: fmt.Sprintf("%s: %s (SQLSTATE %s)", what, pg.Message, pg.Code), Err: pg}
}

// rootCause returns the message of the innermost error of a chain, which for
// a failed connection is the useful part ("connection refused").
func rootCause(err error) string {
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
