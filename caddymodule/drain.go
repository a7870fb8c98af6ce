package caddymodule

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// errClusterDraining answers a cluster that is leaving its cell: nothing
// more of it is sent there (docs/isolation.md, "When the keeper leaves").
var errClusterDraining = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.ClusterDraining,
	Message: "this cluster is leaving its cell (moved or being deleted); nothing more of it is sent there", RetryAfter: 1}

// errGatewayLapsed answers a cell's keeper while this gateway has not
// reached the control-plane database for longer than it may serve one: the
// control plane stops waiting for a gateway it does not hear from, and may
// have handed the cell to the next cluster meanwhile.
var errGatewayLapsed = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.GatewayLapsed,
	Message: "this gateway has lost touch with the control plane for too long to serve this cluster's cell; retry", RetryAfter: 1}

// statusRefusal is the status gate: suspended and deleting clusters are not
// served, nor one being drained off its cell.
func statusRefusal(c *tenancy.Cluster) *apierror.Error {
	switch {
	case !c.Status.Serves():
		return errClusterSuspended
	case c.Draining:
		return errClusterDraining
	}
	return nil
}

// enterCell is the last check before a request goes to its cell, after its
// body was read and every gate passed, which may have taken long (a body
// arriving slowly): the request is counted as on its way (the count a
// drain waits for), and then checked again against what the gateway knows
// now of its cluster, all from memory. The cluster must still be served
// (status), on the same cell, not drained off it, and its cell must still
// serve it; a keeper of a cell that does not scope only while this gateway's
// heartbeat is recent. The caller calls Leave on the Flight once the
// exchange has ended, detached ones included.
func (g *Gateway) enterCell(ctx context.Context, c *tenancy.Cluster) (*tenancy.Flight, *apierror.Error) {
	b := g.app.backend
	f, ok := b.drains.Enter(c.ID, c.CellID)
	if !ok {
		// A cluster being deleted says so, as the status gate would.
		if e := g.stillServed(ctx, c); e != nil {
			return nil, e
		}
		return nil, errClusterDraining
	}
	if e := g.stillServed(ctx, c); e != nil {
		f.Leave()
		return nil, e
	}
	return f, nil
}

func (g *Gateway) stillServed(ctx context.Context, c *tenancy.Cluster) *apierror.Error {
	b := g.app.backend
	// By slug, the key the cache keeps without building one; the id
	// tells a cluster made again under the same slug apart.
	now, err := b.cache.ClusterBySlug(ctx, c.Slug)
	if err == nil && now.ID != c.ID {
		err = tenancy.ErrNotFound
	}
	if err != nil {
		if !errors.Is(err, tenancy.ErrNotFound) {
			g.logger.Warn("cluster lookup before forwarding failed; refusing", zap.String("cluster", c.Slug), zap.Error(err))
		}
		return errClusterUnknown
	}
	if e := statusRefusal(now); e != nil {
		return e
	}
	if now.CellID != c.CellID {
		return errClusterDraining
	}
	d := b.isolation.Decide(tenancy.ProbeCellOf(c), c.ID)
	if !d.Serve {
		return errCellNotIsolated
	}
	if d.Verdict != tenancy.ScopingScoped && !b.drains.Live() {
		return errGatewayLapsed
	}
	return nil
}

// newDrains gives the backend its drains: a random gateway id, the
// heartbeat, and what a lapse or a fence drops from the caches. The first
// heartbeat runs now when the database answers, so a keeper is served from
// the first request on.
func (b *backend) newDrains(ctx, runCtx context.Context, databaseUp bool, log *zap.Logger) {
	var id [16]byte
	_, _ = rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	b.drains = tenancy.NewDrains(tenancy.DrainConfig{
		Store:     tenancy.PgDrainStore{Pool: b.pool},
		GatewayID: fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]),
		Name:      b.gatewayName,
		Lapsed: func() {
			b.cache.InvalidateAll()
			b.identity.InvalidateAll()
		},
		Fenced:  b.cache.InvalidateCluster,
		Log:     log.Named("drain"),
		Context: runCtx,
	})
	if databaseUp {
		first, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.drains.Beat(first); err != nil {
			log.Warn("first gateway heartbeat failed; a cell's keeper is served once one succeeds", zap.Error(err))
		}
	}
}

// leaveDrains takes the gateway off the live gateways, so that no drain
// waits for its heartbeat to lapse.
func (b *backend) leaveDrains() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.drains.Stop(ctx)
}
