package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
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

	// OperatorEnabled opens the operator routes (broker-wide status,
	// analytics and maintenance switches) to users with the operator bit.
	// When off they answer 404 before authentication, like blocked routes.
	OperatorEnabled bool `json:"operator_enabled,omitempty"`

	// Sessions configures human sessions (gateway-minted JWTs). Without it
	// only API keys are accepted.
	Sessions *SessionConfig `json:"sessions,omitempty"`

	// Identity configures human sign-in (/auth/*), the console and the
	// operator API. Without it the gateway serves the data plane only.
	Identity *IdentityConfig `json:"identity,omitempty"`

	// Webhooks tunes the delivery of the control plane's events to the
	// endpoints `caddy queen webhook` manages. Nil: the defaults.
	Webhooks *WebhooksConfig `json:"webhooks,omitempty"`

	// UsageExport pushes usage to a billing receiver as CloudEvents. Nil:
	// no export.
	UsageExport *UsageExportConfig `json:"usage_export,omitempty"`

	// CellTokens, keyed by cell slug ("*" for every cell without its own
	// entry), makes the gateway present minted JWTs to cells that verify
	// their own; other cells get their static cell_secret, if any.
	CellTokens map[string]*CellTokenConfig `json:"cell_tokens,omitempty"`

	// JWTIssuers are customer identity providers whose JWTs the data
	// plane accepts in place of an API key, each on the clusters it
	// lists (jwtissuer.go).
	JWTIssuers []*JWTIssuerConfig `json:"jwt_issuers,omitempty"`

	// KeyTouchInterval is how often the last_used_at of used API keys is
	// written, in one statement. Default 10s, at least 1s.
	KeyTouchInterval caddy.Duration `json:"key_touch_interval,omitempty"`

	// Shadow computes the rate and admission decisions (request and
	// message buckets, queue and partition caps, parked pops, the retention
	// ceiling) and logs "limit exceeded (shadow)" instead of refusing, for
	// rolling limits out. Hard blocks always apply: storage, monthly quota,
	// billing hold and size caps. Default: enforce.
	Shadow bool `json:"shadow,omitempty"`

	// CellMaxParked caps the long-poll pops parked at once on this gateway,
	// across all clusters; each plan's max_parked_pops caps one cluster.
	// Default 5000.
	CellMaxParked int `json:"cell_max_parked,omitempty"`

	// MaxBatchItems caps the items of one produce request for plans that
	// set no max_batch_items. Default 10000.
	MaxBatchItems int `json:"max_batch_items,omitempty"`

	// ProduceMaxExchanges and ProduceMaxBytes bound the produce requests
	// in flight to the cells on this gateway (each may outlive its
	// client: detach.go), in exchanges and in the body bytes they hold;
	// ClusterProduceMaxExchanges and ClusterProduceMaxBytes bound one
	// cluster's share. Past a bound, 503 exchange_capacity before
	// forwarding. Defaults 1024, 256 MiB, 128 and 64 MiB.
	ProduceMaxExchanges        int `json:"produce_max_exchanges,omitempty"`
	ProduceMaxBytes            int `json:"produce_max_bytes,omitempty"`
	ClusterProduceMaxExchanges int `json:"cluster_produce_max_exchanges,omitempty"`
	ClusterProduceMaxBytes     int `json:"cluster_produce_max_bytes,omitempty"`

	// SpoolDir is where usage rows wait on disk while the database cannot
	// take them. Default: "queengate-spool" in Caddy's data directory.
	SpoolDir string `json:"spool_dir,omitempty"`

	// MeterFlushInterval is how often closed minutes of usage are written.
	// Default 15s.
	MeterFlushInterval caddy.Duration `json:"meter_flush_interval,omitempty"`

	// MetricsPerCluster adds a per-cluster request counter to the
	// Prometheus metrics. Off by default: its cardinality is the number of
	// clusters. No metric is ever labelled per API key.
	MetricsPerCluster bool `json:"metrics_per_cluster,omitempty"`

	// ReconcileInterval is how often the broker's queue inventory is read
	// per cluster, to keep queue admission and the storage quota in line
	// with what the broker holds. Default 60s.
	ReconcileInterval caddy.Duration `json:"reconcile_interval,omitempty"`

	// QuotaInterval is how often the usage maintenance runs (also once at
	// start): the roll-up, the pruning and the monthly quota chain, whose
	// warning and block a shorter interval announces sooner. Default 1h.
	QuotaInterval caddy.Duration `json:"quota_interval,omitempty"`

	// IsolationProbeInterval is how often each served cell's broker is
	// probed again for whether it scopes by x-queen-tenant (it is also
	// probed when first seen and after it was unreachable). A cell whose
	// broker does not, or is not yet known to, serves only its keeper
	// (the first cluster placed on it). Default 15m; each probe is 5
	// requests to the cell, and going up to scoped takes 3 probes in a row.
	IsolationProbeInterval caddy.Duration `json:"isolation_probe_interval,omitempty"`

	// Cells are the slugs of the cells this gateway (or its leader group)
	// fronts. It serves only clusters placed on them, answering any other
	// cluster 421 cluster_unknown before authentication and before any
	// limit, and records the claim at start in
	// queen_proxy.gateway_group_cells under its leader_group (or, for a
	// gateway of its own, its gateway_name, which must then be set). A
	// cell another group claimed first fails the start. Empty: the gateway
	// serves every cell no group has claimed, which keeps each limit exact
	// only while it is the one gateway on its control plane (a warning at
	// start says so); production sets it.
	Cells []string `json:"cells,omitempty"`

	// LeaderGroup makes this gateway one of a group that fronts one cell:
	// only the group's leader serves, a standby answers 503
	// gateway_standby (and /readyz 503) and takes over once the leader's
	// lease in the control-plane database expires. Empty: a gateway of its
	// own.
	LeaderGroup string `json:"leader_group,omitempty"`

	// GatewayName names this gateway in its group; unique in the group.
	// Default: the host name and the process id.
	GatewayName string `json:"gateway_name,omitempty"`

	// LeaderLeaseTTL is how long the leader's lease lives without renewal:
	// the longest a group goes unserved after its leader died. The leader
	// renews every fifth of it, a standby tries every tenth. Default 2s, at
	// least 500ms.
	LeaderLeaseTTL caddy.Duration `json:"leader_lease_ttl,omitempty"`

	// LeaderGroupSize is how many gateways the group has, this one
	// included. While the database is down for the leader, it serves on
	// only as long as every other member grants it time on the peer
	// address, which a member does only while it cannot reach the
	// database either. Default 2; set it on every member of a larger
	// group, or a member that never granted may take over while the leader
	// serves on the others' grants.
	LeaderGroupSize int `json:"leader_group_size,omitempty"`

	// LeaderGroupMembers are the gateway_name of every gateway of the
	// group, this one included, the same list on each. The peer address
	// answers only these members, and a leader serves on grants (while the
	// database is down for the whole group) only once every other one of
	// them has granted. Without it, the peer address answers any member
	// that proves peer_secret and no grant counts: a leader that cannot
	// reach the database stops at its own lease. Sets leader_group_size.
	LeaderGroupMembers []string `json:"leader_group_members,omitempty"`

	// PeerListen is the address (host:port) on which this gateway answers
	// the other members of its group, and nothing else. A standby asks the
	// holder of an expired lease there before it takes over, so a leader
	// that lost only the database is not joined by a second one. Keep it on
	// a network tenants do not reach. Requires LeaderGroup and PeerSecret.
	PeerListen string `json:"peer_listen,omitempty"`

	// PeerAddress is the URL the other members reach PeerListen at; it is
	// written into the lease while this gateway leads. Default
	// "http://" + PeerListen, which then must name one host. Placeholders
	// are expanded, for example "http://{env.POD_IP}:7946".
	PeerAddress string `json:"peer_address,omitempty"`

	// PeerSecret, the same on every gateway of the group, proves the
	// answers on the peer address (HMAC-SHA256 over a nonce the asker
	// draws); at least 32 bytes. Placeholders are expanded, for example
	// "{env.QUEENGATE_PEER_SECRET}".
	PeerSecret string `json:"peer_secret,omitempty"`

	backend     *backend
	limits      *limitState
	fronting    tenancy.Fronting
	released    bool
	logger      *zap.Logger
	sessionKeys *tenancy.SessionKeys
	// tokenIssuers is nil unless a jwt_issuer is configured.
	tokenIssuers *tenancy.TokenIssuers
	cookieNames  tenancy.CookieNames
	cellTokens   map[string]*tenancy.CellTokens
	// pushBlockSources are the live push-block flags (storage, monthly
	// quota) consulted before every push.
	pushBlockSources []limits.PushBlockSource
	// extraReadiness are readiness checks added by the app's parts.
	extraReadiness []ReadinessCheck
	// readiness is the last readiness verdict, for callers shown no detail.
	readiness *readinessCache
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
	a.readiness = new(readinessCache)
	raiseOpenFileLimit(a.logger)
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
	setDuration(&a.KeyTouchInterval, 10*time.Second)
	setDuration(&a.ReconcileInterval, time.Minute)
	setDuration(&a.QuotaInterval, meter.DefaultQuotaEvery)
	setDuration(&a.IsolationProbeInterval, 15*time.Minute)
	setDuration(&a.LeaderLeaseTTL, 2*time.Second)
	// Names may come from the environment at run time ({env.POD_NAME}):
	// two gateways must not share one by carrying the same placeholder.
	repl := caddy.NewReplacer()
	a.GatewayName = repl.ReplaceAll(a.GatewayName, "")
	a.LeaderGroup = repl.ReplaceAll(a.LeaderGroup, "")
	for i, c := range a.Cells {
		a.Cells[i] = repl.ReplaceAll(c, "")
	}
	a.fronting = a.frontingOf()
	if a.GatewayName == "" {
		a.GatewayName = defaultGatewayName()
	}
	a.PeerListen = repl.ReplaceAll(a.PeerListen, "")
	a.PeerAddress = repl.ReplaceAll(a.PeerAddress, "")
	a.PeerSecret = repl.ReplaceAll(a.PeerSecret, "")
	if a.PeerAddress == "" && a.PeerListen != "" {
		a.PeerAddress = "http://" + a.PeerListen
	}
	setDuration(&a.MeterFlushInterval, 15*time.Second)
	if a.SpoolDir == "" {
		a.SpoolDir = filepath.Join(caddy.AppDataDir(), "queengate-spool")
	}
	if a.CellMaxParked == 0 {
		a.CellMaxParked = limits.DefaultCellMaxParked
	}
	if a.MaxBatchItems == 0 {
		a.MaxBatchItems = 10000
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&a.ProduceMaxExchanges, defaultProduceMaxExchanges}, {&a.ProduceMaxBytes, defaultProduceMaxBytes},
		{&a.ClusterProduceMaxExchanges, defaultClusterProduceMaxExchanges}, {&a.ClusterProduceMaxBytes, defaultClusterProduceMaxBytes}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if err := a.provisionSessions(a.logger); err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	if err := a.provisionCellTokens(); err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	if err := a.provisionJWTIssuers(a.logger); err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	exportSettings, err := a.UsageExport.settings()
	if err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	b, err := acquireBackend(ctx, backendSettings{
		databaseURL:    a.DatabaseURL,
		poolMaxConns:   a.PoolMaxConns,
		skipMigrations: a.SkipMigrations,
		keyTouch:       time.Duration(a.KeyTouchInterval),
		spoolDir:       a.SpoolDir,
		meterFlush:     time.Duration(a.MeterFlushInterval),
		reconcile:      time.Duration(a.ReconcileInterval),
		quotaEvery:     time.Duration(a.QuotaInterval),
		isolationEvery: time.Duration(a.IsolationProbeInterval),
		webhooks:       a.Webhooks.settings(),
		usageExport:    exportSettings,
		leader: leaderSettings{group: a.LeaderGroup, name: a.GatewayName, ttl: time.Duration(a.LeaderLeaseTTL),
			members: a.LeaderGroupSize, memberNames: a.LeaderGroupMembers, peerListen: a.PeerListen, peerURL: a.PeerAddress, peerSecret: a.PeerSecret},
		identity: tenancy.IdentityCacheConfig{
			RevocationStrict: a.Sessions != nil && a.Sessions.RevocationStrict,
			LookupTimeout:    time.Duration(a.DatabaseTimeout),
		},
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
	b.app.Store(a)
	a.pushBlockSources = []limits.PushBlockSource{b.storage, b.quota}
	a.extraReadiness = append(a.extraReadiness, b.storageReadiness, b.isolationReadiness, b.leaderReadiness, a.frontingReadiness)
	ls, err := acquireLimitState(a.CellMaxParked)
	if err != nil {
		return fmt.Errorf("queen: limit state: %w", err)
	}
	a.limits = ls
	if err := a.stateFronting(ctx); err != nil {
		return fmt.Errorf("queen: %w", err)
	}
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		if err := reg.Register(&collector{app: a, perCluster: a.MetricsPerCluster}); err != nil {
			return fmt.Errorf("queen: register metrics: %w", err)
		}
	}
	mode := "enforce"
	if a.Shadow {
		mode = "shadow"
	}
	a.logger.Info("limits", zap.String("mode", mode), zap.Int("cell_max_parked", a.CellMaxParked))
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
	if a.CellMaxParked < 0 || a.MaxBatchItems < 0 {
		return fmt.Errorf("queen: cell_max_parked and max_batch_items must be positive")
	}
	if a.ProduceMaxExchanges < 0 || a.ProduceMaxBytes < 0 || a.ClusterProduceMaxExchanges < 0 || a.ClusterProduceMaxBytes < 0 {
		return fmt.Errorf("queen: produce_max_exchanges, produce_max_bytes, cluster_produce_max_exchanges and cluster_produce_max_bytes must be positive")
	}
	if a.LeaderLeaseTTL != 0 && time.Duration(a.LeaderLeaseTTL) < 500*time.Millisecond {
		return fmt.Errorf("queen: leader_lease_ttl must be at least 500ms, got %s", time.Duration(a.LeaderLeaseTTL))
	}
	if a.LeaderGroupSize < 0 || (a.LeaderGroupSize != 0 && a.LeaderGroup == "") {
		return fmt.Errorf("queen: leader_group_size must be positive and needs leader_group, got %d", a.LeaderGroupSize)
	}
	if err := a.validateMembers(); err != nil {
		return err
	}
	if a.LeaderGroup != "" && strings.TrimSpace(a.LeaderGroup) != a.LeaderGroup {
		return fmt.Errorf("queen: leader_group %q has surrounding spaces", a.LeaderGroup)
	}
	if err := a.validateCells(); err != nil {
		return err
	}
	if err := a.validatePeer(); err != nil {
		return err
	}
	if a.KeyTouchInterval != 0 && time.Duration(a.KeyTouchInterval) < time.Second {
		return fmt.Errorf("queen: key_touch_interval must be at least 1s, got %s", time.Duration(a.KeyTouchInterval))
	}
	for cell, c := range a.CellTokens {
		if c == nil {
			continue
		}
		switch c.Algorithm {
		case "HS256", "EdDSA":
		default:
			return fmt.Errorf("queen: cell_token %s: algorithm must be HS256 or EdDSA, got %q", cell, c.Algorithm)
		}
	}
	return nil
}

// Start implements caddy.App; the app's work starts in Provision, where
// its shared backend is acquired.
func (a *App) Start() error { return nil }

// Stop implements caddy.App. When the process is exiting (not on a
// reload, where the backend lives on), a group leader hands its lease over
// at once, while the HTTP servers may still drain: the standby serves
// from its next attempt instead of after the whole shutdown.
func (a *App) Stop() error {
	if caddy.Exiting() && a.backend != nil {
		a.backend.handOver()
	}
	return nil
}

// Cleanup releases this configuration's hold on the shared backend; the
// pool and listener close when no configuration uses them any more.
//
// The backend pointer is kept: requests of this configuration still in
// flight during a reload may finish with it.
func (a *App) Cleanup() error {
	if a.backend == nil || a.released {
		return nil
	}
	a.released = true
	if a.limits != nil {
		_, _ = limitStates.Delete(limitStateKey)
	}
	_, err := backends.Delete(a.backend.key)
	return err
}

// Cache returns the cluster cache.
func (a *App) Cache() *tenancy.ClusterCache { return a.backend.cache }

// Identities returns the cache of roles, operator bits and revoked tokens.
func (a *App) Identities() *tenancy.IdentityCache { return a.backend.identity }

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
