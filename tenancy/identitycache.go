package tenancy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// IdentityCacheConfig tunes the IdentityCache. Zero values take the
// defaults noted on each field.
type IdentityCacheConfig struct {
	RoleTTL       time.Duration // life of a found role; default 30s (misses are not cached)
	OperatorTTL   time.Duration // life of an operator-bit answer, either way, unless a notification drops it first; default 30s
	RevocationTTL time.Duration // life of a deny-list answer, either way; default 60s
	MaxEntries    int           // cap per cache; default 100,000
	LookupTimeout time.Duration // bound on one lookup; default 5s
	// RevocationStrict refuses every session while the deny-list cannot be
	// read. By default the deny-list fails open: signatures and expiry are
	// still checked, and an outage does not lock every human out.
	RevocationStrict bool
	Now              func() time.Time
}

func (c *IdentityCacheConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.RoleTTL, 30*time.Second)
	def(&c.OperatorTTL, 30*time.Second)
	def(&c.RevocationTTL, 60*time.Second)
	def(&c.LookupTimeout, 5*time.Second)
	if c.MaxEntries <= 0 {
		c.MaxEntries = 100000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

type roleKey struct{ user, cluster string }

// IdentityCache keeps the answers a human session needs on every request
// (role per cluster, operator bit, token deny-list) close to the request
// path, with the failure direction of each chosen deliberately: a role or
// operator bit that cannot be read is refused, a deny-list that cannot be
// read lets a cryptographically valid token through unless strict.
type IdentityCache struct {
	src       IdentitySource
	cfg       IdentityCacheConfig
	roles     *ttlMap[roleKey, Role]
	operators *ttlMap[string, bool]
	revoked   *ttlMap[string, bool]
	ended     *ttlMap[string, time.Time] // per user: when its sessions were ended (zero: never)
	log       *zap.Logger
	lastWarn  atomic.Int64
}

// NewIdentityCache returns a cache reading from src.
func NewIdentityCache(src IdentitySource, cfg IdentityCacheConfig, log *zap.Logger) *IdentityCache {
	cfg.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	return &IdentityCache{
		src: src, cfg: cfg, log: log,
		roles:     newTTLMap[roleKey, Role](cfg.MaxEntries),
		operators: newTTLMap[string, bool](cfg.MaxEntries),
		revoked:   newTTLMap[string, bool](cfg.MaxEntries),
		ended:     newTTLMap[string, time.Time](cfg.MaxEntries),
	}
}

// Role returns the user's role on the cluster. It returns an error wrapping
// ErrNotFound when there is none, and another error when the database did
// not answer; both refuse the request.
func (c *IdentityCache) Role(ctx context.Context, userID, clusterID string) (Role, error) {
	now := c.cfg.Now()
	k := roleKey{userID, clusterID}
	if r, ok := c.roles.get(k, now); ok {
		return r, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	r, err := c.src.RoleOnCluster(ctx, userID, clusterID)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			c.warn("role lookup failed; refusing the session", err)
		}
		return RoleNone, err
	}
	c.roles.put(k, r, now.Add(c.cfg.RoleTTL), now)
	return r, nil
}

// IsOperator reports whether the user carries the operator bit. A database
// that does not answer means no.
func (c *IdentityCache) IsOperator(ctx context.Context, userID string) bool {
	now := c.cfg.Now()
	if op, ok := c.operators.get(userID, now); ok {
		return op
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	_, op, err := c.src.UserStanding(ctx, userID)
	if err != nil {
		c.warn("operator lookup failed; treating the user as no operator", err)
		return false
	}
	c.operators.put(userID, op, now.Add(c.cfg.OperatorTTL), now)
	return op
}

// UserExists reports whether the user row is still there; asked only to
// tell "session no longer valid" from "no role", so it is not cached and a
// database that does not answer means yes (the softer 403).
func (c *IdentityCache) UserExists(ctx context.Context, userID string) bool {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	exists, _, err := c.src.UserStanding(ctx, userID)
	if err != nil {
		return true
	}
	return exists
}

// Revoked reports whether a token is on the deny-list, by its own id or by
// the id of the session it was minted for.
func (c *IdentityCache) Revoked(ctx context.Context, tokenID, sessionID string) bool {
	now := c.cfg.Now()
	key := tokenID + "\x00" + sessionID
	if r, ok := c.revoked.get(key, now); ok {
		return r
	}
	ids := []string{tokenID}
	if sessionID != "" && sessionID != tokenID {
		ids = append(ids, sessionID)
	}
	for _, id := range ids {
		if r, ok := c.revoked.get(id, now); ok && r {
			return true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	r, err := c.src.AnyRevoked(ctx, ids)
	if err != nil {
		c.warn("token deny-list lookup failed", err)
		return c.cfg.RevocationStrict
	}
	c.revoked.put(key, r, now.Add(c.cfg.RevocationTTL), now)
	return r
}

// NoteRevoked pins ids as revoked in this process at once, ahead of the
// deny-list row and its notification.
func (c *IdentityCache) NoteRevoked(ids ...string) {
	now := c.cfg.Now()
	for _, id := range ids {
		if id != "" {
			c.revoked.put(id, true, now.Add(c.cfg.RevocationTTL), now)
		}
	}
	// Cached "not revoked" answers for pairs involving these ids must go.
	c.revoked.deleteIf(func(_ string, v bool) bool { return !v })
}

// InvalidateCluster drops the cached roles on one cluster, after a grant
// or revocation there.
func (c *IdentityCache) InvalidateCluster(clusterID string) {
	c.roles.deleteIf(func(k roleKey, _ Role) bool { return k.cluster == clusterID })
}

// InvalidateRevocations drops every cached "not revoked" answer, and what
// it knows of when users' sessions were ended, after a session was revoked
// (or a user's sessions ended) somewhere.
func (c *IdentityCache) InvalidateRevocations() {
	c.revoked.deleteIf(func(_ string, v bool) bool { return !v })
	c.ended.deleteIf(func(string, time.Time) bool { return true })
}

// InvalidateUsers drops what the cache knows of users' standing (operator
// bits) and every cached "not revoked" answer and session end: what the
// nil-uuid notification asks for after a session was revoked, a user's
// sessions were ended or an operator bit changed anywhere.
func (c *IdentityCache) InvalidateUsers() {
	c.operators.deleteIf(func(string, bool) bool { return true })
	c.InvalidateRevocations()
}

// SessionEnded reports whether a session token of the user issued at
// issuedAt predates the end of the user's sessions (a new password). It
// fails like the deny-list: open unless RevocationStrict when the database
// does not answer. A token without iat counts as issued before any end.
func (c *IdentityCache) SessionEnded(ctx context.Context, userID string, issuedAt time.Time) bool {
	src, ok := c.src.(SessionsEndedSource)
	if !ok {
		return false
	}
	now := c.cfg.Now()
	at, cached := c.ended.get(userID, now)
	if !cached {
		lookup, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
		defer cancel()
		var err error
		if at, err = src.SessionsEndedAt(lookup, userID); err != nil {
			c.warn("session end lookup failed", err)
			return c.cfg.RevocationStrict
		}
		c.ended.put(userID, at, now.Add(c.cfg.RevocationTTL), now)
	}
	return !at.IsZero() && issuedAt.Before(at)
}

// InvalidateAll drops everything, for when notifications may have been
// missed.
func (c *IdentityCache) InvalidateAll() {
	c.roles.deleteIf(func(roleKey, Role) bool { return true })
	c.InvalidateUsers()
}

// warn logs a failed lookup at most once per 30 s.
func (c *IdentityCache) warn(msg string, err error) {
	now := time.Now().UnixNano()
	last := c.lastWarn.Load()
	if now-last < int64(30*time.Second) || !c.lastWarn.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn(msg, zap.Error(err))
}

// ErrSessionRevoked is wrapped (with ErrInvalidSession) when a valid token's
// id or session is on the deny-list.
var ErrSessionRevoked = errors.New("session revoked")

// VerifyLiveSession checks a session token with keys (signature, claims)
// and then the deny-list, by the token's own id and by its session's:
// what every surface accepting sessions needs. Every refusal wraps
// ErrInvalidSession.
func (c *IdentityCache) VerifyLiveSession(ctx context.Context, keys *SessionKeys, token string) (SessionClaims, error) {
	if keys == nil {
		return SessionClaims{}, fmt.Errorf("%w: no session keys configured", ErrInvalidSession)
	}
	claims, err := keys.Verify(token)
	if err != nil {
		return claims, err
	}
	if c.Revoked(ctx, claims.TokenID, claims.SessionID) {
		return claims, fmt.Errorf("%w: %w", ErrInvalidSession, ErrSessionRevoked)
	}
	if c.SessionEnded(ctx, claims.UserID, claims.IssuedAt) {
		return claims, fmt.Errorf("%w: %w: the user's sessions were ended after it was issued", ErrInvalidSession, ErrSessionRevoked)
	}
	return claims, nil
}
