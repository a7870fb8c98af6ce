package leader

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PgStore keeps the lease in queen_proxy.gateway_leases through the
// control-plane SQL functions.
type PgStore struct{ Pool *pgxpool.Pool }

// Acquire calls queen_proxy.acquire_gateway_lease.
func (s PgStore) Acquire(ctx context.Context, group, holder string, ttl time.Duration, mayTake bool) (Lease, error) {
	var l Lease
	err := s.Pool.QueryRow(ctx, `SELECT holder, epoch, taken_over FROM queen_proxy.acquire_gateway_lease($1, $2, $3, $4)`,
		group, holder, int32(ttl/time.Millisecond), mayTake).Scan(&l.Holder, &l.Epoch, &l.TakenOver)
	if err != nil {
		return Lease{}, fmt.Errorf("acquire gateway lease %q: %w", group, err)
	}
	return l, nil
}

// Release calls queen_proxy.release_gateway_lease.
func (s PgStore) Release(ctx context.Context, group, holder string) error {
	if _, err := s.Pool.Exec(ctx, `SELECT queen_proxy.release_gateway_lease($1, $2)`, group, holder); err != nil {
		return fmt.Errorf("release gateway lease %q: %w", group, err)
	}
	return nil
}
