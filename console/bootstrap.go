package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/tenancy"
)

// BootstrapConfig asks for a tenant, a cluster, its admin user and API keys
// to exist; Bootstrap creates what is missing and changes nothing that is
// there, so it may run at every start of every gateway.
type BootstrapConfig struct {
	// Tenant is the tenant's slug. Required.
	Tenant string
	// Cluster is the cluster's slug (default: the tenant's slug).
	Cluster string
	// Email is the admin's e-mail (default "admin@localhost").
	Email string
	// Password, when set, is the admin's password when the admin is
	// created (stored as bcrypt by the database, like bootstrap_tenant
	// does); an existing user's password is never changed.
	Password string
	// Plan is the plan code of a new cluster (default "dev").
	Plan string
	// Cell is the slug of the cell a new cluster goes on (default: the
	// database places it, as cluster create without --cell does).
	Cell string
	// APIKey, when set, is a known key issued (with every scope, named
	// "bootstrap (env)") on the cluster unless it exists there already.
	APIKey string
}

// BootstrapResult says what Bootstrap found or made.
type BootstrapResult struct {
	TenantID, ClusterID, UserID string
	// GeneratedKey is the plaintext of the key bootstrap_tenant issued
	// (named "bootstrap") on this run; "" when one existed already.
	GeneratedKey string
	// KnownKeyIssued is set when the configured APIKey was issued now.
	KnownKeyIssued bool
	PasswordSet    bool
	CanLogin       bool
}

// bootstrapLock keeps two gateways starting at once from racing on the
// same rows.
const bootstrapLock = 0x71756565 // "quee"

// Bootstrap makes sure the configured tenant, cluster, admin and keys
// exist, through bootstrap_tenant and issue_api_key, in one transaction.
func Bootstrap(ctx context.Context, pool *pgxpool.Pool, cfg BootstrapConfig) (BootstrapResult, error) {
	var res BootstrapResult
	if strings.TrimSpace(cfg.Tenant) == "" {
		return res, errors.New("bootstrap: tenant is required")
	}
	tenant, err := controlplane.CheckSlug("tenant", cfg.Tenant)
	if err != nil {
		return res, fmt.Errorf("bootstrap: %w", err)
	}
	cluster := tenant
	if strings.TrimSpace(cfg.Cluster) != "" {
		if cluster, err = controlplane.CheckSlug("cluster", cfg.Cluster); err != nil {
			return res, fmt.Errorf("bootstrap: %w", err)
		}
	}
	email := cfg.Email
	if strings.TrimSpace(email) == "" {
		email = "admin@localhost"
	}
	email, ok := normalEmail(email)
	if !ok {
		return res, fmt.Errorf("bootstrap: email %q is not an e-mail address", cfg.Email)
	}
	plan := cfg.Plan
	if plan == "" {
		plan = "dev"
	}
	key := strings.TrimSpace(cfg.APIKey)
	if key != "" && (!strings.HasPrefix(key, tenancy.APIKeyPrefix) || len(key) < 20) {
		return res, errors.New("bootstrap: api_key must be a key starting qk_ (at least 20 characters)")
	}
	var password *string
	if cfg.Password != "" {
		if n := len([]rune(cfg.Password)); n < 8 || n > MaxPasswordLen {
			return res, errors.New("bootstrap: password must be 8 to 128 characters long")
		}
		password = &cfg.Password
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(bootstrapLock)); err != nil {
			return err
		}
		cell, err := bootstrapCell(ctx, tx, cfg.Cell, cluster, plan)
		if err != nil {
			return err
		}
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.bootstrap_tenant($1, NULL, $2, $3, $4::uuid, $5, $6, 'bootstrap')`,
			tenant, cluster, plan, cell, email, password).Scan(&raw); err != nil {
			return err
		}
		var out struct {
			TenantID    string  `json:"tenant_id"`
			ClusterID   string  `json:"cluster_id"`
			UserID      string  `json:"user_id"`
			APIKey      *string `json:"api_key"`
			PasswordSet bool    `json:"password_set"`
			CanLogin    bool    `json:"can_login"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return err
		}
		res.TenantID, res.ClusterID, res.UserID = out.TenantID, out.ClusterID, out.UserID
		res.PasswordSet, res.CanLogin = out.PasswordSet, out.CanLogin
		if out.APIKey != nil {
			res.GeneratedKey = *out.APIKey
		}
		if key == "" {
			return nil
		}
		return bootstrapKnownKey(ctx, tx, out.ClusterID, key, &res)
	})
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("bootstrap: %w", err)
	}
	return res, nil
}

// bootstrapCell finds the cell by slug. Without one, a cluster that exists
// keeps its cell, and a new one is placed by the database (place_cluster,
// as "caddy queen cluster create" without --cell), which locks the chosen
// cell until this transaction ends.
func bootstrapCell(ctx context.Context, tx pgx.Tx, slug, cluster, plan string) (string, error) {
	var id string
	if slug != "" {
		err := tx.QueryRow(ctx, `SELECT id::text FROM queen_proxy.cells WHERE slug = $1`, slug).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("no cell %q", slug)
		}
		return id, err
	}
	err := tx.QueryRow(ctx, `SELECT cell_id::text FROM queen_proxy.clusters WHERE slug = $1`, cluster).Scan(&id)
	if !errors.Is(err, pgx.ErrNoRows) {
		return id, err
	}
	err = tx.QueryRow(ctx, `SELECT queen_proxy.place_cluster($1)::text`, plan).Scan(&id)
	return id, err
}

// bootstrapKnownKey issues a configured plaintext key on the cluster
// unless it is there already; a key of another cluster, or revoked, is an
// error.
func bootstrapKnownKey(ctx context.Context, tx pgx.Tx, clusterID, key string, res *BootstrapResult) error {
	hash := tenancy.HashAPIKey(key)
	var owner string
	var revoked bool
	err := tx.QueryRow(ctx, `SELECT cluster_id::text, revoked_at IS NOT NULL FROM queen_proxy.api_keys WHERE key_hash = $1`,
		hash).Scan(&owner, &revoked)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, 'bootstrap (env)', $2,
			ARRAY['produce', 'consume', 'admin', 'read']::text[])`, clusterID, hash); err != nil {
			return err
		}
		res.KnownKeyIssued = true
		return nil
	case err != nil:
		return err
	case owner != clusterID:
		return errors.New("the configured api_key belongs to another cluster")
	case revoked:
		return errors.New("the configured api_key was revoked; configure a new one")
	}
	return nil
}
