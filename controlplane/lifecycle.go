package controlplane

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Cluster statuses (the clusters.status CHECK list).
const (
	ClusterActive      = "active"
	ClusterPushBlocked = "push_blocked"
	ClusterSuspended   = "suspended"
	ClusterDeleting    = "deleting"
)

// SetClusterStatus moves a cluster to active, push_blocked or suspended
// through set_cluster_status, which audits the change and tells every
// gateway. A cluster that is being deleted is left alone unless force is
// set: its broker data may already be partly purged.
func SetClusterStatus(ctx context.Context, db DB, cluster, status string, force bool) (Cluster, error) {
	switch status {
	case ClusterActive, ClusterPushBlocked, ClusterSuspended:
	default:
		return Cluster{}, errorf(Invalid, "invalid cluster status %q: use active, push_blocked or suspended", status)
	}
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Cluster{}, err
	}
	if c.Status == ClusterDeleting && !force {
		return Cluster{}, errorf(WrongState,
			"cluster %q is being deleted (status deleting); finish the deletion, or force the change if it has not been purged yet", c.Name)
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_cluster_status($1::uuid, $2)`, c.ID, status); err != nil {
		return Cluster{}, dbError("set cluster status", err)
	}
	// A resumed cluster is served on its cell again, even if a move or a
	// forced delete that drained it stopped half-way.
	if status == ClusterActive {
		if _, err := db.Exec(ctx, `SELECT queen_proxy.end_cluster_drain($1::uuid)`, c.ID); err != nil {
			return Cluster{}, dbError("end the cluster's drain", err)
		}
	}
	return getCluster(ctx, db, c.ID)
}

// ClusterDeletionPlan is the state of a cluster after the first step of its
// deletion: its traffic is stopped and its data waits to be purged.
type ClusterDeletionPlan struct {
	Cluster         Cluster     `json:"cluster"`
	AlreadyDeleting bool        `json:"already_deleting"`
	Purge           PurgeTarget `json:"purge"`
}

// BeginClusterDeletion is step 1 of the three-step deletion of a cluster
// (migrations/020): it sets the cluster to 'deleting', which stops all of
// its traffic at every gateway, and returns what to purge on its cell
// (step 2). Step 3 is DeleteCluster. Calling it again changes nothing.
func BeginClusterDeletion(ctx context.Context, db DB, cluster string) (ClusterDeletionPlan, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return ClusterDeletionPlan{}, err
	}
	plan := ClusterDeletionPlan{AlreadyDeleting: c.Status == ClusterDeleting}
	if !plan.AlreadyDeleting {
		if _, err := db.Exec(ctx, `SELECT queen_proxy.set_cluster_status($1::uuid, 'deleting')`, c.ID); err != nil {
			return ClusterDeletionPlan{}, dbError("set cluster status", err)
		}
	}
	// The status stops new requests; the drain waits for those admitted
	// before it, so that the purge (step 2) finds everything there is.
	if _, err := drainClusters(ctx, db, []string{c.ID}, drainDelete); err != nil {
		return ClusterDeletionPlan{}, err
	}
	if plan.Cluster, err = getCluster(ctx, db, c.ID); err != nil {
		return ClusterDeletionPlan{}, err
	}
	err = db.QueryRow(ctx, `SELECT c.id::text, c.slug, c.broker_tenant_uuid::text, ce.slug, ce.base_url
		FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE c.id = $1::uuid`, c.ID).
		Scan(&plan.Purge.ClusterID, &plan.Purge.ClusterSlug, &plan.Purge.BrokerTenantUUID, &plan.Purge.CellSlug, &plan.Purge.CellURL)
	if err != nil {
		return ClusterDeletionPlan{}, dbError("read the cluster's cell", err)
	}
	return plan, nil
}

// ClusterDeletion is what delete_cluster reports.
type ClusterDeletion struct {
	Deleted          bool             `json:"deleted"`
	Existed          bool             `json:"existed"`
	ClusterID        string           `json:"cluster_id"`
	ClusterSlug      string           `json:"cluster_slug"`
	TenantID         string           `json:"tenant_id"`
	CellID           string           `json:"cell_id"`
	BrokerTenantUUID string           `json:"broker_tenant_uuid"`
	StatusWas        string           `json:"status_was"`
	Forced           bool             `json:"forced"`
	Counts           map[string]int64 `json:"counts"`
	// Released is set when the cluster left its cell as the keeper of a
	// cell not known to scope, after the Releaser checked its queues were
	// gone from the broker.
	Released *Keeper `json:"released_keeper,omitempty"`
	// GrantsNote says what the operator must remove on the cell (one whose
	// grants live in its database); empty when nothing.
	GrantsNote string `json:"grants_note,omitempty"`
}

// DeleteCluster is step 3 of the deletion of a cluster: delete_cluster
// removes it and what it owns from the control plane. It refuses a cluster
// that is not 'deleting' (step 1, BeginClusterDeletion) unless force is
// set; force skips the broker purge, so its queues and messages stay on
// its cell's broker, unreachable.
//
// When the cluster is the keeper of a cell not known to scope and other
// clusters stay there, the deletion needs release (see Keeper), run in the
// deletion's transaction; nil leaves the database to refuse.
func DeleteCluster(ctx context.Context, db DB, cluster string, force bool, release Releaser) (ClusterDeletion, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return ClusterDeletion{}, err
	}
	if c.Status != ClusterDeleting && !force {
		return ClusterDeletion{}, errorf(WrongState,
			"cluster %q is %s, not deleting: stop its traffic and purge it first", c.Name, c.Status)
	}
	drained, err := drainClusters(ctx, db, []string{c.ID}, drainDelete)
	if err != nil {
		endDrains(ctx, db, drained)
		return ClusterDeletion{}, err
	}
	var raw []byte
	var released []Keeper
	var grantsNote string
	err = inTx(ctx, db, "delete cluster", func(tx pgx.Tx) error {
		var err error
		if released, err = releaseLeavingKeepers(ctx, tx, []string{c.ID}, release); err != nil {
			return err
		}
		notes, err := withdrawClustersGrants(ctx, tx, []string{c.ID}, force)
		if err != nil {
			return err
		}
		grantsNote = strings.Join(notes, "; ")
		return tx.QueryRow(ctx, `SELECT queen_proxy.delete_cluster($1::uuid, $2)::text`, c.ID, force).Scan(&raw)
	})
	if err != nil {
		endDrains(ctx, db, drained)
		return ClusterDeletion{}, err
	}
	var d ClusterDeletion
	if err := json.Unmarshal(raw, &d); err != nil {
		return ClusterDeletion{}, errorf(Failed, "delete_cluster returned unexpected JSON: %v", err)
	}
	if len(released) == 1 {
		d.Released = &released[0]
	}
	d.GrantsNote = grantsNote
	return d, nil
}

// ClusterPurgeTarget returns what a purge of the cluster's data on its
// cell's broker needs: its broker namespace, its cell and the cell's
// secret, in the shape a Releaser takes.
func ClusterPurgeTarget(ctx context.Context, db DB, cluster string) (Keeper, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Keeper{}, err
	}
	var k Keeper
	err = db.QueryRow(ctx, `SELECT c.id::text, c.slug, c.broker_tenant_uuid::text, ce.id::text, ce.slug, ce.base_url,
		coalesce(ce.cell_secret, '')
		FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE c.id = $1::uuid`, c.ID).
		Scan(&k.ClusterID, &k.ClusterSlug, &k.BrokerTenant, &k.CellID, &k.CellSlug, &k.CellURL, &k.CellSecret)
	if err != nil {
		return Keeper{}, dbError("read the cluster's cell", err)
	}
	return k, nil
}
