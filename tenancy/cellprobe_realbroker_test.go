//go:build realbroker

package tenancy

import (
	"context"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/realbroker"
)

// TestProbeRealBrokerIsUnscoped: the public broker 0.15.1 has no tenancy,
// and the probe says so, leaving no queue behind.
func TestProbeRealBrokerIsUnscoped(t *testing.T) {
	b := realbroker.Start(t)
	for i := 0; i < 3; i++ {
		got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{ID: "c", Slug: "real", BaseURL: b.URL}, "")
		if err != nil || got != ScopingUnscoped {
			t.Fatalf("probe %d of the real broker: %q (%v), want unscoped", i, got, err)
		}
	}
	pool := b.Pool(t)
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.queues WHERE name LIKE $1`, strings.ReplaceAll(ProbeQueuePrefix, "-", "_")+"%").Scan(&left); err != nil {
		t.Fatalf("read the broker's queues: %v", err)
	}
	if left != 0 {
		t.Fatalf("%d probe queues left on the real broker", left)
	}
}
