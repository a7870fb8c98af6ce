package controlplane

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/tenancy"
)

// Cell statuses (the cells.status CHECK list). A draining cell keeps serving
// the clusters it has but takes no new ones; a dead cell takes none either.
const (
	CellActive   = "active"
	CellDraining = "draining"
	CellDead     = "dead"
)

// Cell is one row of queen_proxy.cells with the number of clusters placed on
// it. The cell secret is never returned, only whether there is one.
type Cell struct {
	ID      string `json:"id"`
	Slug    string `json:"slug"`
	Region  string `json:"region"`
	BaseURL string `json:"base_url"`
	Class   string `json:"class"`
	Status  string `json:"status"`
	// CapacitySlots is how many clusters the cell takes, enforced on every
	// placement; 0 is no cap. UsedSlots is how many it holds, kept exact by
	// the database (migrations/019).
	CapacitySlots int `json:"capacity_slots"`
	UsedSlots     int `json:"used_slots"`
	Clusters      int `json:"clusters"`
	// Placement is whether "cluster create" without --cell may choose the
	// cell (queen_proxy.cell_placement): open, or why not: draining, dead,
	// full, keeper-only (its broker is not known to scope and it holds its
	// keeper), residue (empty, but a keeper's queues are on its broker) or
	// occupied (a dedicated cell with its one cluster).
	Placement     string    `json:"placement"`
	BrokerVersion string    `json:"broker_version,omitempty"`
	HasSecret     bool      `json:"has_secret"`
	CreatedAt     time.Time `json:"created_at"`
	// TenantScoping is what the gateway's probe found the cell's broker
	// does with x-queen-tenant: "scoped", "unscoped" (one cluster at most)
	// or "unknown" (not probed yet, or undecided).
	TenantScoping          string     `json:"tenant_scoping"`
	TenantScopingCheckedAt *time.Time `json:"tenant_scoping_checked_at"`
	TenantScopingDetail    string     `json:"tenant_scoping_detail,omitempty"`
	// TenancyStated is the operator's statement (cells.tenancy_stated):
	// "probe" (the probe decides), "scoped" or "unscoped".
	TenancyStated string `json:"tenancy_stated"`
	// KeeperOnly is whether the gateway serves the cell's keeper only
	// (queen_proxy.cell_keeper_only): stated unscoped, stated scoped but
	// found unscoped, or probed and not found scoped.
	KeeperOnly bool `json:"keeper_only"`
	// Contradicted is a cell stated scoped whose probe found it unscoped.
	Contradicted bool `json:"contradicted"`
	// KeeperSlug and KeeperID name the cell's keeper, the first cluster
	// placed on it; empty for an empty cell.
	KeeperSlug string `json:"keeper_cluster,omitempty"`
	KeeperID   string `json:"keeper_cluster_id,omitempty"`
	// Grants is how the cell's broker takes per-tenant feature grants
	// (cells.grants): "api", "verify" or "none" (see PlaceGrants).
	Grants string `json:"grants"`
}

// Stated cell tenancies (the cells.tenancy_stated CHECK list).
const (
	TenancyProbe    = "probe"
	TenancyScoped   = "scoped"
	TenancyUnscoped = "unscoped"
)

// checkGrants validates a cell's grants statement; empty is "verify".
func checkGrants(raw string) (string, error) {
	switch g := normalize(raw); g {
	case "":
		return tenancy.CellGrantsVerify, nil
	case tenancy.CellGrantsAPI, tenancy.CellGrantsVerify, tenancy.CellGrantsNone:
		return g, nil
	}
	return "", errorf(Invalid, "invalid grants %q: use api (the broker takes grants over HTTP: the raft-storage line), verify (the operator writes them in the cell's database: 1.x) or none (the broker gates nothing)", raw)
}

// checkTenancy validates a stated tenancy; empty is "probe".
func checkTenancy(raw string) (string, error) {
	switch t := normalize(raw); t {
	case "":
		return TenancyProbe, nil
	case TenancyProbe, TenancyScoped, TenancyUnscoped:
		return t, nil
	}
	return "", errorf(Invalid, "invalid tenancy %q: use probe, scoped or unscoped", raw)
}

// NewCell describes a cell to add.
type NewCell struct {
	Slug          string
	Region        string
	BaseURL       string // the broker's plain-HTTP URL, e.g. http://192.0.2.7:6632
	Class         string // shared or dedicated
	CapacitySlots int    // clusters it takes; 0 is no cap
	Secret        string // bearer token presented to the broker; empty for none
	BrokerVersion string
	Tenancy       string // stated tenancy: probe (default), scoped or unscoped
	Grants        string // api, verify (default) or none
}

const cellSelect = `SELECT ce.id::text, ce.slug, ce.region, ce.base_url, ce.class, ce.status,
	ce.capacity_slots, ce.used_slots,
	(SELECT count(*) FROM queen_proxy.clusters c WHERE c.cell_id = ce.id)::int,
	coalesce(ce.broker_version, ''), ce.cell_secret IS NOT NULL, coalesce(ce.created_at, now()),
	ce.tenant_scoping, ce.tenant_scoping_checked_at, coalesce(ce.tenant_scoping_detail, ''),
	ce.tenancy_stated, queen_proxy.tenancy_keeper_only(ce.tenancy_stated, ce.tenant_scoping),
	coalesce(k.slug, ''), coalesce(k.id::text, ''),
	queen_proxy.cell_placement(ce.status, ce.class, ce.capacity_slots, ce.used_slots,
		ce.tenancy_stated, ce.tenant_scoping, ce.keeper_residue),
	ce.grants
	FROM queen_proxy.cells ce
	LEFT JOIN queen_proxy.clusters k ON k.id = queen_proxy.cell_keeper_cluster(ce.id)`

func scanCell(row pgx.Row) (Cell, error) {
	var c Cell
	err := row.Scan(&c.ID, &c.Slug, &c.Region, &c.BaseURL, &c.Class, &c.Status, &c.CapacitySlots, &c.UsedSlots,
		&c.Clusters, &c.BrokerVersion, &c.HasSecret, &c.CreatedAt,
		&c.TenantScoping, &c.TenantScopingCheckedAt, &c.TenantScopingDetail,
		&c.TenancyStated, &c.KeeperOnly, &c.KeeperSlug, &c.KeeperID, &c.Placement, &c.Grants)
	c.Contradicted = c.TenancyStated == TenancyScoped && c.TenantScoping == "unscoped"
	return c, err
}

func getCell(ctx context.Context, db DB, id string) (Cell, error) {
	c, err := scanCell(db.QueryRow(ctx, cellSelect+` WHERE ce.id = $1::uuid`, id))
	if err != nil {
		return Cell{}, dbError("read cell", err)
	}
	return c, nil
}

// checkClass validates a cell class (also a plan's cell_class).
func checkClass(what, class string) (string, error) {
	c := normalize(class)
	if c != "shared" && c != "dedicated" {
		return "", errorf(Invalid, "invalid %s %q: use shared or dedicated", what, class)
	}
	return c, nil
}

// AddCell inserts a cell; its slug is stored lowercased, like tenant and
// cluster slugs. Cells are infrastructure rows that no SQL function
// creates; nothing is cached about a cell that has no clusters, so nothing
// needs to be invalidated either.
func AddCell(ctx context.Context, db DB, c NewCell) (Cell, error) {
	slug := normalize(c.Slug)
	if slug == "" {
		return Cell{}, errorf(Invalid, "cell slug is required")
	}
	if strings.ContainsAny(slug, " \t\r\n/") {
		return Cell{}, errorf(Invalid, "invalid cell slug %q: no spaces or slashes", c.Slug)
	}
	region := strings.TrimSpace(c.Region)
	if region == "" {
		return Cell{}, errorf(Invalid, "cell region is required")
	}
	base, err := checkBrokerURL(c.BaseURL)
	if err != nil {
		return Cell{}, err
	}
	class, err := checkClass("cell class", c.Class)
	if err != nil {
		return Cell{}, err
	}
	if c.CapacitySlots < 0 {
		return Cell{}, errorf(Invalid, "invalid cell capacity %d: use 0 (no cap) or more", c.CapacitySlots)
	}
	tenancy, err := checkTenancy(c.Tenancy)
	if err != nil {
		return Cell{}, err
	}
	grants, err := checkGrants(c.Grants)
	if err != nil {
		return Cell{}, err
	}
	var id string
	err = db.QueryRow(ctx, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, capacity_slots, cell_secret, broker_version, tenancy_stated, grants)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), $8, $9) RETURNING id::text`,
		slug, region, base, class, c.CapacitySlots, c.Secret, strings.TrimSpace(c.BrokerVersion), tenancy, grants).Scan(&id)
	if err != nil {
		return Cell{}, dbError("add cell", err)
	}
	return getCell(ctx, db, id)
}

// checkBrokerURL validates a cell's broker URL.
func checkBrokerURL(raw string) (string, error) {
	base := strings.TrimSpace(raw)
	if base == "" {
		return "", errorf(Invalid, "cell broker URL is required")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errorf(Invalid, "invalid cell broker URL %q: want http://host:port", raw)
	}
	return base, nil
}

// CellChange is what UpdateCell changes; nil fields stay as they are.
type CellChange struct {
	BaseURL     *string
	Secret      *string // a new bearer token (not empty)
	ClearSecret bool    // remove the secret
	Tenancy     *string // probe, scoped or unscoped
	Region      *string
	Capacity    *int // clusters the cell takes, 0 for no cap; not below what it holds
	// Grants is how the broker takes grants: api, verify or none. It
	// applies to placements from then on; clusters already on the cell
	// keep what they were granted.
	Grants *string
}

// UpdateCell changes a cell through queen_proxy.update_cell, so that the
// CLI, the console and plain SQL behave alike: a new URL or secret resets
// the probe's verdict to unknown (the cell serves its keeper only until the
// next probe decides), and every change of URL, secret or stated tenancy
// reaches every gateway within a second. A capacity below the clusters the
// cell holds is refused (WrongState), by the database under the cell's lock.
func UpdateCell(ctx context.Context, db DB, cell string, ch CellChange) (Cell, error) {
	c, err := lookupCell(ctx, db, cell)
	if err != nil {
		return Cell{}, err
	}
	if ch.BaseURL == nil && ch.Secret == nil && !ch.ClearSecret && ch.Tenancy == nil && ch.Region == nil && ch.Capacity == nil && ch.Grants == nil {
		return Cell{}, errorf(Invalid, "nothing to change: give --url, --secret, --clear-secret, --tenancy, --region, --capacity or --grants")
	}
	var grants string
	if ch.Grants != nil {
		if strings.TrimSpace(*ch.Grants) == "" {
			return Cell{}, errorf(Invalid, "invalid grants \"\": use api, verify or none")
		}
		if grants, err = checkGrants(*ch.Grants); err != nil {
			return Cell{}, err
		}
	}
	if ch.Capacity != nil && *ch.Capacity < 0 {
		return Cell{}, errorf(Invalid, "invalid cell capacity %d: use 0 (no cap) or more", *ch.Capacity)
	}
	if ch.Secret != nil && ch.ClearSecret {
		return Cell{}, errorf(Invalid, "give a new secret or clear it, not both")
	}
	if ch.Secret != nil && *ch.Secret == "" {
		return Cell{}, errorf(Invalid, "the new secret is empty; clear it instead")
	}
	var base, tenancy, region *string
	if ch.BaseURL != nil {
		b, err := checkBrokerURL(*ch.BaseURL)
		if err != nil {
			return Cell{}, err
		}
		base = &b
	}
	if ch.Tenancy != nil {
		if strings.TrimSpace(*ch.Tenancy) == "" {
			return Cell{}, errorf(Invalid, "invalid tenancy \"\": use probe, scoped or unscoped")
		}
		t, err := checkTenancy(*ch.Tenancy)
		if err != nil {
			return Cell{}, err
		}
		tenancy = &t
	}
	if ch.Region != nil {
		r := strings.TrimSpace(*ch.Region)
		if r == "" {
			return Cell{}, errorf(Invalid, "cell region is required")
		}
		region = &r
	}
	err = inTx(ctx, db, "update cell", func(tx pgx.Tx) error {
		if base != nil || ch.Secret != nil || ch.ClearSecret || tenancy != nil || region != nil || ch.Capacity != nil {
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.update_cell($1::uuid, $2, $3, $4, $5, $6, $7::integer)`,
				c.ID, base, ch.Secret, ch.ClearSecret, tenancy, region, ch.Capacity); err != nil {
				return err
			}
		}
		if ch.Grants != nil {
			if _, err := tx.Exec(ctx, `UPDATE queen_proxy.cells SET grants = $2 WHERE id = $1::uuid`, c.ID, grants); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Cell{}, err
	}
	return getCell(ctx, db, c.ID)
}

// GetCell reads one cell by slug or id.
func GetCell(ctx context.Context, db DB, cell string) (Cell, error) {
	c, err := lookupCell(ctx, db, cell)
	if err != nil {
		return Cell{}, err
	}
	return getCell(ctx, db, c.ID)
}

// ListCells returns every cell, ordered by slug.
func ListCells(ctx context.Context, db DB) ([]Cell, error) {
	rows, err := db.Query(ctx, cellSelect+` ORDER BY ce.slug`)
	if err != nil {
		return nil, dbError("list cells", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cell, error) { return scanCell(r) })
	if err != nil {
		return nil, dbError("list cells", err)
	}
	return nonNil(out), nil
}

// SetCellStatus sets a cell's status: draining stops placing new clusters on
// it (placement passes it over, CreateCluster and MoveCluster naming it
// refuse it) while the gateway keeps serving the clusters already there;
// active undoes that. A trigger tells
// every gateway (migrations/016), as for every change of a cell.
func SetCellStatus(ctx context.Context, db DB, cell, status string) (Cell, error) {
	switch status {
	case CellActive, CellDraining, CellDead:
	default:
		return Cell{}, errorf(Invalid, "invalid cell status %q: use active, draining or dead", status)
	}
	c, err := lookupCell(ctx, db, cell)
	if err != nil {
		return Cell{}, err
	}
	if _, err := db.Exec(ctx, `UPDATE queen_proxy.cells SET status = $2 WHERE id = $1::uuid`, c.ID, status); err != nil {
		return Cell{}, dbError("set cell status", err)
	}
	return getCell(ctx, db, c.ID)
}

// placeable checks that a cell takes new clusters.
func placeable(c ref) error {
	if c.Status != CellActive {
		return errorf(WrongState, "cell %q is %s and takes no new clusters", c.Name, c.Status)
	}
	return nil
}
