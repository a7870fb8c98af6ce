package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/internal/uuidtext"
)

// Cluster is one row of queen_proxy.clusters with the names of its tenant,
// plan and cell.
type Cluster struct {
	ID               string          `json:"id"`
	Slug             string          `json:"slug"`
	TenantID         string          `json:"tenant_id"`
	TenantSlug       string          `json:"tenant_slug"`
	TenantStatus     string          `json:"tenant_status"`
	Status           string          `json:"status"`
	PlanCode         string          `json:"plan_code"`
	CellID           string          `json:"cell_id"`
	CellSlug         string          `json:"cell_slug"`
	BrokerTenantUUID string          `json:"broker_tenant_uuid"`
	Overrides        json.RawMessage `json:"overrides"`
	CreatedAt        time.Time       `json:"created_at"`
	// Placed is set by CreateCluster when the database chose the cell.
	Placed bool `json:"placed,omitempty"`
}

const clusterSelect = `SELECT c.id::text, c.slug, t.id::text, t.slug, t.status, c.status, p.code,
	ce.id::text, ce.slug, c.broker_tenant_uuid::text, c.limit_overrides::text, coalesce(c.created_at, now())
	FROM queen_proxy.clusters c
	JOIN queen_proxy.tenants t ON t.id = c.tenant_id
	JOIN queen_proxy.plans p ON p.id = c.plan_id
	JOIN queen_proxy.cells ce ON ce.id = c.cell_id`

func scanCluster(row pgx.Row) (Cluster, error) {
	var c Cluster
	var overrides string
	err := row.Scan(&c.ID, &c.Slug, &c.TenantID, &c.TenantSlug, &c.TenantStatus, &c.Status, &c.PlanCode,
		&c.CellID, &c.CellSlug, &c.BrokerTenantUUID, &overrides, &c.CreatedAt)
	c.Overrides = json.RawMessage(overrides)
	return c, err
}

func getCluster(ctx context.Context, db DB, id string) (Cluster, error) {
	c, err := scanCluster(db.QueryRow(ctx, clusterSelect+` WHERE c.id = $1::uuid`, id))
	if err != nil {
		return Cluster{}, dbError("read cluster", err)
	}
	return c, nil
}

// NewCluster describes a cluster to create.
type NewCluster struct {
	Tenant string // slug or id
	Slug   string
	Plan   string // plan code
	Cell   string // slug or id; empty lets the database place it (place_cluster)
	// Release checks, when the cell is empty but holds the queues a keeper
	// left there (see Keeper.Residue), that they are gone; nil leaves the
	// database to refuse such a placement.
	Release Releaser
	// BrokerTenant is the cluster's broker tenant id (x-queen-tenant),
	// empty for a random one: given when the operator granted it on the
	// cell's broker beforehand (a cell with grants verify).
	BrokerTenant string
}

// CreateCluster creates a cluster through create_cluster. A named cell must
// be active and have room (a cap is enforced by the database). With no cell
// named, create_cluster places it (place_cluster, migrations/019): the least
// loaded active cell of the plan's class with room, and of cells not known
// to scope by tenant only an empty one; no room is a WrongState error that
// says what to add.
func CreateCluster(ctx context.Context, db DB, n NewCluster) (Cluster, error) {
	slug, err := checkSlug("cluster", n.Slug)
	if err != nil {
		return Cluster{}, err
	}
	t, err := lookupTenant(ctx, db, n.Tenant)
	if err != nil {
		return Cluster{}, err
	}
	p, err := lookupPlan(ctx, db, n.Plan)
	if err != nil {
		return Cluster{}, err
	}
	bt := normalize(n.BrokerTenant)
	if bt != "" && !uuidtext.Valid(bt) {
		return Cluster{}, errorf(Invalid, "invalid broker tenant %q: want a UUID", n.BrokerTenant)
	}
	var cellID *string
	if normalize(n.Cell) != "" {
		cell, err := lookupCell(ctx, db, n.Cell)
		if err != nil {
			return Cluster{}, err
		}
		if err := placeable(cell); err != nil {
			return Cluster{}, err
		}
		cellID = &cell.ID
	}
	var id string
	err = inTx(ctx, db, "create cluster", func(tx pgx.Tx) error {
		// Placement passes over cells with a keeper's residue, so only a
		// named cell may need it released.
		if cellID != nil {
			if err := releaseCellResidue(ctx, tx, *cellID, "", n.Release); err != nil {
				return err
			}
		}
		var placedOn string
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_cluster($1::uuid, $2, $3, $4::uuid)::text`,
			t.ID, slug, p.Name, cellID).Scan(&id); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT cell_id::text FROM queen_proxy.clusters WHERE id = $1::uuid`, id).Scan(&placedOn); err != nil {
			return err
		}
		if bt != "" {
			if _, err := tx.Exec(ctx, `UPDATE queen_proxy.clusters SET broker_tenant_uuid = $2::uuid WHERE id = $1::uuid`, id, bt); err != nil {
				return err
			}
		}
		// Last, so that nothing is granted for a placement the database
		// refuses; a refusal here rolls the cluster back.
		return placeGrants(ctx, tx, id, placedOn)
	})
	if err != nil {
		return Cluster{}, err
	}
	c, err := getCluster(ctx, db, id)
	c.Placed = cellID == nil
	return c, err
}

// ClusterFilter narrows ListClusters; empty fields match everything.
type ClusterFilter struct {
	Tenant string // slug or id
	Cell   string // slug or id
	Plan   string // code
}

// ListClusters returns the clusters that match f, ordered by slug. A filter
// naming an unknown tenant, cell or plan is an error, not an empty list.
func ListClusters(ctx context.Context, db DB, f ClusterFilter) ([]Cluster, error) {
	var tenantID, cellID, planCode *string
	if normalize(f.Tenant) != "" {
		t, err := lookupTenant(ctx, db, f.Tenant)
		if err != nil {
			return nil, err
		}
		tenantID = &t.ID
	}
	if normalize(f.Cell) != "" {
		c, err := lookupCell(ctx, db, f.Cell)
		if err != nil {
			return nil, err
		}
		cellID = &c.ID
	}
	if normalize(f.Plan) != "" {
		p, err := lookupPlan(ctx, db, f.Plan)
		if err != nil {
			return nil, err
		}
		planCode = &p.Name
	}
	rows, err := db.Query(ctx, clusterSelect+`
		WHERE ($1::uuid IS NULL OR c.tenant_id = $1::uuid)
		  AND ($2::uuid IS NULL OR c.cell_id = $2::uuid)
		  AND ($3::text IS NULL OR p.code = $3)
		ORDER BY c.slug`, tenantID, cellID, planCode)
	if err != nil {
		return nil, dbError("list clusters", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cluster, error) { return scanCluster(r) })
	if err != nil {
		return nil, dbError("list clusters", err)
	}
	return nonNil(out), nil
}

// Move is the outcome of MoveCluster.
type Move struct {
	Cluster  Cluster `json:"cluster"`
	FromCell string  `json:"from_cell"`
	ToCell   string  `json:"to_cell"`
	Moved    bool    `json:"moved"`
	// Released is set when the cluster left as the keeper of a cell not
	// known to scope, after release checked its queues were gone.
	Released *Keeper `json:"released_keeper,omitempty"`
	// GrantsNote says what the operator must remove on the old cell (one
	// whose grants live in its database); empty when nothing.
	GrantsNote string `json:"grants_note,omitempty"`
}

// MoveCluster points a cluster at another cell: from the next request on,
// every gateway sends its traffic there. The schema has no function for it,
// so this is an UPDATE plus record_operation (action cluster_moved), which
// audits the move and invalidates the cluster everywhere. The broker data
// does not move: the queues and messages on the old cell's broker stay
// there. The target cell must be active. Moving a cluster to the cell it is
// on changes nothing.
//
// When the cluster is the keeper of a cell not known to scope and other
// clusters stay there, the move needs release (see Keeper): it runs in the
// move's transaction, before the move; nil leaves the database to refuse.
func MoveCluster(ctx context.Context, db DB, cluster, cell string, release Releaser) (Move, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Move{}, err
	}
	to, err := lookupCell(ctx, db, cell)
	if err != nil {
		return Move{}, err
	}
	var from string
	if err := db.QueryRow(ctx, `SELECT cell_id::text FROM queen_proxy.clusters WHERE id = $1::uuid`, c.ID).Scan(&from); err != nil {
		return Move{}, dbError("read the cluster's cell", err)
	}
	var drained []string
	if from != to.ID {
		if drained, err = drainLeavingKeepers(ctx, db, []string{c.ID}, release); err != nil {
			endDrains(ctx, db, drained)
			return Move{}, err
		}
	}
	var m Move
	err = inTx(ctx, db, "move cluster", func(tx pgx.Tx) error {
		var fromID string
		err := tx.QueryRow(ctx, `SELECT ce.id::text, ce.slug FROM queen_proxy.clusters c
			JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE c.id = $1::uuid FOR UPDATE OF c`, c.ID).Scan(&fromID, &m.FromCell)
		if errors.Is(err, pgx.ErrNoRows) {
			return errorf(NotFound, "unknown cluster %q", c.Name)
		}
		if err != nil {
			return err
		}
		m.ToCell = to.Name
		if fromID == to.ID {
			return nil
		}
		if err := placeable(to); err != nil {
			return err
		}
		released, err := releaseLeavingKeepers(ctx, tx, []string{c.ID}, release)
		if err != nil {
			return err
		}
		if err := releaseCellResidue(ctx, tx, to.ID, c.ID, release); err != nil {
			return err
		}
		if len(released) == 1 {
			m.Released = &released[0]
		}
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.clusters SET cell_id = $2::uuid WHERE id = $1::uuid`, c.ID, to.ID); err != nil {
			return err
		}
		// Granted on the new cell before withdrawn from the old one: a
		// failure of either rolls the move back, and the cluster keeps
		// being served where it was.
		if err := placeGrants(ctx, tx, c.ID, to.ID); err != nil {
			return err
		}
		if m.GrantsNote, err = withdrawGrants(ctx, tx, c.ID, fromID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, $2::uuid, 'control_plane', NULL, 'cluster_moved', $2::text,
			jsonb_build_object('from_cell', $3::text, 'to_cell', $4::text))`, c.Tenant, c.ID, fromID, to.ID)
		m.Moved = err == nil
		return err
	})
	if err != nil {
		endDrains(ctx, db, drained)
		return Move{}, err
	}
	if m.Cluster, err = getCluster(ctx, db, c.ID); err != nil {
		return Move{}, err
	}
	return m, nil
}

// SetClusterPlan assigns a plan to a cluster through assign_plan, and
// gives the cluster the broker grants the new plan needs on its cell
// (placeGrants); grants the old plan needed and the new one does not stay.
func SetClusterPlan(ctx context.Context, db DB, cluster, plan string) (Cluster, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Cluster{}, err
	}
	p, err := lookupPlan(ctx, db, plan)
	if err != nil {
		return Cluster{}, err
	}
	err = inTx(ctx, db, "assign plan", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.assign_plan($1::uuid, $2)`, c.ID, p.Name); err != nil {
			return err
		}
		// A plan with more features needs more grants where the cluster
		// is; without them the change is refused, not half made.
		var cellID string
		if err := tx.QueryRow(ctx, `SELECT cell_id::text FROM queen_proxy.clusters WHERE id = $1::uuid`, c.ID).Scan(&cellID); err != nil {
			return err
		}
		return placeGrants(ctx, tx, c.ID, cellID)
	})
	if err != nil {
		return Cluster{}, err
	}
	return getCluster(ctx, db, c.ID)
}
