package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/leader"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

// backends holds the database pool, cluster cache and invalidation listener
// across config reloads: a reload that keeps the same settings keeps a warm
// cache and never drops the LISTEN connection.
var backends = caddy.NewUsagePool()

type backendSettings struct {
	databaseURL    string
	poolMaxConns   int32
	skipMigrations bool
	keyTouch       time.Duration
	cache          tenancy.CacheConfig
	identity       tenancy.IdentityCacheConfig
	spoolDir       string
	meterFlush     time.Duration
	reconcile      time.Duration
	quotaEvery     time.Duration
	isolationEvery time.Duration
	leader         leaderSettings
	webhooks       webhookSettings
	usageExport    usageExportSettings
}

type backend struct {
	key      string
	pool     *pgxpool.Pool
	cache    *tenancy.ClusterCache
	identity *tenancy.IdentityCache
	toucher  *tenancy.KeyToucher
	// hostLookups bounds the lookups of hosts and TLS names the cache
	// cannot answer, across every site and the TLS permission module.
	hostLookups *harden.HostLookups
	listener    *tenancy.InvalidationListener
	standing    standingHooks
	stop        context.CancelFunc
	stopped     chan struct{}

	store      *tenancy.Store
	meter      *meter.Meter
	requests   *meter.RequestTally // per key and outcome, for the console
	quota      *meter.Quota
	admission  *limits.Admission
	storage    *limits.Storage
	reconciler *limits.Reconciler
	isolation  *tenancy.CellIsolation
	drains     *tenancy.Drains
	// elector is nil for a gateway that is not part of a group.
	elector *leader.Elector
	// leasePool is the elector's own connections; nil without a group.
	leasePool *pgxpool.Pool
	// webhookPool is the webhook dispatcher's own connections; nil when
	// this gateway does not deliver.
	webhookPool *pgxpool.Pool
	// exportPool is the usage export's; nil without usage_export.
	exportPool  *pgxpool.Pool
	peerServer  *http.Server // answers the group's members; nil without peer_listen
	gatewayName string
	seenCells   sync.Map // cell id -> struct{}: the cells whose clusters are reconciled
	// storageReporting remembers, per cell id and URL, the storage_reporting
	// value this gateway last wrote, so that it writes only changes.
	storageReporting sync.Map
	kick             chan struct{}
	staleGrace       time.Duration
	// lastDatabaseOK is when the database last answered a readiness ping
	// (unix nanoseconds).
	lastDatabaseOK atomic.Int64
	// app is the configuration currently using the backend, for what the
	// background work needs from it (cell credentials).
	app atomic.Pointer[App]
}

// listenerReadyWait bounds how long start-up waits for the invalidation
// listener, so that changes made right after start are seen at once.
const listenerReadyWait = 5 * time.Second

func acquireBackend(ctx caddy.Context, s backendSettings, log *zap.Logger) (*backend, error) {
	key := fmt.Sprintf("%s|%d|%v|%v|%+v|%+v|%s|%v|%v|%v|%v|%+v|%+v|%+v", s.databaseURL, s.poolMaxConns, s.skipMigrations, s.keyTouch,
		s.cache, s.identity, s.spoolDir, s.meterFlush, s.reconcile, s.quotaEvery, s.isolationEvery, s.leader, s.webhooks, s.usageExport)
	v, _, err := backends.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newBackend(ctx, key, s, log)
	})
	if err != nil {
		return nil, err
	}
	return v.(*backend), nil
}

func newBackend(ctx context.Context, key string, s backendSettings, log *zap.Logger) (*backend, error) {
	cfg, err := pgxpool.ParseConfig(s.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database_url: %w", err)
	}
	cfg.MaxConns = s.poolMaxConns
	cfg.ConnConfig.ConnectTimeout = s.cache.LookupTimeout
	cfg.ConnConfig.RuntimeParams["application_name"] = "queengate"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("create database pool: %w", err)
	}
	// A database that does not answer at start is waited for in the
	// background: the gateway starts, refuses what it cannot confirm and
	// is not ready, and recovers by itself, so a restart during an outage
	// loses nothing (the meter's spool is replayed once it answers). A
	// database that answers but cannot be migrated is a configuration
	// error and fails the start.
	startCtx, cancel := context.WithTimeout(ctx, s.cache.LookupTimeout)
	defer cancel()
	databaseUp := pool.Ping(startCtx) == nil
	if databaseUp {
		if err := migrate(startCtx, pool, s, log); err != nil {
			pool.Close()
			return nil, err
		}
	}

	store := tenancy.NewStore(pool)
	cache := tenancy.NewClusterCache(store, s.cache, log.Named("cache"))
	identity := tenancy.NewIdentityCache(store, s.identity, log.Named("identity"))
	runCtx, stop := context.WithCancel(context.Background())
	b := &backend{key: key, pool: pool, cache: cache, identity: identity, store: store,
		toucher:     tenancy.NewKeyToucher(pool, s.keyTouch, log.Named("key_touch")),
		hostLookups: harden.NewHostLookups(harden.HostLookupsConfig{}),
		stop:        stop, stopped: make(chan struct{})}
	b.staleGrace = s.cache.StaleGrace
	if databaseUp {
		b.lastDatabaseOK.Store(time.Now().UnixNano())
	}
	b.newCellIsolation(s.isolationEvery, log)
	if err := b.newElector(ctx, s.databaseURL, s.leader, log); err != nil {
		stop()
		pool.Close()
		return nil, err
	}
	b.newDrains(ctx, runCtx, databaseUp, log)
	if err := b.newLimitsAndMeter(s, log); err != nil {
		b.closePeer()
		b.closeLeasePool()
		stop()
		pool.Close()
		return nil, err
	}
	b.listener = &tenancy.InvalidationListener{
		ConnString: s.databaseURL,
		OnCluster: func(id string) {
			cache.InvalidateCluster(id)
			identity.InvalidateCluster(id)
			b.admission.Invalidate(id)
			b.drains.Kick()
		},
		OnConnected: func() {
			cache.InvalidateAll()
			identity.InvalidateAll()
			b.standingChanged()
			// The database is back: replay spooled usage now rather than
			// after the meter's cool-down.
			go b.meter.DatabaseAnswers(runCtx)
		},
		OnSessionRevoked: func() {
			identity.InvalidateUsers()
			b.standingChanged()
		},
		Log: log.Named("invalidation"),
	}
	ready := b.listener.Ready()
	var workers sync.WaitGroup
	workers.Go(func() { b.listener.Run(runCtx) })
	workers.Go(func() { b.toucher.Run(runCtx) })
	workers.Go(func() { b.isolation.Run(runCtx) })
	workers.Go(func() { b.drains.Run(runCtx) })
	if b.elector != nil {
		workers.Go(func() { b.elector.Run(runCtx) })
	}
	b.runLimitsAndMeter(runCtx, &workers, s.quotaEvery, log)
	if err := b.startWebhooks(runCtx, &workers, s.databaseURL, s.leader.name, s.webhooks, log); err != nil {
		// Only a database URL pgx cannot parse gets here, and the main
		// pool parsed the same one: deliveries wait for the next start.
		log.Error("webhook delivery not started", zap.Error(err))
	}
	if err := b.startUsageExport(runCtx, &workers, s.databaseURL, s.usageExport, log); err != nil {
		log.Error("usage export not started", zap.Error(err))
	}
	if !databaseUp {
		log.Error("control-plane database unreachable at start; refusing what cannot be confirmed until it answers",
			zap.String("database", redactURL(s.databaseURL)))
		workers.Go(func() { b.awaitDatabase(runCtx, s, log) })
	}
	go func() {
		workers.Wait()
		close(b.stopped)
	}()
	select {
	case <-ready:
	case <-time.After(listenerReadyWait):
		log.Warn("cache invalidation listener not connected yet; continuing, changes are seen within the cache TTL until it connects")
	}
	return b, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool, s backendSettings, log *zap.Logger) error {
	if s.skipMigrations {
		return nil
	}
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	if len(applied) > 0 {
		log.Info("applied control-plane migrations", zap.Strings("migrations", applied))
	}
	return nil
}

// awaitDatabase retries, with a backoff of at most 5 s (a ping is cheap),
// until the database answers and is migrated, then has the meter replay
// what it spooled.
func (b *backend) awaitDatabase(ctx context.Context, s backendSettings, log *zap.Logger) {
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		attempt, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := b.pool.Ping(attempt)
		if err == nil {
			err = migrate(attempt, b.pool, s, log)
		}
		cancel()
		if err == nil {
			b.lastDatabaseOK.Store(time.Now().UnixNano())
			log.Info("control-plane database answers")
			b.claimFrontingLate(ctx, log)
			b.meter.DatabaseAnswers(ctx)
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Destruct stops the listener and closes the pool; called when the last
// configuration using this backend is unloaded.
func (b *backend) Destruct() error {
	b.handOver()
	b.closePeer()
	b.stop()
	<-b.stopped
	b.leaveDrains()
	b.closeLeasePool()
	b.closeWebhookPool()
	b.closeExportPool()
	b.pool.Close()
	return nil
}
