package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tenant statuses (the tenants.status CHECK list).
const (
	TenantActive    = "active"
	TenantGrace     = "grace"
	TenantSuspended = "suspended"
	TenantDeleting  = "deleting"
)

// Tenant is one row of queen_proxy.tenants with the number of clusters and
// users it owns.
type Tenant struct {
	ID        string    `json:"id"`
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	Status    string    `json:"status"`
	Clusters  int       `json:"clusters"`
	Users     int       `json:"users"`
	CreatedAt time.Time `json:"created_at"`
}

const tenantSelect = `SELECT t.id::text, t.slug, t.name, t.status,
	(SELECT count(*) FROM queen_proxy.clusters c WHERE c.tenant_id = t.id)::int,
	(SELECT count(*) FROM queen_proxy.users u WHERE u.tenant_id = t.id)::int,
	t.created_at
	FROM queen_proxy.tenants t`

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Slug, &t.Name, &t.Status, &t.Clusters, &t.Users, &t.CreatedAt)
	return t, err
}

func getTenant(ctx context.Context, db DB, id string) (Tenant, error) {
	t, err := scanTenant(db.QueryRow(ctx, tenantSelect+` WHERE t.id = $1::uuid`, id))
	if err != nil {
		return Tenant{}, dbError("read tenant", err)
	}
	return t, nil
}

// CreateTenant creates a tenant through create_tenant. An empty name
// defaults to the slug.
func CreateTenant(ctx context.Context, db DB, slug, name string) (Tenant, error) {
	s, err := checkSlug("tenant", slug)
	if err != nil {
		return Tenant{}, err
	}
	name = strings.TrimSpace(name)
	if name == "" {
		name = s
	}
	var id string
	if err := db.QueryRow(ctx, `SELECT queen_proxy.create_tenant($1, $2)::text`, s, name).Scan(&id); err != nil {
		return Tenant{}, dbError("create tenant", err)
	}
	return getTenant(ctx, db, id)
}

// ListTenants returns every tenant, ordered by slug.
func ListTenants(ctx context.Context, db DB) ([]Tenant, error) {
	rows, err := db.Query(ctx, tenantSelect+` ORDER BY t.slug`)
	if err != nil {
		return nil, dbError("list tenants", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) { return scanTenant(r) })
	if err != nil {
		return nil, dbError("list tenants", err)
	}
	return nonNil(out), nil
}

// SetTenantStatus moves a tenant to active, grace or suspended through
// set_tenant_status, which also tells every gateway about each of its
// clusters. A tenant that is being deleted is left alone unless force is
// set: its broker data may already be partly purged.
func SetTenantStatus(ctx context.Context, db DB, tenant, status string, force bool) (Tenant, error) {
	switch status {
	case TenantActive, TenantGrace, TenantSuspended:
	default:
		return Tenant{}, errorf(Invalid, "invalid tenant status %q: use active, grace or suspended", status)
	}
	t, err := lookupTenant(ctx, db, tenant)
	if err != nil {
		return Tenant{}, err
	}
	if t.Status == TenantDeleting && !force {
		return Tenant{}, errorf(WrongState,
			"tenant %q is being deleted (status deleting); finish the deletion, or force the change if no cluster has been purged yet", t.Name)
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_tenant_status($1::uuid, $2)`, t.ID, status); err != nil {
		return Tenant{}, dbError("set tenant status", err)
	}
	return getTenant(ctx, db, t.ID)
}

// PurgeTarget is one cluster whose queues and messages must be purged on
// its cell's broker before its tenant is deleted.
type PurgeTarget struct {
	ClusterID        string `json:"cluster_id"`
	ClusterSlug      string `json:"cluster_slug"`
	BrokerTenantUUID string `json:"broker_tenant_uuid"`
	CellSlug         string `json:"cell_slug"`
	CellURL          string `json:"cell_url"`
}

// PurgeSQL is the statement that purges a cluster's data on its cell's
// PostgreSQL. It is repeated until it reports nothing left to delete.
func (p PurgeTarget) PurgeSQL() string {
	return fmt.Sprintf("SELECT queen.delete_tenant_data_v1('%s');", p.BrokerTenantUUID)
}

// DeletionPlan is the state of a tenant after the first step of its
// deletion: its traffic is stopped and its clusters wait to be purged.
type DeletionPlan struct {
	Tenant          Tenant        `json:"tenant"`
	AlreadyDeleting bool          `json:"already_deleting"`
	Purge           []PurgeTarget `json:"purge"`
}

// BeginTenantDeletion is step 1 of the three-step deletion of a tenant
// (migrations/007): it sets the tenant to 'deleting', which stops all of its
// traffic at every gateway, and returns the clusters to purge on their
// cells (step 2). Step 3 is DeleteTenant. Calling it again on a tenant that
// is already deleting changes nothing and returns the same plan.
func BeginTenantDeletion(ctx context.Context, db DB, tenant string) (DeletionPlan, error) {
	t, err := lookupTenant(ctx, db, tenant)
	if err != nil {
		return DeletionPlan{}, err
	}
	plan := DeletionPlan{AlreadyDeleting: t.Status == TenantDeleting}
	if !plan.AlreadyDeleting {
		if _, err := db.Exec(ctx, `SELECT queen_proxy.set_tenant_status($1::uuid, 'deleting')`, t.ID); err != nil {
			return DeletionPlan{}, dbError("set tenant status", err)
		}
	}
	var ids []string
	if err := db.QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM queen_proxy.clusters WHERE tenant_id = $1::uuid`,
		t.ID).Scan(&ids); err != nil {
		return DeletionPlan{}, dbError("list the tenant's clusters", err)
	}
	// The status stops new requests; the drain waits for those admitted
	// before it, so that the purge (step 2) finds everything there is.
	if _, err := drainClusters(ctx, db, ids, drainDelete); err != nil {
		return DeletionPlan{}, err
	}
	if plan.Tenant, err = getTenant(ctx, db, t.ID); err != nil {
		return DeletionPlan{}, err
	}
	rows, err := db.Query(ctx, `SELECT c.id::text, c.slug, c.broker_tenant_uuid::text, ce.slug, ce.base_url
		FROM queen_proxy.clusters c JOIN queen_proxy.cells ce ON ce.id = c.cell_id
		WHERE c.tenant_id = $1::uuid ORDER BY c.slug`, t.ID)
	if err != nil {
		return DeletionPlan{}, dbError("list the tenant's clusters", err)
	}
	plan.Purge, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (PurgeTarget, error) {
		var p PurgeTarget
		err := r.Scan(&p.ClusterID, &p.ClusterSlug, &p.BrokerTenantUUID, &p.CellSlug, &p.CellURL)
		return p, err
	})
	if err != nil {
		return DeletionPlan{}, dbError("list the tenant's clusters", err)
	}
	plan.Purge = nonNil(plan.Purge)
	return plan, nil
}

// DeletedCluster is a cluster delete_tenant removed.
type DeletedCluster struct {
	ClusterID        string `json:"cluster_id"`
	Slug             string `json:"slug"`
	CellID           string `json:"cell_id"`
	BrokerTenantUUID string `json:"broker_tenant_uuid"`
}

// Deletion is what delete_tenant reports.
type Deletion struct {
	Deleted    bool             `json:"deleted"`
	Existed    bool             `json:"existed"`
	TenantID   string           `json:"tenant_id"`
	TenantSlug string           `json:"tenant_slug"`
	StatusWas  string           `json:"status_was"`
	Forced     bool             `json:"forced"`
	Clusters   []DeletedCluster `json:"clusters"`
	Counts     map[string]int64 `json:"counts"`
	// Released are the clusters that left their cells as keepers, after
	// the Releaser checked their queues were gone from the broker.
	Released []Keeper `json:"released_keepers"`
	// GrantsNotes say what the operator must remove on cells whose grants
	// live in their databases.
	GrantsNotes []string `json:"grants_notes,omitempty"`
}

// DeleteTenant is step 3 of the deletion of a tenant: delete_tenant removes
// the tenant and everything it owns from the control plane. It refuses a
// tenant that is not 'deleting' (step 1, BeginTenantDeletion) unless force
// is set; force skips the broker purge, so the tenant's queues and messages
// stay on its cells' brokers, unreachable.
//
// A cluster of the tenant that is the keeper of a cell not known to scope,
// with other tenants' clusters staying there, needs release (see Keeper),
// run in the deletion's transaction; nil leaves the database to refuse.
func DeleteTenant(ctx context.Context, db DB, tenant string, force bool, release Releaser) (Deletion, error) {
	t, err := lookupTenant(ctx, db, tenant)
	if err != nil {
		return Deletion{}, err
	}
	if t.Status != TenantDeleting && !force {
		return Deletion{}, errorf(WrongState,
			"tenant %q is %s, not deleting: stop its traffic and purge its clusters first", t.Name, t.Status)
	}
	var clusterIDs []string
	if err := db.QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM queen_proxy.clusters WHERE tenant_id = $1::uuid`,
		t.ID).Scan(&clusterIDs); err != nil {
		return Deletion{}, dbError("list the tenant's clusters", err)
	}
	drained, err := drainClusters(ctx, db, clusterIDs, drainDelete)
	if err != nil {
		endDrains(ctx, db, drained)
		return Deletion{}, err
	}
	var raw []byte
	var released []Keeper
	var notes []string
	err = inTx(ctx, db, "delete tenant", func(tx pgx.Tx) error {
		var ids []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM queen_proxy.clusters WHERE tenant_id = $1::uuid`,
			t.ID).Scan(&ids); err != nil {
			return err
		}
		var err error
		if released, err = releaseLeavingKeepers(ctx, tx, ids, release); err != nil {
			return err
		}
		if notes, err = withdrawClustersGrants(ctx, tx, ids, force); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT queen_proxy.delete_tenant($1::uuid, $2)::text`, t.ID, force).Scan(&raw)
	})
	if err != nil {
		endDrains(ctx, db, drained)
		return Deletion{}, err
	}
	var d Deletion
	if err := json.Unmarshal(raw, &d); err != nil {
		return Deletion{}, errorf(Failed, "delete_tenant returned unexpected JSON: %v", err)
	}
	d.Clusters = nonNil(d.Clusters)
	d.Released = nonNil(released)
	d.GrantsNotes = notes
	return d, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
