package controlplane

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
)

// Keeper is a cluster that is about to leave a cell whose broker is not
// known to keep tenants apart (queen_proxy.cell_keeper_only), as the cell's
// keeper, while other clusters stay on it: the next of them would become
// the keeper and be served what the cluster left in the broker's one shared
// namespace. The database refuses that leave (SQLSTATE 55000) unless the
// transaction released the keeper (queen_proxy.release_keeper), which only
// whoever checked the broker may do.
type Keeper struct {
	ClusterID    string `json:"cluster_id"`
	ClusterSlug  string `json:"cluster_slug"`
	BrokerTenant string `json:"broker_tenant_uuid"`
	CellID       string `json:"cell_id"`
	CellSlug     string `json:"cell_slug"`
	CellURL      string `json:"cell_url"`
	// CellSecret is the cell's static broker secret (empty for none), for
	// the caller to reach the broker; it is never printed.
	CellSecret string `json:"-"`
	// Staying is how many clusters stay on the cell.
	Staying int `json:"staying"`
	// Residue is set when the cluster already left the cell, emptying it
	// without its queues being deleted (cells.keeper_residue): the cluster
	// now placed on the cell would be its keeper and be served them.
	Residue bool `json:"residue,omitempty"`
}

// Releaser checks on the cell's broker that a leaving keeper's queues are
// gone (deleting them if it was asked to) and returns what it saw or did,
// which release_keeper audits. An error refuses the leave, and nothing
// changes.
type Releaser func(ctx context.Context, k Keeper) (evidence map[string]any, err error)

// leavingKeepers returns which of the clusters in ids, leaving their cells
// together, leave as keepers of a cell not known to scope that keeps other
// clusters. It mirrors queen_proxy.refuse_keeper_handover, so that a
// command asks its Releaser exactly about the clusters the database would
// refuse.
func leavingKeepers(ctx context.Context, db DB, ids []string) ([]Keeper, error) {
	rows, err := db.Query(ctx, `SELECT c.id::text, c.slug, c.broker_tenant_uuid::text,
		ce.id::text, ce.slug, ce.base_url, coalesce(ce.cell_secret, ''),
		(SELECT count(*) FROM queen_proxy.clusters o WHERE o.cell_id = c.cell_id AND o.id <> ALL ($1::uuid[]))::int
		FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id
		WHERE c.id = ANY ($1::uuid[])
		  AND queen_proxy.tenancy_keeper_only(ce.tenancy_stated, ce.tenant_scoping)
		  AND EXISTS (SELECT 1 FROM queen_proxy.clusters o WHERE o.cell_id = c.cell_id AND o.id <> ALL ($1::uuid[]))
		  AND NOT EXISTS (SELECT 1 FROM queen_proxy.clusters o
		                   WHERE o.cell_id = c.cell_id AND o.id <> ALL ($1::uuid[])
		                     AND (o.placed_at, o.id) < (c.placed_at, c.id))
		ORDER BY c.slug`, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Keeper, error) {
		var k Keeper
		err := r.Scan(&k.ClusterID, &k.ClusterSlug, &k.BrokerTenant, &k.CellID, &k.CellSlug, &k.CellURL, &k.CellSecret, &k.Staying)
		return k, err
	})
}

// releaseLeavingKeepers asks release about every keeper among ids and,
// when it agrees, records the release in tx. With release nil nothing is
// released, and the database refuses a keeper's leave with its own
// message.
func releaseLeavingKeepers(ctx context.Context, tx pgx.Tx, ids []string, release Releaser) ([]Keeper, error) {
	if release == nil {
		return nil, nil
	}
	keepers, err := leavingKeepers(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	for _, k := range keepers {
		evidence, err := release(ctx, k)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(evidence)
		if err != nil {
			return nil, errorf(Failed, "release keeper %q: %v", k.ClusterSlug, err)
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.release_keeper($1::uuid, $2::jsonb)`, k.ClusterID, string(raw)); err != nil {
			return nil, err
		}
	}
	return nonNil(keepers), nil
}

// releaseCellResidue asks release about every cluster in the residue of the
// cell a cluster (placing, empty for a new one) is being placed on, when
// that cluster would be the keeper of a cell not known to scope, and
// records the release in tx (queen_proxy.release_cell_residue). It mirrors
// queen_proxy.refuse_placement_on_residue.
func releaseCellResidue(ctx context.Context, tx pgx.Tx, cellID, placing string, release Releaser) error {
	if release == nil {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT coalesce(e->>'cluster_id', ''), coalesce(e->>'cluster_slug', ''), coalesce(e->>'broker_tenant_uuid', ''),
		ce.id::text, ce.slug, ce.base_url, coalesce(ce.cell_secret, '')
		FROM queen_proxy.cells ce, jsonb_array_elements(coalesce(ce.keeper_residue, '[]'::jsonb)) e
		WHERE ce.id = $1::uuid
		  AND queen_proxy.tenancy_keeper_only(ce.tenancy_stated, ce.tenant_scoping)
		  AND NOT EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.cell_id = ce.id AND c.id::text <> $2)`, cellID, placing)
	if err != nil {
		return err
	}
	residue, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Keeper, error) {
		k := Keeper{Residue: true}
		err := r.Scan(&k.ClusterID, &k.ClusterSlug, &k.BrokerTenant, &k.CellID, &k.CellSlug, &k.CellURL, &k.CellSecret)
		return k, err
	})
	if err != nil || len(residue) == 0 {
		return err
	}
	evidence := make([]map[string]any, 0, len(residue))
	for _, k := range residue {
		e, err := release(ctx, k)
		if err != nil {
			return err
		}
		evidence = append(evidence, map[string]any{"cluster_id": k.ClusterID, "broker_tenant_uuid": k.BrokerTenant, "check": e})
	}
	raw, err := json.Marshal(map[string]any{"clusters": evidence})
	if err != nil {
		return errorf(Failed, "release the residue of cell %q: %v", residue[0].CellSlug, err)
	}
	_, err = tx.Exec(ctx, `SELECT queen_proxy.release_cell_residue($1::uuid, $2::jsonb)`, cellID, string(raw))
	return err
}
