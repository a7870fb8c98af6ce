package tenancy

import (
	"context"
	"errors"
	"testing"
	"time"
)

type fakeIdentities struct {
	roles   map[roleKey]Role
	users   map[string]bool
	revoked map[string]bool
	down    bool
	calls   int
}

var errDown = errors.New("database down")

func (f *fakeIdentities) RoleOnCluster(_ context.Context, u, c string) (Role, error) {
	f.calls++
	if f.down {
		return RoleNone, errDown
	}
	if r, ok := f.roles[roleKey{u, c}]; ok {
		return r, nil
	}
	return RoleNone, ErrNotFound
}

func (f *fakeIdentities) UserStanding(_ context.Context, u string) (bool, bool, error) {
	f.calls++
	if f.down {
		return false, false, errDown
	}
	op, ok := f.users[u]
	return ok, op, nil
}

func (f *fakeIdentities) AnyRevoked(_ context.Context, ids []string) (bool, error) {
	f.calls++
	if f.down {
		return false, errDown
	}
	for _, id := range ids {
		if f.revoked[id] {
			return true, nil
		}
	}
	return false, nil
}

func newFakeIdentities() *fakeIdentities {
	return &fakeIdentities{
		roles:   map[roleKey]Role{{"u1", "c1"}: RoleConsumer},
		users:   map[string]bool{"u1": false, "op": true},
		revoked: map[string]bool{},
	}
}

func TestIdentityCacheRoles(t *testing.T) {
	src := newFakeIdentities()
	now := time.Unix(1000, 0)
	c := NewIdentityCache(src, IdentityCacheConfig{Now: func() time.Time { return now }}, nil)
	ctx := context.Background()
	if r, err := c.Role(ctx, "u1", "c1"); err != nil || r != RoleConsumer {
		t.Fatalf("role %v %v", r, err)
	}
	src.roles[roleKey{"u1", "c1"}] = RoleAdmin
	if r, _ := c.Role(ctx, "u1", "c1"); r != RoleConsumer {
		t.Fatal("a cached role was not served")
	}
	now = now.Add(31 * time.Second)
	if r, _ := c.Role(ctx, "u1", "c1"); r != RoleAdmin {
		t.Fatal("an expired role was served")
	}
	calls := src.calls
	for range 3 {
		if _, err := c.Role(ctx, "u1", "c2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("no role: %v", err)
		}
	}
	if src.calls != calls+3 {
		t.Fatal("a missing role was cached; grants must bite at once")
	}
	src.roles[roleKey{"u1", "c1"}] = RoleViewer
	c.InvalidateCluster("c1")
	if r, _ := c.Role(ctx, "u1", "c1"); r != RoleViewer {
		t.Fatal("InvalidateCluster kept the old role")
	}
	src.down = true
	c.InvalidateAll()
	if _, err := c.Role(ctx, "u1", "c1"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("database down: %v, want an unavailable error (refused)", err)
	}
}

func TestIdentityCacheOperatorAndUsers(t *testing.T) {
	src := newFakeIdentities()
	now := time.Unix(1000, 0)
	c := NewIdentityCache(src, IdentityCacheConfig{Now: func() time.Time { return now }}, nil)
	ctx := context.Background()
	if !c.IsOperator(ctx, "op") || c.IsOperator(ctx, "u1") || c.IsOperator(ctx, "nobody") {
		t.Fatal("operator bits")
	}
	src.users["u1"] = true
	if c.IsOperator(ctx, "u1") {
		t.Fatal("a cached 'no' was not served")
	}
	now = now.Add(31 * time.Second)
	if !c.IsOperator(ctx, "u1") {
		t.Fatal("an expired 'no' was served")
	}
	if !c.UserExists(ctx, "u1") || c.UserExists(ctx, "nobody") {
		t.Fatal("user existence")
	}
	src.down = true
	c.InvalidateAll()
	if c.IsOperator(ctx, "op") {
		t.Fatal("operator granted while the database is down")
	}
	if !c.UserExists(ctx, "nobody") {
		t.Fatal("database down must assume the user exists (the softer 403)")
	}
}

func TestIdentityCacheRevocation(t *testing.T) {
	src := newFakeIdentities()
	now := time.Unix(1000, 0)
	c := NewIdentityCache(src, IdentityCacheConfig{Now: func() time.Time { return now }}, nil)
	ctx := context.Background()
	if c.Revoked(ctx, "jti", "sid") {
		t.Fatal("nothing is revoked")
	}
	src.revoked["sid"] = true
	if c.Revoked(ctx, "jti", "sid") {
		t.Fatal("a cached 'not revoked' was not served")
	}
	c.InvalidateRevocations()
	if !c.Revoked(ctx, "jti", "sid") {
		t.Fatal("the revoked session was not seen after invalidation")
	}
	c.NoteRevoked("jti-local")
	src.down = true
	if !c.Revoked(ctx, "jti-local", "other") {
		t.Fatal("a locally pinned revocation was not honoured")
	}
	if c.Revoked(ctx, "jti-2", "sid-2") {
		t.Fatal("deny-list down: default must fail open")
	}
	strict := NewIdentityCache(src, IdentityCacheConfig{RevocationStrict: true}, nil)
	if !strict.Revoked(ctx, "jti-2", "sid-2") {
		t.Fatal("deny-list down: strict must fail closed")
	}
}

func TestTTLMapStaysBounded(t *testing.T) {
	now := time.Unix(0, 0)
	m := newTTLMap[int, bool](10)
	for i := range 10 {
		m.put(i, true, now.Add(time.Second), now)
	}
	m.put(99, true, now.Add(time.Second), now)
	if _, ok := m.get(99, now); ok {
		t.Fatal("a full map of live entries took a new one")
	}
	m.put(3, false, now.Add(time.Second), now)
	if v, ok := m.get(3, now); !ok || v {
		t.Fatal("an existing entry could not be replaced in a full map")
	}
	later := now.Add(2 * time.Second)
	m.put(99, true, later.Add(time.Second), later)
	if _, ok := m.get(99, later); !ok {
		t.Fatal("expired entries were not pruned to make room")
	}
}

func TestVerifyLiveSession(t *testing.T) {
	src := newFakeIdentities()
	c := NewIdentityCache(src, IdentityCacheConfig{}, nil)
	keys, err := NewSessionKeys(SessionKeysConfig{HS256Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok, minted, err := keys.Mint("u1", "sid-9", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.VerifyLiveSession(ctx, keys, tok); err != nil || got.TokenID != minted.TokenID {
		t.Fatalf("live token: %+v, %v", got, err)
	}
	if _, err := c.VerifyLiveSession(ctx, keys, tok+"x"); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("bad signature: %v", err)
	}
	if _, err := c.VerifyLiveSession(ctx, nil, tok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("no keys: %v", err)
	}
	c.NoteRevoked("sid-9")
	if _, err := c.VerifyLiveSession(ctx, keys, tok); !errors.Is(err, ErrInvalidSession) || !errors.Is(err, ErrSessionRevoked) {
		t.Fatalf("revoked session: %v", err)
	}
}
