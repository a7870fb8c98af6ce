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

const leaseAttempt = `SELECT holder, epoch, holder_peer_url, expired, taken_over
	FROM queen_proxy.gateway_lease_attempt($1, $2, $3, $4, $5)`

// Renew calls queen_proxy.gateway_lease_attempt without an epoch to take.
func (s PgStore) Renew(ctx context.Context, group, holder string, ttl time.Duration, peerURL string) (Lease, error) {
	return s.attempt(ctx, group, holder, ttl, peerURL, nil)
}

// Take calls queen_proxy.gateway_lease_attempt with the epoch to take.
func (s PgStore) Take(ctx context.Context, group, holder string, ttl time.Duration, peerURL string, epoch int64) (Lease, error) {
	return s.attempt(ctx, group, holder, ttl, peerURL, &epoch)
}

func (s PgStore) attempt(ctx context.Context, group, holder string, ttl time.Duration, peerURL string, epoch *int64) (Lease, error) {
	var l Lease
	err := s.Pool.QueryRow(ctx, leaseAttempt, group, holder, int32(ttl/time.Millisecond), peerURL, epoch).
		Scan(&l.Holder, &l.Epoch, &l.PeerURL, &l.Expired, &l.TakenOver)
	if err != nil {
		return Lease{}, fmt.Errorf("gateway lease attempt %q: %w", group, err)
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
