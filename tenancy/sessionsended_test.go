package tenancy

import (
	"context"
	"testing"
	"time"
)

// endingIdentities is fakeIdentities that also knows when users' sessions
// were ended.
type endingIdentities struct {
	*fakeIdentities
	ended map[string]time.Time
}

func (f *endingIdentities) SessionsEndedAt(_ context.Context, u string) (time.Time, error) {
	f.calls++
	if f.down {
		return time.Time{}, errDown
	}
	return f.ended[u], nil
}

// TestIdentityCacheSessionEnded: a session issued before its user's
// sessions were ended is refused, one issued after is not; the answer is
// cached until the revocation notification drops it; a source that
// cannot tell fails open (closed when strict).
func TestIdentityCacheSessionEnded(t *testing.T) {
	src := &endingIdentities{fakeIdentities: newFakeIdentities(), ended: map[string]time.Time{}}
	now := time.Unix(10_000, 0)
	c := NewIdentityCache(src, IdentityCacheConfig{Now: func() time.Time { return now }}, nil)
	ctx := context.Background()
	before, after := now.Add(-time.Hour), now.Add(time.Second)
	if c.SessionEnded(ctx, "u1", before) {
		t.Fatal("no sessions were ended")
	}
	src.ended["u1"] = now
	if c.SessionEnded(ctx, "u1", before) {
		t.Fatal("a cached answer was not served")
	}
	c.InvalidateRevocations()
	if !c.SessionEnded(ctx, "u1", before) {
		t.Fatal("a session issued before the end was accepted")
	}
	if c.SessionEnded(ctx, "u1", after) || c.SessionEnded(ctx, "u1", now) {
		t.Fatal("a session issued at or after the end was refused")
	}
	if !c.SessionEnded(ctx, "u1", time.Time{}) {
		t.Fatal("a token without iat survived the end of its user's sessions")
	}
	if c.SessionEnded(ctx, "u2", before) {
		t.Fatal("another user's sessions were ended")
	}
	src.down = true
	if c.SessionEnded(ctx, "u3", before) {
		t.Fatal("database down: default must fail open")
	}
	strict := NewIdentityCache(src, IdentityCacheConfig{RevocationStrict: true}, nil)
	if !strict.SessionEnded(ctx, "u3", before) {
		t.Fatal("database down: strict must fail closed")
	}
	plain := NewIdentityCache(newFakeIdentities(), IdentityCacheConfig{}, nil)
	if plain.SessionEnded(ctx, "u1", before) {
		t.Fatal("a source that cannot tell ended a session")
	}
}

// TestStoreSessionsEndedAt: set_user_password (migration 020) ends the
// user's sessions; the store reads when.
func TestStoreSessionsEndedAt(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	store := NewStore(s.pool)
	var user string
	if err := s.pool.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, 'reset@acme.test', NULL, 'local')::text`,
		s.tenantID).Scan(&user); err != nil {
		t.Fatal(err)
	}
	if at, err := store.SessionsEndedAt(ctx, user); err != nil || !at.IsZero() {
		t.Fatalf("before any reset: %v %v", at, err)
	}
	before := time.Now().Add(-time.Second)
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, NULL)`, user); err != nil {
		t.Fatal(err)
	}
	at, err := store.SessionsEndedAt(ctx, user)
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("after a reset: %v %v", at, err)
	}
	for _, u := range []string{"not-a-uuid", "00000000-0000-4000-8000-000000000000"} {
		if at, err := store.SessionsEndedAt(ctx, u); err != nil || !at.IsZero() {
			t.Fatalf("user %q: %v %v", u, at, err)
		}
	}
}
