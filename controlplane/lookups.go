package controlplane

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// GetTenant returns one tenant by slug or id.
func GetTenant(ctx context.Context, db DB, tenant string) (Tenant, error) {
	t, err := lookupTenant(ctx, db, tenant)
	if err != nil {
		return Tenant{}, err
	}
	return getTenant(ctx, db, t.ID)
}

// GetCluster returns one cluster by slug or id.
func GetCluster(ctx context.Context, db DB, cluster string) (Cluster, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Cluster{}, err
	}
	return getCluster(ctx, db, c.ID)
}

// GetUser returns one user by e-mail or id.
func GetUser(ctx context.Context, db DB, user string) (User, error) {
	u, err := lookupUser(ctx, db, user)
	if err != nil {
		return User{}, err
	}
	return getUser(ctx, db, u.ID)
}

// GetKey returns one API key by id, revoked or not.
func GetKey(ctx context.Context, db DB, id string) (APIKey, error) {
	key := normalize(id)
	if !uuidText.MatchString(key) {
		return APIKey{}, errorf(Invalid, "invalid key id %q: want the id that key list shows", id)
	}
	k, err := scanKey(db.QueryRow(ctx, keySelect+` WHERE k.id = $1::uuid`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIKey{}, errorf(NotFound, "unknown key %q", key)
	}
	if err != nil {
		return APIKey{}, dbError("read API key", err)
	}
	return k, nil
}

// KeyByHash returns the key stored under a SHA-256 hex, if any.
func KeyByHash(ctx context.Context, db DB, hash string) (APIKey, bool, error) {
	k, err := scanKey(db.QueryRow(ctx, keySelect+` WHERE k.key_hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIKey{}, false, nil
	}
	if err != nil {
		return APIKey{}, false, dbError("read API key", err)
	}
	return k, true, nil
}
