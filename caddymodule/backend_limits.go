package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// newLimitsAndMeter builds the state that lives with the database: the
// meter and its spool, the monthly quota chain, the queue registry and the
// storage quota.
func (b *backend) newLimitsAndMeter(s backendSettings, log *zap.Logger) error {
	m, err := meter.New(meter.Config{Pool: b.pool, SpoolDir: s.spoolDir, FlushEvery: s.meterFlush, Log: log.Named("meter")})
	if err != nil {
		return fmt.Errorf("meter: %w", err)
	}
	b.meter = m
	b.requests = meter.NewRequestTally(b.pool, nil, log.Named("requests"))
	b.quota = meter.NewQuota(b.pool, nil, log.Named("quota"))
	b.admission = limits.NewAdmission(&limits.PgAdmissionStore{Pool: b.pool})
	b.storage = limits.NewStorage(nil)
	b.kick = make(chan struct{}, 1)
	b.reconciler = &limits.Reconciler{
		Clusters:  b.reconcileTargets,
		Client:    &http.Client{Timeout: 10 * time.Second},
		Storage:   b.storage,
		Admission: b.admission,
		Every:     s.reconcile,
		Log:       log.Named("inventory"),
		OnReporting: func(ctx context.Context, ref limits.ClusterRef, reported bool) {
			b.recordStorageReporting(ctx, ref, reported, log)
		},
	}
	return nil
}

// requestFlushEvery is how often the per-key request counts are written:
// often enough that the console's refusal chart is minutes-fresh even
// without the live counts of another gateway.
const requestFlushEvery = 5 * time.Second

// runLimitsAndMeter starts the background work: the meter's flushes and
// spool replay, the quota chain every quotaEvery (also at start), the registry's
// coalescing writer, and the inventory reconciler.
func (b *backend) runLimitsAndMeter(ctx context.Context, workers *sync.WaitGroup, quotaEvery time.Duration, log *zap.Logger) {
	workers.Go(func() { b.meter.Run(ctx) })
	workers.Go(func() { b.requests.Run(ctx, requestFlushEvery) })
	workers.Go(func() { b.quota.Run(ctx, quotaEvery) })
	workers.Go(func() { b.admission.Run(ctx, time.Second) })
	workers.Go(func() { b.reconciler.Run(ctx) })
	workers.Go(func() { b.reconcileOnNewCells(ctx) })
	workers.Go(func() { b.reportStorageQuota(ctx, log) })
}

// reportStorageQuota says once in the log when the storage quota turns
// out to be inactive (the broker reports no byte counts), and again if
// that changes.
func (b *backend) reportStorageQuota(ctx context.Context, log *zap.Logger) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	reported, wasActive := false, false
	for {
		if active, known := b.storage.Active(); known && (!reported || active != wasActive) {
			if active {
				log.Info("storage quota active: the broker reports retained bytes")
			} else {
				log.Warn("storage quota inactive: the broker reports no retained bytes (broker older than 0.16); max_retained_bytes is not enforced")
			}
			reported, wasActive = true, active
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// noteCell marks a cluster's cell as served by this gateway: its clusters
// join the inventory reconciler, and a cell seen for the first time is
// reconciled at once rather than at the next interval.
func (b *backend) noteCell(c *tenancy.Cluster) {
	// Load first: LoadOrStore boxes its key on every call, and nearly every
	// call finds the cell already seen.
	if _, seen := b.seenCells.Load(c.CellID); seen {
		return
	}
	if _, seen := b.seenCells.LoadOrStore(c.CellID, struct{}{}); seen {
		return
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *backend) reconcileOnNewCells(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
			_ = b.reconciler.RunOnce(ctx)
		}
	}
}

// reconcileTargets lists the clusters of the cells this gateway serves,
// with what the reconciler needs to read their inventory.
func (b *backend) reconcileTargets(ctx context.Context) ([]limits.ClusterRef, error) {
	var cells []string
	b.seenCells.Range(func(k, _ any) bool {
		cells = append(cells, k.(string))
		return true
	})
	if len(cells) == 0 {
		return nil, nil
	}
	clusters, err := b.store.ClustersOnCells(ctx, cells)
	if err != nil {
		return nil, err
	}
	app := b.app.Load()
	refs := make([]limits.ClusterRef, 0, len(clusters))
	for _, c := range clusters {
		// A cluster its cell does not serve has no namespace of its own
		// there: the listing would be another cluster's.
		if !b.isolation.Serves(tenancy.ProbeCellOf(c), c.ID) {
			continue
		}
		refs = append(refs, limits.ClusterRef{
			ID: c.ID, BrokerTenant: c.BrokerTenant, CellID: c.CellID, CellURL: c.CellURL,
			Authorization: app.inventoryCredential(c), MaxRetainedBytes: c.Limits.MaxRetainedBytes,
		})
	}
	return refs, nil
}

// inventoryCredential is what the gateway presents to a cell to read a
// cluster's queue listing: a read-only token in the gateway's own name,
// or the cell's static secret.
func (a *App) inventoryCredential(c *tenancy.Cluster) string {
	return a.ownCellCredential(c.CellSlug, c.CellSecret, "queengate-inventory", tenancy.BrokerRoleReadOnly)
}

// ownCellCredential is what the gateway presents to a cell for a request
// in its own name (subject, with role): a minted token when the cell has a
// cell_token entry, else the cell's static secret, else nothing.
func (a *App) ownCellCredential(cellSlug, secret, subject, role string) string {
	if a == nil {
		return ""
	}
	if tokens := a.cellTokensFor(cellSlug); tokens != nil {
		tok, err := tokens.Token(subject, role)
		if err != nil {
			return ""
		}
		return "Bearer " + tok
	}
	if secret != "" {
		return "Bearer " + secret
	}
	return ""
}

// storageReadiness reports the storage quota's state on the readiness
// endpoint; an inactive quota is not a reason to stop traffic.
func (b *backend) storageReadiness(context.Context) (string, string, bool) {
	active, known := b.storage.Active()
	switch {
	case !known:
		return "storage_quota", "not measured yet", true
	case !active:
		return "storage_quota", "inactive: the broker reports no retained bytes (broker older than 0.16)", true
	}
	return "storage_quota", "active", true
}

// recordStorageReporting writes whether a cell's broker reports retained
// bytes to cells.storage_reporting when it differs from what this gateway
// wrote last, so that `caddy queen plan list`, `cluster override` and the
// console show the storage quota as inactive where it is.
func (b *backend) recordStorageReporting(ctx context.Context, ref limits.ClusterRef, reported bool, log *zap.Logger) {
	value := "not_reported"
	if reported {
		value = "reported"
	}
	key := ref.CellID + "\x00" + ref.CellURL
	if last, ok := b.storageReporting.Load(key); ok && last == value {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.pool.Exec(ctx, `SELECT queen_proxy.record_cell_storage_reporting($1::uuid, $2, $3)`,
		ref.CellID, value, ref.CellURL); err != nil {
		log.Warn("cell storage reporting not recorded in the database", zap.String("cell_id", ref.CellID), zap.Error(err))
		return
	}
	b.storageReporting.Store(key, value)
}
