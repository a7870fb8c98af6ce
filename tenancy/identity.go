package tenancy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/internal/uuidtext"
)

// IdentitySource answers the questions a human session raises on the
// request path; *Store is the production IdentitySource.
type IdentitySource interface {
	// RoleOnCluster returns the user's role on the cluster, or an error
	// wrapping ErrNotFound when the user has none.
	RoleOnCluster(ctx context.Context, userID, clusterID string) (Role, error)
	// UserStanding reports whether the user still exists and whether it
	// carries the operator bit.
	UserStanding(ctx context.Context, userID string) (exists, operator bool, err error)
	// AnyRevoked reports whether any of the token ids is on the deny-list.
	AnyRevoked(ctx context.Context, ids []string) (bool, error)
}

// SessionsEndedSource is an IdentitySource that also knows when a user's
// sessions were ended (a new password ends them): a session token issued
// before that is refused. *Store is one; a source that is not answers
// nothing of the kind.
type SessionsEndedSource interface {
	// SessionsEndedAt returns when the user's sessions were last ended,
	// or the zero time for never (or an unknown user).
	SessionsEndedAt(ctx context.Context, userID string) (time.Time, error)
}

// RoleOnCluster reads the user's cluster_roles row for the cluster.
func (s *Store) RoleOnCluster(ctx context.Context, userID, clusterID string) (Role, error) {
	if !uuidtext.ValidLower(userID) || !uuidtext.ValidLower(clusterID) {
		return RoleNone, fmt.Errorf("role of user %q on cluster %q: %w", userID, clusterID, ErrNotFound)
	}
	var role string
	err := s.pool.QueryRow(ctx, `SELECT role FROM queen_proxy.cluster_roles
		WHERE user_id = $1::uuid AND cluster_id = $2::uuid`, userID, clusterID).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return RoleNone, fmt.Errorf("role of user %s on cluster %s: %w", userID, clusterID, ErrNotFound)
	}
	if err != nil {
		return RoleNone, fmt.Errorf("role of user %s on cluster %s: %w", userID, clusterID, err)
	}
	r := ParseRole(role)
	if r == RoleNone {
		return RoleNone, fmt.Errorf("role of user %s on cluster %s: unknown role %q", userID, clusterID, role)
	}
	return r, nil
}

// UserStanding reads whether the user exists and is an operator.
func (s *Store) UserStanding(ctx context.Context, userID string) (exists, operator bool, err error) {
	if !uuidtext.ValidLower(userID) {
		return false, false, nil
	}
	err = s.pool.QueryRow(ctx, `SELECT is_operator FROM queen_proxy.users WHERE id = $1::uuid`, userID).Scan(&operator)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("standing of user %s: %w", userID, err)
	}
	return true, operator, nil
}

// SessionsEndedAt reads users.sessions_ended_at (migration 020). On a
// database without that column (not yet migrated) sessions were never
// ended.
func (s *Store) SessionsEndedAt(ctx context.Context, userID string) (time.Time, error) {
	if !uuidtext.ValidLower(userID) {
		return time.Time{}, nil
	}
	var at *time.Time
	err := s.pool.QueryRow(ctx, `SELECT sessions_ended_at FROM queen_proxy.users WHERE id = $1::uuid`, userID).Scan(&at)
	var pg *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pg) && pg.Code == "42703":
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("sessions of user %s: %w", userID, err)
	case at == nil:
		return time.Time{}, nil
	}
	return *at, nil
}

// AnyRevoked reports whether any id is in revoked_tokens.
func (s *Store) AnyRevoked(ctx context.Context, ids []string) (bool, error) {
	var revoked bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen_proxy.revoked_tokens WHERE jti = ANY($1))`, ids).Scan(&revoked)
	if err != nil {
		return false, fmt.Errorf("token deny-list lookup: %w", err)
	}
	return revoked, nil
}
