package tenancy

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestOperatorBitChangeReachesTheCacheAtOnce wires an IdentityCache to the
// invalidation listener the way the gateway does and measures how long a
// grant or a withdrawal of the operator bit (set_operator, what `caddy
// queen user operator on|off` calls) takes to reach a cache that holds the
// old answer for its whole 30 s TTL, next to a role change for comparison.
// It prints the figures; it fails only when an answer outlives 10 s, which
// the TTL alone would not prevent.
func TestOperatorBitChangeReachesTheCacheAtOnce(t *testing.T) {
	s := seed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids := NewIdentityCache(NewStore(s.pool), IdentityCacheConfig{}, nil)
	l := &InvalidationListener{
		ConnString:       s.pool.Config().ConnString(),
		OnCluster:        ids.InvalidateCluster,
		OnConnected:      ids.InvalidateAll,
		OnSessionRevoked: ids.InvalidateUsers,
	}
	go l.Run(ctx)
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready within 10s")
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var userID string
	if err := s.pool.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, 'ops@acme.test', NULL, 'local')::text`, s.tenantID).Scan(&userID); err != nil {
		t.Fatal(err)
	}
	exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'ops@acme.test', 'viewer')`, s.clusterID)

	// until polls check and returns how long after the change it held.
	until := func(what string, check func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !check() {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: the cache still held the old answer after 10s", what)
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	var report []string
	for _, step := range []struct {
		what string
		sql  string
		want bool
	}{
		{"grant", `SELECT queen_proxy.set_operator('ops@acme.test', true)`, true},
		{"withdrawal", `SELECT queen_proxy.set_operator('ops@acme.test', false)`, false},
		{"grant again", `SELECT queen_proxy.set_operator('ops@acme.test', true)`, true},
		{"withdrawal again", `SELECT queen_proxy.set_operator('ops@acme.test', false)`, false},
	} {
		if ids.IsOperator(ctx, userID) == step.want {
			t.Fatalf("%s: the cache already answers %v", step.what, step.want)
		}
		exec(step.sql)
		took := until(step.what, func() bool { return ids.IsOperator(ctx, userID) == step.want })
		report = append(report, fmt.Sprintf("operator %s %v", step.what, took.Round(10*time.Microsecond)))
	}
	for _, role := range []string{"admin", "viewer"} {
		if r, err := ids.Role(ctx, userID, s.clusterID); err != nil || r == ParseRole(role) {
			t.Fatalf("role before the change to %s: %v %v", role, r, err)
		}
		exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'ops@acme.test', $2)`, s.clusterID, role)
		took := until("role "+role, func() bool {
			r, err := ids.Role(ctx, userID, s.clusterID)
			return err == nil && r == ParseRole(role)
		})
		report = append(report, fmt.Sprintf("role to %s %v", role, took.Round(10*time.Microsecond)))
	}
	t.Logf("reached the cache (30s TTL) after: %v", report)
}
