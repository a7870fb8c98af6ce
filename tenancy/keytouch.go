package tenancy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// KeyToucher records that API keys were used and writes their last_used_at
// in one statement per interval, so using a key costs the database nothing
// on the request path.
type KeyToucher struct {
	pool     *pgxpool.Pool
	interval time.Duration
	log      *zap.Logger

	mu      sync.Mutex
	touched map[string]struct{}
}

// NewKeyToucher returns a toucher that flushes every interval (at least 1 s;
// default 10 s).
func NewKeyToucher(pool *pgxpool.Pool, interval time.Duration, log *zap.Logger) *KeyToucher {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	interval = max(interval, time.Second)
	if log == nil {
		log = zap.NewNop()
	}
	return &KeyToucher{pool: pool, interval: interval, log: log, touched: map[string]struct{}{}}
}

// Touch notes one use of a key.
func (t *KeyToucher) Touch(keyID string) {
	if keyID == "" {
		return
	}
	t.mu.Lock()
	t.touched[keyID] = struct{}{}
	t.mu.Unlock()
}

// Pending reports how many keys wait for the next flush.
func (t *KeyToucher) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.touched)
}

// Flush writes last_used_at for every key touched since the last flush. A
// failed write puts the ids back for the next attempt.
func (t *KeyToucher) Flush(ctx context.Context) error {
	t.mu.Lock()
	if len(t.touched) == 0 {
		t.mu.Unlock()
		return nil
	}
	ids := make([]string, 0, len(t.touched))
	for id := range t.touched {
		ids = append(ids, id)
	}
	t.touched = map[string]struct{}{}
	t.mu.Unlock()

	_, err := t.pool.Exec(ctx, `UPDATE queen_proxy.api_keys SET last_used_at = now() WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		t.mu.Lock()
		for _, id := range ids {
			t.touched[id] = struct{}{}
		}
		t.mu.Unlock()
		return fmt.Errorf("touch %d api keys: %w", len(ids), err)
	}
	return nil
}

// Run flushes every interval until ctx ends, then once more with a short
// bound so a clean shutdown loses no touch.
func (t *KeyToucher) Run(ctx context.Context) {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := t.Flush(final); err != nil {
				t.log.Warn("api key last_used_at not written at shutdown", zap.Error(err))
			}
			cancel()
			return
		case <-tick.C:
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := t.Flush(fctx); err != nil {
				t.log.Warn("api key last_used_at not written; retrying next interval", zap.Error(err))
			}
			cancel()
		}
	}
}
