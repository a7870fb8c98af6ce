package controlplane

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/migrations"
)

// Migration is what Migrate did.
type Migration struct {
	// Applied are the migrations applied by this call, in order; empty when
	// the database was already current.
	Applied []string `json:"applied"`
	// Known are all the migrations this binary embeds.
	Known []string `json:"known"`
}

// Migrate applies the embedded migrations that the database lacks, under
// the same advisory lock a starting gateway takes.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (Migration, error) {
	applied, err := migrations.Apply(ctx, pool)
	m := Migration{Applied: nonNil(applied), Known: migrations.Names()}
	if err != nil {
		e := dbError("migrate", err)
		var own *Error
		if errors.As(e, &own) && own.Kind == Unavailable {
			return m, e
		}
		return m, &Error{Kind: Failed, Msg: err.Error(), Err: err}
	}
	return m, nil
}
