package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scopes are the API key scopes, in the order they are shown.
var Scopes = []string{"produce", "consume", "read", "admin"}

// APIKey is one row of queen_proxy.api_keys (never its hash). Status is
// live, expired or revoked.
type APIKey struct {
	ID          string     `json:"id"`
	ClusterID   string     `json:"cluster_id"`
	ClusterSlug string     `json:"cluster_slug"`
	Name        string     `json:"name"`
	Scopes      []string   `json:"scopes"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"created_at"`
	LastUsedAt  *time.Time `json:"last_used_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
}

// IssuedKey is a new key with its plaintext, which exists nowhere else: only
// its SHA-256 is stored.
type IssuedKey struct {
	APIKey
	Key string `json:"key"`
}

const keySelect = `SELECT k.id::text, c.id::text, c.slug, k.name, k.scopes,
	CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked'
	     WHEN k.expires_at IS NOT NULL AND k.expires_at <= now() THEN 'expired'
	     ELSE 'live' END,
	coalesce(k.created_at, now()), k.last_used_at, k.expires_at, k.revoked_at
	FROM queen_proxy.api_keys k JOIN queen_proxy.clusters c ON c.id = k.cluster_id`

func scanKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	err := row.Scan(&k.ID, &k.ClusterID, &k.ClusterSlug, &k.Name, &k.Scopes, &k.Status,
		&k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt)
	k.Scopes = nonNil(k.Scopes)
	return k, err
}

func getKey(ctx context.Context, db DB, id string) (APIKey, error) {
	k, err := scanKey(db.QueryRow(ctx, keySelect+` WHERE k.id = $1::uuid`, id))
	if err != nil {
		return APIKey{}, dbError("read API key", err)
	}
	return k, nil
}

var keyEnv = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// GenerateKey makes a new API key: "qk_<env>_" followed by 32 random bytes
// in unpadded base64url (43 characters). It returns the plaintext and the
// lowercase SHA-256 hex under which it is stored.
func GenerateKey(env string) (key, hash string, err error) {
	if !keyEnv.MatchString(env) {
		return "", "", errorf(Invalid, "invalid key environment %q: use 1 to 16 characters from a-z and 0-9, such as live or test", env)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", &Error{Kind: Failed, Msg: "no randomness for a new key: " + err.Error(), Err: err}
	}
	key = "qk_" + env + "_" + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashKey(key), nil
}

// HashKey returns the lowercase SHA-256 hex of a key, as stored in
// api_keys.key_hash.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ParseScopes reads a comma-separated scope list such as
// "produce,consume,read". It needs at least one scope and refuses unknown
// ones; duplicates are dropped and the result is in the order of Scopes.
func ParseScopes(s string) ([]string, error) {
	return CheckScopes(strings.Split(s, ","))
}

// ParseExpiry reads an expiry as an RFC 3339 time (2027-01-31T00:00:00Z), a
// date (2027-01-31, midnight UTC), or a duration from now (720h, 90d). An
// empty string or "never" means no expiry (nil). The expiry must be later
// than now.
func ParseExpiry(s string, now time.Time) (*time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "never") {
		return nil, nil
	}
	var at time.Time
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		at = t
	} else if t, err := time.Parse(time.DateOnly, s); err == nil {
		at = t
	} else if d, ok := parseDuration(s); ok {
		at = now.Add(d)
	} else {
		return nil, errorf(Invalid, "invalid expiry %q: use an RFC 3339 time (2027-01-31T00:00:00Z), a date (2027-01-31) or a duration (720h, 90d)", s)
	}
	if !at.After(now) {
		return nil, errorf(Invalid, "invalid expiry %q: it is not in the future", s)
	}
	at = at.UTC().Truncate(time.Microsecond) // PostgreSQL's precision
	return &at, nil
}

// parseDuration is time.ParseDuration plus whole days ("90d").
func parseDuration(s string) (time.Duration, bool) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100*365 {
			return 0, false
		}
		return time.Duration(n) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

// NewKey describes a key to issue.
type NewKey struct {
	Cluster   string // slug or id
	Name      string
	Env       string // the <env> of qk_<env>_…; "live" when empty
	Scopes    []string
	ExpiresAt *time.Time // nil: never
	// Hash, when set, is the SHA-256 hex of a key the caller made and
	// keeps: it is stored as it is, and no plaintext is generated.
	Hash string
}

// CreateKey generates a key and stores its hash through issue_api_key, and
// its expiry through set_api_key_expiry, in one transaction. The plaintext
// is in the result and nowhere else.
func CreateKey(ctx context.Context, db DB, n NewKey) (IssuedKey, error) {
	name, err := CheckKeyName(n.Name)
	if err != nil {
		return IssuedKey{}, err
	}
	env := n.Env
	if env == "" {
		env = "live"
	}
	if len(n.Scopes) == 0 {
		return IssuedKey{}, errorf(Invalid, "at least one scope is required (produce, consume, read, admin)")
	}
	scopes, err := CheckScopes(n.Scopes)
	if err != nil {
		return IssuedKey{}, err
	}
	c, err := lookupCluster(ctx, db, n.Cluster)
	if err != nil {
		return IssuedKey{}, err
	}
	var plaintext, hash string
	if n.Hash != "" {
		if hash, err = CheckKeyHash(n.Hash); err != nil {
			return IssuedKey{}, err
		}
	} else if plaintext, hash, err = GenerateKey(env); err != nil {
		return IssuedKey{}, err
	}
	var id string
	err = inTx(ctx, db, "issue API key", func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, $4::text[])::text`,
			c.ID, name, hash, scopes).Scan(&id); err != nil {
			return err
		}
		if n.ExpiresAt == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `SELECT queen_proxy.set_api_key_expiry($1::uuid, $2)`, id, *n.ExpiresAt)
		return err
	})
	if err != nil {
		return IssuedKey{}, err
	}
	k, err := getKey(ctx, db, id)
	if err != nil {
		return IssuedKey{}, err
	}
	return IssuedKey{APIKey: k, Key: plaintext}, nil
}

// ListKeys returns a cluster's keys, oldest first; revoked keys only when
// withRevoked is set.
func ListKeys(ctx context.Context, db DB, cluster string, withRevoked bool) ([]APIKey, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, keySelect+` WHERE k.cluster_id = $1::uuid AND ($2 OR k.revoked_at IS NULL)
		ORDER BY k.created_at, k.id`, c.ID, withRevoked)
	if err != nil {
		return nil, dbError("list API keys", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) { return scanKey(r) })
	if err != nil {
		return nil, dbError("list API keys", err)
	}
	return nonNil(out), nil
}

// RevokeKey revokes a key by id through revoke_api_key; every gateway drops
// it at once.
func RevokeKey(ctx context.Context, db DB, id string) (APIKey, error) {
	key := normalize(id)
	if !uuidText.MatchString(key) {
		return APIKey{}, errorf(Invalid, "invalid key id %q: want the id that key list shows", strings.TrimSpace(id))
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.revoke_api_key($1::uuid)`, key); err != nil {
		var e *Error
		if err := dbError("revoke API key", err); errors.As(err, &e) && e.Kind == NotFound {
			return APIKey{}, errorf(NotFound, "unknown or already revoked key %q", key)
		}
		return APIKey{}, dbError("revoke API key", err)
	}
	return getKey(ctx, db, key)
}

// DefaultRotationOverlap is how long "key rotate" keeps the old key valid
// beside the new one when no overlap is given: a day, time for every
// client to pick up the new key on its next deploy or config reload.
const DefaultRotationOverlap = 24 * time.Hour

// Rotation is the outcome of RotateKey: the new key (with its plaintext)
// and the old one as it is now, with the end of its overlap.
type Rotation struct {
	New IssuedKey `json:"new"`
	Old APIKey    `json:"old"`
	// OldValidUntil is when the gateways start refusing the old key (its
	// expiry); nil when it was revoked at once (no overlap).
	OldValidUntil *time.Time `json:"old_valid_until"`
}

// RotateKey replaces a live key with a new one of the same cluster, name
// and scopes, in one transaction: issue_api_key for the new key (and
// set_api_key_expiry for its own expiry, if given), then the old key's
// expiry is brought forward to now plus overlap (never pushed later than
// it already was), after which every gateway refuses it like a revoked key.
// An overlap of zero revokes the old key at once (revoke_api_key). Both
// steps are audited and announced like any key change.
func RotateKey(ctx context.Context, db DB, id string, overlap time.Duration, env string, newExpiry *time.Time) (Rotation, error) {
	old := normalize(id)
	if !uuidText.MatchString(old) {
		return Rotation{}, errorf(Invalid, "invalid key id %q: want the id that key list shows", strings.TrimSpace(id))
	}
	if overlap < 0 {
		return Rotation{}, errorf(Invalid, "invalid overlap %v: it cannot be negative (0 revokes the old key at once)", overlap)
	}
	if env == "" {
		env = "live"
	}
	plaintext, hash, err := GenerateKey(env)
	if err != nil {
		return Rotation{}, err
	}
	var newID string
	err = inTx(ctx, db, "rotate API key", func(tx pgx.Tx) error {
		var cluster, name string
		var scopes []string
		var live bool
		err := tx.QueryRow(ctx, `SELECT cluster_id::text, name, scopes, expires_at IS NULL OR expires_at > now()
			FROM queen_proxy.api_keys WHERE id = $1::uuid AND revoked_at IS NULL FOR UPDATE`, old).Scan(&cluster, &name, &scopes, &live)
		if errors.Is(err, pgx.ErrNoRows) {
			return errorf(NotFound, "unknown or revoked key %q", old)
		}
		if err != nil {
			return err
		}
		if !live {
			return errorf(WrongState, "key %q has expired: there is nothing to overlap; create a new key with \"key create\"", old)
		}
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, $4::text[])::text`,
			cluster, name, hash, scopes).Scan(&newID); err != nil {
			return err
		}
		if newExpiry != nil {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_api_key_expiry($1::uuid, $2)`, newID, *newExpiry); err != nil {
				return err
			}
		}
		if overlap == 0 {
			_, err := tx.Exec(ctx, `SELECT queen_proxy.revoke_api_key($1::uuid)`, old)
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.set_api_key_expiry(id, LEAST(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $2)))
			FROM queen_proxy.api_keys WHERE id = $1::uuid`, old, overlap.Seconds())
		return err
	})
	if err != nil {
		return Rotation{}, err
	}
	var r Rotation
	if r.Old, err = getKey(ctx, db, old); err != nil {
		return Rotation{}, err
	}
	if r.Old.RevokedAt == nil {
		r.OldValidUntil = r.Old.ExpiresAt
	}
	k, err := getKey(ctx, db, newID)
	if err != nil {
		return Rotation{}, err
	}
	r.New = IssuedKey{APIKey: k, Key: plaintext}
	return r, nil
}

// ParseOverlap reads a rotation overlap: a duration (30m, 24h, 7d), or 0
// for none (the old key is revoked at once).
func ParseOverlap(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" || s == "0s" {
		return 0, nil
	}
	d, ok := parseDuration(s)
	if !ok {
		return 0, errorf(Invalid, "invalid overlap %q: use a duration such as 30m, 24h or 7d, or 0 to revoke the old key at once", s)
	}
	return d, nil
}
