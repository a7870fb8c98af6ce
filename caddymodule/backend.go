package caddymodule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

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
}

type backend struct {
	key      string
	pool     *pgxpool.Pool
	cache    *tenancy.ClusterCache
	identity *tenancy.IdentityCache
	toucher  *tenancy.KeyToucher
	listener *tenancy.InvalidationListener
	stop     context.CancelFunc
	stopped  chan struct{}
}

// listenerReadyWait bounds how long start-up waits for the invalidation
// listener, so that changes made right after start are seen at once.
const listenerReadyWait = 5 * time.Second

func acquireBackend(ctx caddy.Context, s backendSettings, log *zap.Logger) (*backend, error) {
	key := fmt.Sprintf("%s|%d|%v|%v|%+v|%+v", s.databaseURL, s.poolMaxConns, s.skipMigrations, s.keyTouch, s.cache, s.identity)
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
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(startCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the control-plane database %s: %w", redactURL(s.databaseURL), err)
	}
	if !s.skipMigrations {
		applied, err := migrations.Apply(startCtx, pool)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("apply migrations: %w", err)
		}
		if len(applied) > 0 {
			log.Info("applied control-plane migrations", zap.Strings("migrations", applied))
		}
	}

	store := tenancy.NewStore(pool)
	cache := tenancy.NewClusterCache(store, s.cache, log.Named("cache"))
	identity := tenancy.NewIdentityCache(store, s.identity, log.Named("identity"))
	runCtx, stop := context.WithCancel(context.Background())
	b := &backend{key: key, pool: pool, cache: cache, identity: identity,
		toucher: tenancy.NewKeyToucher(pool, s.keyTouch, log.Named("key_touch")),
		stop:    stop, stopped: make(chan struct{})}
	b.listener = &tenancy.InvalidationListener{
		ConnString: s.databaseURL,
		OnCluster: func(id string) {
			cache.InvalidateCluster(id)
			identity.InvalidateCluster(id)
		},
		OnConnected: func() {
			cache.InvalidateAll()
			identity.InvalidateAll()
		},
		OnSessionRevoked: identity.InvalidateRevocations,
		Log:              log.Named("invalidation"),
	}
	ready := b.listener.Ready()
	var workers sync.WaitGroup
	workers.Go(func() { b.listener.Run(runCtx) })
	workers.Go(func() { b.toucher.Run(runCtx) })
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

// Destruct stops the listener and closes the pool; called when the last
// configuration using this backend is unloaded.
func (b *backend) Destruct() error {
	b.stop()
	<-b.stopped
	b.pool.Close()
	return nil
}
