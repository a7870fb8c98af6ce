package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/tenancy"
)

// The fleet of processes measures a revocation end to end, but on a small
// machine a hundred gateways, PostgreSQL and the probes compete for the
// same cores, and the figure becomes the machine's. The caches below are
// the other half: n instances of the gateway's control-plane side (its
// store on a pool of its own, its cluster cache, and its invalidation
// listener wired to the cache as the gateway wires it), in this process,
// so that what they time is the notification's way from the operator's
// commit to every cache, with nothing else on the cores.

// cacheInstance is one gateway's control-plane side.
type cacheInstance struct {
	pool     *pgxpool.Pool
	cache    *tenancy.ClusterCache
	listener *tenancy.InvalidationListener
}

// startCaches starts n instances and waits until each listens.
func (fe *fanoutEnv) startCaches(ctx context.Context, n int) ([]*cacheInstance, func(), error) {
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var out []*cacheInstance
	closeAll := func() {
		stop()
		wg.Wait()
		for _, c := range out {
			c.pool.Close()
		}
	}
	for range n {
		cfg, err := pgxpool.ParseConfig(fe.dbURL)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cfg.MaxConns = 2
		cfg.ConnConfig.RuntimeParams["application_name"] = "bench-cache"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cache := tenancy.NewClusterCache(tenancy.NewStore(pool), tenancy.CacheConfig{}, zap.NewNop())
		c := &cacheInstance{pool: pool, cache: cache, listener: &tenancy.InvalidationListener{
			ConnString:  fe.dbURL,
			OnCluster:   cache.InvalidateCluster,
			OnConnected: cache.InvalidateAll,
		}}
		out = append(out, c)
		ready := c.listener.Ready()
		wg.Go(func() { c.listener.Run(runCtx) })
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			closeAll()
			return nil, nil, errors.New("an invalidation listener did not connect within 30 s")
		}
	}
	return out, closeAll, nil
}

// revokeInCaches issues a key, has every instance cache it, revokes it
// through the operator's command and times each instance's drop of it,
// watching the cache itself every millisecond.
func (fe *fanoutEnv) revokeInCaches(ctx context.Context, caches []*cacheInstance) (revocation, error) {
	c := fe.clusters[0]
	k, err := controlplane.CreateKey(ctx, fe.operator, controlplane.NewKey{Cluster: c.id, Name: "fanout", Scopes: []string{"read"}})
	if err != nil {
		return revocation{}, err
	}
	for i, inst := range caches {
		if _, err := inst.cache.APIKey(ctx, k.Key); err != nil {
			return revocation{}, fmt.Errorf("instance %d: the new key: %w", i, err)
		}
	}
	r := revocation{perGateway: make([]time.Duration, len(caches))}
	start := time.Now()
	if _, err := controlplane.RevokeKey(ctx, fe.operator, k.ID); err != nil {
		return r, err
	}
	var wg sync.WaitGroup
	for i, inst := range caches {
		wg.Go(func() {
			r.perGateway[i] = -1
			for time.Since(start) < revocationTimeout && ctx.Err() == nil {
				if inst.cache.KnownAPIKey(k.Key) == nil {
					r.perGateway[i] = time.Since(start)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	// What a request would see next: the database says revoked.
	if _, err := caches[0].cache.APIKey(ctx, k.Key); !errors.Is(err, tenancy.ErrNotFound) {
		return r, fmt.Errorf("a revoked key looked up again: %v, want not found", err)
	}
	return r, nil
}
