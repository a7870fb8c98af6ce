package tenancy

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStoreIdentityQueries(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	store := NewStore(s.pool)
	var user, gone string
	for _, q := range []struct {
		sql  string
		dest *string
	}{
		{`SELECT queen_proxy.create_user($1::uuid, 'ops@acme.test', NULL, 'local')::text`, &user},
		{`SELECT queen_proxy.create_user($1::uuid, 'gone@acme.test', NULL, 'local')::text`, &gone},
	} {
		if err := s.pool.QueryRow(ctx, q.sql, s.tenantID).Scan(q.dest); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := store.RoleOnCluster(ctx, user, s.clusterID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no role yet: %v", err)
	}
	exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'ops@acme.test', 'producer')`, s.clusterID)
	if r, err := store.RoleOnCluster(ctx, user, s.clusterID); err != nil || r != RoleProducer {
		t.Fatalf("role = %v, %v", r, err)
	}
	if _, err := store.RoleOnCluster(ctx, "not-a-uuid", s.clusterID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("malformed user id: %v", err)
	}

	if exists, op, err := store.UserStanding(ctx, user); err != nil || !exists || op {
		t.Fatalf("standing = %v %v %v", exists, op, err)
	}
	exec(`SELECT queen_proxy.set_operator('ops@acme.test', true)`)
	if _, op, _ := store.UserStanding(ctx, user); !op {
		t.Fatal("operator bit not read")
	}
	exec(`DELETE FROM queen_proxy.users WHERE id = $1::uuid`, gone)
	if exists, _, err := store.UserStanding(ctx, gone); err != nil || exists {
		t.Fatalf("deleted user standing = %v %v", exists, err)
	}
	if exists, _, err := store.UserStanding(ctx, "x"); err != nil || exists {
		t.Fatalf("malformed user standing = %v %v", exists, err)
	}

	if r, err := store.AnyRevoked(ctx, []string{"jti-1", "sid-1"}); err != nil || r {
		t.Fatalf("nothing revoked yet: %v %v", r, err)
	}
	exec(`SELECT queen_proxy.revoke_session('sid-1', now() + interval '1 hour', 'user', $1::uuid)`, user)
	if r, err := store.AnyRevoked(ctx, []string{"jti-1", "sid-1"}); err != nil || !r {
		t.Fatalf("revoked session not seen: %v %v", r, err)
	}
}

func TestStoreRefusesExpiredKeys(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	store := NewStore(s.pool)
	k, err := store.APIKeyByHash(ctx, HashAPIKey(s.keyPlain))
	if err != nil || !k.ExpiresAt.IsZero() || k.Scopes != ScopeSet(ScopeProduce|ScopeRead) {
		t.Fatalf("key %+v, %v", k, err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.set_api_key_expiry($1::uuid, $2)`, s.keyID, later); err != nil {
		t.Fatal(err)
	}
	k, err = store.APIKeyByHash(ctx, HashAPIKey(s.keyPlain))
	if err != nil || !k.ExpiresAt.Equal(later) || k.Expired(time.Now()) || !k.Expired(later) {
		t.Fatalf("key with a future expiry %+v, %v", k, err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.set_api_key_expiry($1::uuid, now() - interval '1 second')`, s.keyID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.APIKeyByHash(ctx, HashAPIKey(s.keyPlain)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired key: %v", err)
	}
}

func TestKeyToucherWritesInOneBatch(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	var second string
	if err := s.pool.QueryRow(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, 'k2', $2, ARRAY['read'])::text`,
		s.clusterID, HashAPIKey("qk_live_second_key")).Scan(&second); err != nil {
		t.Fatal(err)
	}
	kt := NewKeyToucher(s.pool, time.Second, nil)
	for range 100 {
		kt.Touch(s.keyID)
	}
	kt.Touch(second)
	if kt.Pending() != 2 {
		t.Fatalf("pending = %d, want 2 distinct keys", kt.Pending())
	}
	if err := kt.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queen_proxy.api_keys WHERE last_used_at > now() - interval '1 minute'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("touched keys = %d, %v", n, err)
	}
	if kt.Pending() != 0 {
		t.Fatal("flushed keys still pending")
	}
	// A failed write keeps the ids for the next attempt.
	kt.Touch(s.keyID)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := kt.Flush(cancelled); err == nil || kt.Pending() != 1 {
		t.Fatalf("failed flush: err %v, pending %d", err, kt.Pending())
	}
}
