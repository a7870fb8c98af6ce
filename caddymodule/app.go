package caddymodule

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/queengate/queengate/tenancy"
)

// App is the queen app: it owns the connection pool to the queen_proxy
// control-plane database, applies its migrations, and keeps the cluster
// cache and its invalidation listener. The queen_gateway handlers of every
// site share it. Configure it with the global Caddyfile option `queen`.
type App struct {
	// DatabaseURL is the PostgreSQL URL of the control-plane database, for
	// example "{env.QUEENGATE_DATABASE_URL}". Placeholders are expanded.
	// Required.
	DatabaseURL string `json:"database_url,omitempty"`

	// BaseDomains are the domains cluster hostnames live under, such as
	// "eu1.example.com" for "acme-prod.eu1.example.com". When set, a host
	// that is not exactly "<slug>.<base domain>" is refused with 421
	// cluster_unknown; when empty, the first label of any host names the
	// cluster.
	BaseDomains []string `json:"base_domains,omitempty"`

	// PoolMaxConns caps the connections to the control-plane database.
	// Default 16.
	PoolMaxConns int32 `json:"pool_max_conns,omitempty"`

	// DatabaseTimeout bounds connecting to the database and every
	// control-plane lookup. Default 5s.
	DatabaseTimeout caddy.Duration `json:"database_timeout,omitempty"`

	// CacheTTL is how long a cluster or API key read from the database is
	// served without asking again; changes made through the control-plane
	// SQL functions are seen at once through LISTEN/NOTIFY. Default 30s.
	CacheTTL caddy.Duration `json:"cache_ttl,omitempty"`

	// KeyNegativeTTL is how long an unknown or revoked API key is
	// remembered as such. Default 5s.
	KeyNegativeTTL caddy.Duration `json:"key_negative_ttl,omitempty"`

	// StaleGrace is how long known clusters and keys keep being served
	// after their TTL while the database does not answer. Clusters and keys
	// never seen before are refused during an outage. Default 10m.
	StaleGrace caddy.Duration `json:"stale_grace,omitempty"`

	// SkipMigrations turns off applying the embedded schema migrations at
	// start, for databases whose schema is managed elsewhere.
	SkipMigrations bool `json:"skip_migrations,omitempty"`

	backend *backend
	logger  *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "queen", New: func() caddy.Module { return new(App) }}
}

// Provision connects to the control-plane database (sharing the connection
// pool, cache and listener with the previous configuration when a reload
// keeps the same database settings) and applies migrations.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.DatabaseURL = strings.TrimSpace(caddy.NewReplacer().ReplaceAll(a.DatabaseURL, ""))
	for i, d := range a.BaseDomains {
		a.BaseDomains[i] = strings.Trim(strings.ToLower(strings.TrimSpace(d)), ".")
	}
	if a.PoolMaxConns == 0 {
		a.PoolMaxConns = 16
	}
	setDuration(&a.DatabaseTimeout, 5*time.Second)
	setDuration(&a.CacheTTL, 30*time.Second)
	setDuration(&a.KeyNegativeTTL, 5*time.Second)
	setDuration(&a.StaleGrace, 10*time.Minute)
	if err := a.Validate(); err != nil {
		return err
	}
	b, err := acquireBackend(ctx, backendSettings{
		databaseURL:    a.DatabaseURL,
		poolMaxConns:   a.PoolMaxConns,
		skipMigrations: a.SkipMigrations,
		cache: tenancy.CacheConfig{
			TTL:            time.Duration(a.CacheTTL),
			KeyNegativeTTL: time.Duration(a.KeyNegativeTTL),
			StaleGrace:     time.Duration(a.StaleGrace),
			LookupTimeout:  time.Duration(a.DatabaseTimeout),
		},
	}, a.logger)
	if err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	a.backend = b
	return nil
}

// Validate checks the configuration.
func (a *App) Validate() error {
	if a.DatabaseURL == "" {
		return fmt.Errorf("queen: database_url is required (the PostgreSQL URL of the queen_proxy control-plane database)")
	}
	if a.PoolMaxConns < 1 {
		return fmt.Errorf("queen: pool_max_conns must be at least 1, got %d", a.PoolMaxConns)
	}
	for _, d := range a.BaseDomains {
		if d == "" || strings.ContainsAny(d, "/:* ") {
			return fmt.Errorf("queen: base domain %q is not a domain name", d)
		}
	}
	return nil
}

// Start implements caddy.App; the app's work starts in Provision, where
// its shared backend is acquired.
func (a *App) Start() error { return nil }

// Stop implements caddy.App.
func (a *App) Stop() error { return nil }

// Cleanup releases this configuration's hold on the shared backend; the
// pool and listener close when no configuration uses them any more.
func (a *App) Cleanup() error {
	if a.backend == nil {
		return nil
	}
	_, err := backends.Delete(a.backend.key)
	a.backend = nil
	return err
}

// Cache returns the cluster cache.
func (a *App) Cache() *tenancy.ClusterCache { return a.backend.cache }

func setDuration(d *caddy.Duration, def time.Duration) {
	if *d == 0 {
		*d = caddy.Duration(def)
	}
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
