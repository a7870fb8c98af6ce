package tenancy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// A cluster leaving a cell (deleted, or released as the keeper of a cell
// without tenancy) must send nothing more there: a push admitted before the
// gateway learned of the change, still on its way, would land after the
// operator checked the broker. The control plane drains the cluster first
// (migrations/022): every gateway stops forwarding it to that cell, waits
// until what it admitted for it has ended, and acknowledges; the keeper is
// released only once every live gateway has. Drains is one gateway's part:
// it counts, per cluster, the requests on their way to a cell, fences the
// clusters being drained, acknowledges the drains, and keeps the gateway's
// heartbeat, without which it must not serve a keeper (a gateway the
// control plane no longer sees is not waited for).

// DrainLapse is how long after its last heartbeat a gateway still counts
// as serving for the control plane (queen_proxy.gateway_lapse()).
const DrainLapse = 10 * time.Second

// DefaultDrainLiveFor is how long after its last heartbeat a gateway goes on
// serving a keeper: well within DrainLapse, so that it has stopped before
// the control plane stops waiting for it.
const DefaultDrainLiveFor = 6 * time.Second

// DefaultDrainKickGap is DrainConfig.KickGap's default: a drain is still
// seen well within the heartbeat's second.
const DefaultDrainKickGap = 250 * time.Millisecond

// Drain is one cluster being drained off a cell, as one gateway sees it.
type Drain struct {
	ID        string
	ClusterID string
	CellID    string
	Acked     bool // by this gateway
}

// DrainStore is what Drains needs of the control-plane database; PgDrainStore
// is the production one.
type DrainStore interface {
	// Heartbeat records that the gateway is alive and reports whether the
	// control plane counted it alive already.
	Heartbeat(ctx context.Context, gateway, name string) (wasLive bool, err error)
	// Leave removes the gateway: no drain waits for it any more.
	Leave(ctx context.Context, gateway string) error
	// Drains lists every drain under way, with whether gateway acknowledged it.
	Drains(ctx context.Context, gateway string) ([]Drain, error)
	// Ack records that gateway forwards nothing more of the drain's cluster.
	Ack(ctx context.Context, drain, gateway string) error
	// StillFenced returns which of the fences (cluster id -> cell id) must
	// stay: all but those whose cluster is on that cell with no drain.
	StillFenced(ctx context.Context, fences map[string]string) (map[string]bool, error)
}

// DrainConfig configures Drains.
type DrainConfig struct {
	Store     DrainStore
	GatewayID string // random per gateway process (per backend)
	Name      string // shown to the operator a drain waits for
	// Every is the heartbeat interval, and how often drains are looked for
	// when no invalidation asks sooner. Default 1s.
	Every time.Duration
	// KickGap is the least time between two looks at the drains that an
	// invalidation asks for. Every change to any cluster (a key issued or
	// revoked, a limit changed) notifies every gateway, and the
	// notification does not say whether it was a drain; under a steady
	// stream of key changes a look per notification would have each
	// gateway of a fleet read the drains at the rate of the changes.
	// Kicks within the gap are answered by one look at its end, so none
	// is lost. Default DefaultDrainKickGap, at most a quarter of Every.
	KickGap time.Duration
	// LiveFor: see DefaultDrainLiveFor.
	LiveFor time.Duration
	// Lapsed is called when the gateway beats again after the control plane
	// stopped counting it alive (or it stopped counting itself): drains may
	// have gone on without it, so everything cached must go.
	Lapsed func()
	// Fenced is called with a cluster id when a drain of it is first seen,
	// for the cache to forget what it read before.
	Fenced func(clusterID string)
	Log    *zap.Logger
	// Context bounds the waits for acknowledgments (the gateway's life).
	Context context.Context
}

// Drains is the gateway's side of the control plane's drains.
type Drains struct {
	cfg     DrainConfig
	base    time.Time
	beat    atomic.Int64 // nanoseconds after base of the last heartbeat's start; 0: none
	flights sync.Map     // cluster id -> *Flight
	kick    chan struct{}

	mu      sync.Mutex
	waiting map[string]bool // drain ids whose acknowledgment is being waited for
}

// Flight counts the requests of one cluster on their way to its cell.
type Flight struct {
	n      atomic.Int64
	fenced atomic.Pointer[string] // the cell the cluster is drained off; nil: none
}

// Leave ends one request's way to the cell.
func (f *Flight) Leave() { f.n.Add(-1) }

// NewDrains returns the gateway's drains; Run starts its heartbeat.
func NewDrains(cfg DrainConfig) *Drains {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.KickGap <= 0 {
		cfg.KickGap = min(DefaultDrainKickGap, cfg.Every/4)
	}
	if cfg.LiveFor <= 0 {
		cfg.LiveFor = DefaultDrainLiveFor
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	return &Drains{cfg: cfg, base: time.Now(), kick: make(chan struct{}, 1), waiting: map[string]bool{}}
}

// GatewayID is the id under which the gateway heartbeats and acknowledges.
func (d *Drains) GatewayID() string { return d.cfg.GatewayID }

func (d *Drains) flight(clusterID string) *Flight {
	if f, ok := d.flights.Load(clusterID); ok {
		return f.(*Flight)
	}
	f, _ := d.flights.LoadOrStore(clusterID, new(Flight))
	return f.(*Flight)
}

// Enter counts a request of the cluster as on its way to cellID and reports
// whether it may go there: not while the cluster is drained off that cell.
// The count is raised before the fence is read, and the drain sets the
// fence before it reads the count, so a request either sees the fence or is
// counted by the drain. The caller calls Leave on the returned Flight once
// the exchange with the cell has ended, and only when ok.
func (d *Drains) Enter(clusterID, cellID string) (f *Flight, ok bool) {
	f = d.flight(clusterID)
	f.n.Add(1)
	if c := f.fenced.Load(); c != nil && *c == cellID {
		f.n.Add(-1)
		return nil, false
	}
	return f, true
}

// InFlight reports how many requests of the cluster are on their way.
func (d *Drains) InFlight(clusterID string) int64 { return d.flight(clusterID).n.Load() }

// Live reports whether the gateway's last heartbeat is recent enough for it
// to serve a keeper.
func (d *Drains) Live() bool {
	b := d.beat.Load()
	return b != 0 && time.Since(d.base)-time.Duration(b) < d.cfg.LiveFor
}

// Kick has the drains looked at now (an invalidation may be one).
func (d *Drains) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Beat runs one heartbeat and looks at the drains; the gateway counts as
// alive from its start on only when both succeeded.
func (d *Drains) Beat(ctx context.Context) error {
	start := time.Since(d.base)
	wasLive, err := d.cfg.Store.Heartbeat(ctx, d.cfg.GatewayID, d.cfg.Name)
	if err != nil {
		return err
	}
	if (!wasLive || !d.Live()) && d.cfg.Lapsed != nil {
		d.cfg.Lapsed()
	}
	if err := d.look(ctx); err != nil {
		return err
	}
	d.beat.Store(max(int64(start), 1))
	return nil
}

// Run heartbeats every Every (and looks at the drains after a Kick, at
// most once per KickGap) until ctx ends, then leaves.
func (d *Drains) Run(ctx context.Context) {
	tick := time.NewTicker(d.cfg.Every)
	defer tick.Stop()
	var lastWarn, lastLook time.Time
	// deferred fires at the end of the gap for the kicks that came within
	// it; nil when none is waiting.
	var deferred <-chan time.Time
	look := func() {
		lastLook = time.Now()
		deferred = nil
		if err := d.look(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn("reading drains failed", zap.Error(err))
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// The beat looks at the drains after every kick so far.
			lastLook, deferred = time.Now(), nil
			err := d.Beat(ctx)
			if err != nil && ctx.Err() == nil && time.Since(lastWarn) > 10*time.Second {
				lastWarn = time.Now()
				d.cfg.Log.Warn("gateway heartbeat failed; a cell's keeper is not served once it has lapsed",
					zap.Duration("keeper_served_for", d.cfg.LiveFor), zap.Error(err))
			}
		case <-d.kick:
			if deferred != nil {
				continue
			}
			if wait := d.cfg.KickGap - time.Since(lastLook); wait > 0 {
				deferred = time.After(wait)
				continue
			}
			look()
		case <-deferred:
			look()
		}
	}
}

// Stop removes the gateway from the control plane's live gateways.
func (d *Drains) Stop(ctx context.Context) {
	if err := d.cfg.Store.Leave(ctx, d.cfg.GatewayID); err != nil {
		d.cfg.Log.Warn("could not remove the gateway from the live gateways; drains wait for its heartbeat to lapse",
			zap.Duration("lapse", DrainLapse), zap.Error(err))
	}
}

// look fences every cluster being drained, acknowledges each drain once
// nothing of its cluster is on its way any more, and lifts the fences of
// clusters served on their cell again.
func (d *Drains) look(ctx context.Context) error {
	drains, err := d.cfg.Store.Drains(ctx, d.cfg.GatewayID)
	if err != nil {
		return err
	}
	draining := make(map[string]bool, len(drains))
	for _, dr := range drains {
		draining[dr.ClusterID] = true
		f := d.flight(dr.ClusterID)
		if c := f.fenced.Load(); c == nil || *c != dr.CellID {
			cell := dr.CellID
			f.fenced.Store(&cell)
			if d.cfg.Fenced != nil {
				d.cfg.Fenced(dr.ClusterID)
			}
		}
		if dr.Acked {
			continue
		}
		d.mu.Lock()
		started := d.waiting[dr.ID]
		d.waiting[dr.ID] = true
		d.mu.Unlock()
		if !started {
			go d.ackWhenEmpty(d.cfg.Context, dr, f)
		}
	}
	fences := map[string]string{}
	d.flights.Range(func(k, v any) bool {
		if c := v.(*Flight).fenced.Load(); c != nil && !draining[k.(string)] {
			fences[k.(string)] = *c
		}
		return true
	})
	if len(fences) == 0 {
		return nil
	}
	keep, err := d.cfg.Store.StillFenced(ctx, fences)
	if err != nil {
		return err
	}
	for id, cell := range fences {
		if keep[id] {
			continue
		}
		f := d.flight(id)
		if c := f.fenced.Load(); c != nil && *c == cell {
			f.fenced.CompareAndSwap(c, nil)
		}
	}
	return nil
}

// ackWhenEmpty waits until nothing of the drain's cluster is on its way,
// then acknowledges. The fence was set before, so the count only falls.
func (d *Drains) ackWhenEmpty(ctx context.Context, dr Drain, f *Flight) {
	defer func() {
		d.mu.Lock()
		delete(d.waiting, dr.ID)
		d.mu.Unlock()
	}()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for f.n.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
	if err := d.cfg.Store.Ack(ctx, dr.ID, d.cfg.GatewayID); err != nil && ctx.Err() == nil {
		d.cfg.Log.Warn("acknowledging a drain failed; retried at the next heartbeat",
			zap.String("cluster_id", dr.ClusterID), zap.Error(err))
	}
}

// PgDrainStore is the DrainStore of the control-plane database.
type PgDrainStore struct{ Pool *pgxpool.Pool }

// Heartbeat implements DrainStore.
func (s PgDrainStore) Heartbeat(ctx context.Context, gateway, name string) (bool, error) {
	var was bool
	err := s.Pool.QueryRow(ctx, `SELECT queen_proxy.gateway_heartbeat($1::uuid, $2)`, gateway, name).Scan(&was)
	return was, err
}

// Leave implements DrainStore.
func (s PgDrainStore) Leave(ctx context.Context, gateway string) error {
	_, err := s.Pool.Exec(ctx, `SELECT queen_proxy.gateway_leave($1::uuid)`, gateway)
	return err
}

// Drains implements DrainStore.
func (s PgDrainStore) Drains(ctx context.Context, gateway string) ([]Drain, error) {
	rows, err := s.Pool.Query(ctx, `SELECT d.drain_id::text, d.cluster_id::text, d.cell_id::text,
		EXISTS (SELECT 1 FROM queen_proxy.cluster_drain_acks a WHERE a.drain_id = d.drain_id AND a.gateway_id = $1::uuid)
		FROM queen_proxy.cluster_drains d`, gateway)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Drain, error) {
		var dr Drain
		err := r.Scan(&dr.ID, &dr.ClusterID, &dr.CellID, &dr.Acked)
		return dr, err
	})
}

// Ack implements DrainStore.
func (s PgDrainStore) Ack(ctx context.Context, drain, gateway string) error {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT queen_proxy.ack_cluster_drain($1::uuid, $2::uuid)`, drain, gateway).Scan(&ok)
	if err == nil && !ok {
		return errors.New("the drain ended or the gateway is not registered")
	}
	return err
}

// StillFenced implements DrainStore. A cluster that is gone, or on another
// cell, stays fenced off the cell: only a cluster back on it, not drained,
// is served there again.
func (s PgDrainStore) StillFenced(ctx context.Context, fences map[string]string) (map[string]bool, error) {
	ids := make([]string, 0, len(fences))
	cells := make([]string, 0, len(fences))
	for id, cell := range fences {
		ids = append(ids, id)
		cells = append(cells, cell)
	}
	rows, err := s.Pool.Query(ctx, `SELECT f.id::text FROM unnest($1::uuid[], $2::uuid[]) AS f (id, cell)
		WHERE NOT EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.id = f.id AND c.cell_id = f.cell
		                    AND NOT EXISTS (SELECT 1 FROM queen_proxy.cluster_drains d WHERE d.cluster_id = c.id AND d.cell_id = c.cell_id))`,
		ids, cells)
	if err != nil {
		return nil, err
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	keep := make(map[string]bool, len(kept))
	for _, id := range kept {
		keep[id] = true
	}
	return keep, nil
}
