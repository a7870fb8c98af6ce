package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TokenScopes are the scopes of a machine token, in the order they are
// shown: provision changes things through the provisioning API, usage
// reads usage and activity, read reads everything else.
var TokenScopes = []string{"provision", "usage", "read"}

// MachineTokenPrefix starts every machine token, so one is never taken
// for an API key (qk_) or a session.
const MachineTokenPrefix = "qmt_"

// Default rate limit of a machine token, per gateway: requests per second
// and the burst on top.
const (
	DefaultTokenRate  = 10
	DefaultTokenBurst = 50
)

// MachineToken is one row of queen_proxy.machine_tokens, never its hash.
// Status is live, expired or revoked.
type MachineToken struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Scopes        []string   `json:"scopes"`
	RatePerSecond int        `json:"rate_per_second"`
	Burst         int        `json:"burst"`
	Status        string     `json:"status"`
	CreatedAt     time.Time  `json:"created_at"`
	LastUsedAt    *time.Time `json:"last_used_at"`
	ExpiresAt     *time.Time `json:"expires_at"`
	RevokedAt     *time.Time `json:"revoked_at"`
	// PreviousValidUntil is when the secret before the last rotation
	// stops being accepted; nil when there is none.
	PreviousValidUntil *time.Time `json:"previous_valid_until"`
}

// IssuedMachineToken is a token with its plaintext, shown once.
type IssuedMachineToken struct {
	MachineToken
	Token string `json:"token"`
}

const tokenSelect = `SELECT id::text, name, scopes, rate_per_second, burst,
	CASE WHEN revoked_at IS NOT NULL THEN 'revoked'
	     WHEN expires_at IS NOT NULL AND expires_at <= now() THEN 'expired'
	     ELSE 'live' END,
	created_at, last_used_at, expires_at, revoked_at,
	CASE WHEN previous_expires_at > now() THEN previous_expires_at END
	FROM queen_proxy.machine_tokens`

func scanToken(row pgx.Row) (MachineToken, error) {
	var t MachineToken
	err := row.Scan(&t.ID, &t.Name, &t.Scopes, &t.RatePerSecond, &t.Burst, &t.Status, &t.CreatedAt,
		&t.LastUsedAt, &t.ExpiresAt, &t.RevokedAt, &t.PreviousValidUntil)
	t.Scopes = nonNil(t.Scopes)
	return t, err
}

// CheckTokenScopes checks a machine token's scope list as CheckScopes
// checks an API key's.
func CheckTokenScopes(list []string) ([]string, error) {
	return checkScopeSet(list, TokenScopes, "provision, usage or read")
}

// GenerateMachineToken makes a new machine token: qmt_ followed by 32
// random bytes in unpadded base64url, and the SHA-256 hex it is stored
// under.
func GenerateMachineToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", &Error{Kind: Failed, Msg: "no randomness for a new token: " + err.Error(), Err: err}
	}
	token = MachineTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashKey(token), nil
}

// NewMachineToken describes a machine token to create.
type NewMachineToken struct {
	Name          string
	Scopes        []string
	RatePerSecond int // 0: DefaultTokenRate
	Burst         int // 0: DefaultTokenBurst
	ExpiresAt     *time.Time
}

// CreateMachineToken generates a token and stores its hash through
// create_machine_token; the plaintext is in the result only.
func CreateMachineToken(ctx context.Context, db DB, n NewMachineToken) (IssuedMachineToken, error) {
	name, err := CheckKeyName(n.Name)
	if err != nil {
		return IssuedMachineToken{}, errorf(Invalid, "token %s", strings.TrimPrefix(err.Error(), "key "))
	}
	scopes, err := CheckTokenScopes(n.Scopes)
	if err != nil {
		return IssuedMachineToken{}, err
	}
	rate, burst := n.RatePerSecond, n.Burst
	if rate == 0 {
		rate = DefaultTokenRate
	}
	if burst == 0 {
		burst = DefaultTokenBurst
	}
	if rate < 1 || rate > 100000 || burst < 1 || burst > 1000000 {
		return IssuedMachineToken{}, errorf(Invalid, "rate must be 1 to 100000 requests per second and burst 1 to 1000000")
	}
	plaintext, hash, err := GenerateMachineToken()
	if err != nil {
		return IssuedMachineToken{}, err
	}
	var id string
	if err := db.QueryRow(ctx, `SELECT queen_proxy.create_machine_token($1, $2, $3::text[], $4, $5, $6)::text`,
		name, hash, scopes, rate, burst, n.ExpiresAt).Scan(&id); err != nil {
		return IssuedMachineToken{}, dbError("create machine token", err)
	}
	t, err := getToken(ctx, db, id)
	if err != nil {
		return IssuedMachineToken{}, err
	}
	return IssuedMachineToken{MachineToken: t, Token: plaintext}, nil
}

func getToken(ctx context.Context, db DB, id string) (MachineToken, error) {
	t, err := scanToken(db.QueryRow(ctx, tokenSelect+` WHERE id = $1::uuid`, id))
	if err != nil {
		return MachineToken{}, dbError("read machine token", err)
	}
	return t, nil
}

// lookupToken finds a token not revoked by id or name.
func lookupToken(ctx context.Context, db DB, raw string) (MachineToken, error) {
	ref := strings.TrimSpace(raw)
	if ref == "" {
		return MachineToken{}, errorf(Invalid, "token id or name is required")
	}
	t, err := scanToken(db.QueryRow(ctx, tokenSelect+` WHERE revoked_at IS NULL AND (name = $1 OR id::text = lower($1))`, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return MachineToken{}, errorf(NotFound, "unknown or revoked machine token %q", ref)
	}
	if err != nil {
		return MachineToken{}, dbError("look up machine token", err)
	}
	return t, nil
}

// ListMachineTokens returns the tokens, oldest first; revoked ones only
// when withRevoked is set.
func ListMachineTokens(ctx context.Context, db DB, withRevoked bool) ([]MachineToken, error) {
	rows, err := db.Query(ctx, tokenSelect+` WHERE $1 OR revoked_at IS NULL ORDER BY created_at, id`, withRevoked)
	if err != nil {
		return nil, dbError("list machine tokens", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MachineToken, error) { return scanToken(r) })
	if err != nil {
		return nil, dbError("list machine tokens", err)
	}
	return nonNil(out), nil
}

// RevokeMachineToken revokes a token (by id or name) through
// revoke_machine_token; every gateway refuses it from the COMMIT on.
func RevokeMachineToken(ctx context.Context, db DB, ref string) (MachineToken, error) {
	t, err := lookupToken(ctx, db, ref)
	if err != nil {
		return MachineToken{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.revoke_machine_token($1::uuid)`, t.ID); err != nil {
		return MachineToken{}, dbError("revoke machine token", err)
	}
	return getToken(ctx, db, t.ID)
}

// RotateMachineToken gives a token (by id or name) a new secret, keeping
// its id, name, scopes and limits; the old secret stays valid for overlap
// (0: refused at once).
func RotateMachineToken(ctx context.Context, db DB, ref string, overlap time.Duration) (IssuedMachineToken, error) {
	if overlap < 0 {
		return IssuedMachineToken{}, errorf(Invalid, "invalid overlap %v: it cannot be negative (0 ends the old secret at once)", overlap)
	}
	t, err := lookupToken(ctx, db, ref)
	if err != nil {
		return IssuedMachineToken{}, err
	}
	plaintext, hash, err := GenerateMachineToken()
	if err != nil {
		return IssuedMachineToken{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.rotate_machine_token($1::uuid, $2, make_interval(secs => $3))`,
		t.ID, hash, overlap.Seconds()); err != nil {
		return IssuedMachineToken{}, dbError("rotate machine token", err)
	}
	nt, err := getToken(ctx, db, t.ID)
	if err != nil {
		return IssuedMachineToken{}, err
	}
	return IssuedMachineToken{MachineToken: nt, Token: plaintext}, nil
}

// TokenCaller is a machine token as the provisioning API authenticates
// it.
type TokenCaller struct {
	ID            string
	Name          string
	Scopes        []string
	RatePerSecond int
	Burst         int
}

// Has reports whether the token has the scope.
func (c TokenCaller) Has(scope string) bool {
	for _, s := range c.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// AuthenticateMachineToken finds the live token whose current secret, or
// previous one within its overlap, is presented; NotFound otherwise.
func AuthenticateMachineToken(ctx context.Context, db DB, presented string) (TokenCaller, error) {
	if !strings.HasPrefix(presented, MachineTokenPrefix) || len(presented) != len(MachineTokenPrefix)+43 {
		return TokenCaller{}, errorf(NotFound, "unknown machine token")
	}
	h := HashKey(presented)
	var c TokenCaller
	err := db.QueryRow(ctx, `SELECT id::text, name, scopes, rate_per_second, burst FROM queen_proxy.machine_tokens
		WHERE (token_hash = $1 OR (previous_hash = $1 AND previous_expires_at > now()))
		  AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, h).
		Scan(&c.ID, &c.Name, &c.Scopes, &c.RatePerSecond, &c.Burst)
	if errors.Is(err, pgx.ErrNoRows) {
		return TokenCaller{}, errorf(NotFound, "unknown machine token")
	}
	if err != nil {
		return TokenCaller{}, dbError("authenticate machine token", err)
	}
	return c, nil
}

// MachineTokensTable is the text table of "token list".
func MachineTokensTable(ts []MachineToken) Table {
	t := Table{Header: []string{"ID", "NAME", "SCOPES", "RATE", "STATUS", "CREATED", "LAST USED", "EXPIRES"}}
	for _, k := range ts {
		t.Rows = append(t.Rows, []string{k.ID, k.Name, strings.Join(k.Scopes, ","),
			num(int64(k.RatePerSecond)) + "/s+" + num(int64(k.Burst)), k.Status, stamp(k.CreatedAt),
			optStamp(k.LastUsedAt), optStamp(k.ExpiresAt)})
	}
	return t
}
