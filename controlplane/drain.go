package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A cluster that leaves its cell (deleted, or released as the keeper of a
// cell not known to scope) is drained first (migrations/022): every gateway
// stops sending it to the cell and waits for what it already admitted, then
// acknowledges. Only once every live gateway has is its traffic known to
// have stopped, so that what a check of the broker finds afterwards stays
// true. release_keeper refuses a keeper whose drain is not complete.

// DefaultDrainWait bounds how long a command waits for every gateway to
// acknowledge a drain: longer than any exchange a gateway admits (a
// long-poll pop waits up to 90 s plus a 10 s margin by default).
const DefaultDrainWait = 150 * time.Second

// drain reasons, as queen_proxy.begin_cluster_drain takes them.
const (
	drainDelete = "delete"
	drainLeave  = "leave"
)

type drainWaitKey struct{}

// WithDrainWait sets how long the operations under ctx wait for a drain.
func WithDrainWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, drainWaitKey{}, d)
}

func drainWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(drainWaitKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultDrainWait
}

// drainPoll is how often the acknowledgments are read while waiting.
const drainPoll = 50 * time.Millisecond

// drainClusters drains each cluster in ids off its current cell and waits
// until every live gateway acknowledged, or fails (Unavailable) naming the
// gateways that did not. It returns the ids whose drain it started (not
// already under way), for the caller to end them if the leave does not
// happen.
func drainClusters(ctx context.Context, db DB, ids []string, reason string) (started []string, err error) {
	for _, id := range ids {
		var fresh bool
		err := db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM queen_proxy.cluster_drains d JOIN queen_proxy.clusters c
			ON c.id = d.cluster_id AND c.cell_id = d.cell_id WHERE d.cluster_id = $1::uuid),
			queen_proxy.begin_cluster_drain($1::uuid, $2) IS NOT NULL`, id, reason).Scan(&fresh, new(bool))
		if err != nil {
			return started, dbError("drain the cluster off its cell", err)
		}
		if fresh {
			started = append(started, id)
		}
	}
	return started, awaitDrains(ctx, db, ids)
}

// awaitDrains waits until no live gateway is left to acknowledge the drain
// of any cluster in ids.
func awaitDrains(ctx context.Context, db DB, ids []string) error {
	wait := drainWait(ctx)
	deadline := time.Now().Add(wait)
	for {
		rows, err := db.Query(ctx, `SELECT c.slug, ce.slug, w.gateway_name
			FROM unnest($1::uuid[]) AS i (id)
			JOIN queen_proxy.clusters c ON c.id = i.id
			JOIN queen_proxy.cells ce ON ce.id = c.cell_id
			CROSS JOIN LATERAL queen_proxy.cluster_drain_waiting(i.id) w
			ORDER BY c.slug, w.gateway_name`, ids)
		if err != nil {
			return dbError("read the drain's acknowledgments", err)
		}
		type waiting struct{ cluster, cell, gateway string }
		left, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (waiting, error) {
			var w waiting
			err := r.Scan(&w.cluster, &w.cell, &w.gateway)
			return w, err
		})
		if err != nil {
			return dbError("read the drain's acknowledgments", err)
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var lapse int
			if err := db.QueryRow(ctx, `SELECT extract(epoch FROM queen_proxy.gateway_lapse())::int`).Scan(&lapse); err != nil {
				return dbError("read the gateways' lapse", err)
			}
			var names []string
			for _, w := range left {
				names = append(names, w.gateway)
			}
			return &Error{Kind: Unavailable, Msg: fmt.Sprintf(
				"cluster %q's traffic to cell %q has not stopped: %d gateway(s) did not confirm within %s that they forward nothing more of it (%s); nothing was released or deleted. "+
					"A gateway that is down stops counting %d s after its last heartbeat; one that is up needs the requests it admitted to end first (raise --drain-timeout)",
				left[0].cluster, left[0].cell, len(names), wait, strings.Join(names, ", "), lapse)}
		}
		select {
		case <-ctx.Done():
			return &Error{Kind: Unavailable, Err: ctx.Err(), Msg: fmt.Sprintf("waiting for the gateways to stop cluster %q's traffic: %v", left[0].cluster, ctx.Err())}
		case <-time.After(drainPoll):
		}
	}
}

// endDrains ends the drains a failed operation started: the clusters are
// served on their cells again, as before it.
func endDrains(ctx context.Context, db DB, ids []string) {
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		_, _ = db.Exec(ctx, `SELECT queen_proxy.end_cluster_drain($1::uuid)`, id)
	}
}

// drainLeavingKeepers drains, before the transaction that moves or deletes
// the clusters in ids, those that would leave as keepers of a cell not
// known to scope (what release asks about): their queues are checked only
// once nothing more of theirs can land on the broker.
func drainLeavingKeepers(ctx context.Context, db DB, ids []string, release Releaser) ([]string, error) {
	if release == nil {
		return nil, nil
	}
	keepers, err := leavingKeepers(ctx, db, ids)
	if err != nil {
		return nil, dbError("find the keepers leaving", err)
	}
	if len(keepers) == 0 {
		return nil, nil
	}
	kids := make([]string, len(keepers))
	for i, k := range keepers {
		kids[i] = k.ClusterID
	}
	return drainClusters(ctx, db, kids, drainLeave)
}
