package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrClusterElsewhere: the cluster lives on a cell this gateway does not
// front. Its traffic belongs to its own cell's gateway, whose buckets are
// the only ones that may admit it.
var ErrClusterElsewhere = errors.New("cluster is on a cell another gateway fronts")

// Fronting is which cells a gateway serves: the cells it is configured for,
// under the group name its claim on them is recorded with (the leader
// group, or a lone gateway's own name).
//
// Every per-cluster limit lives in one gateway's memory, so it is exact only
// while a single gateway admits each cluster's traffic. Serves is the one
// rule that keeps it so.
type Fronting struct {
	// Group is the name the gateway's claim is recorded under; "" for a
	// gateway that records none.
	Group string
	// Cells are the slugs of the cells the gateway fronts. Empty: the
	// gateway fronts every cell no group has claimed (a single-gateway
	// deployment that predates the setting).
	Cells []string
}

// Serves reports whether the gateway may admit traffic of cluster c: the
// cell is one it is configured for (when it is configured for any), and no
// other group is recorded as fronting it. A cell another group claimed is
// refused even when the configuration names it, so two groups configured
// for one cell never both serve it; whichever claimed first keeps it.
func (f Fronting) Serves(c *Cluster) bool {
	if c.CellGroup != "" && c.CellGroup != f.Group {
		return false
	}
	return len(f.Cells) == 0 || slices.Contains(f.Cells, c.CellSlug)
}

// FrontsEveryCell reports whether the gateway was configured without a list
// of cells.
func (f Fronting) FrontsEveryCell() bool { return len(f.Cells) == 0 }

// CellClaim is the recorded fronting of one cell after a claim.
type CellClaim struct {
	Cell      string
	Group     string // the group recorded for the cell
	ClaimedBy string // the member that first recorded it
	ClaimedAt time.Time
	Claimed   bool // the group is the claimant's
	Exists    bool // the cell exists in queen_proxy.cells
}

// ClaimCells records that group fronts cells, as stated by its member
// gateway, where no other group does (queen_proxy.claim_gateway_cells), and
// returns what is recorded for each cell afterwards.
func (s *Store) ClaimCells(ctx context.Context, group, gateway string, cells []string) ([]CellClaim, error) {
	rows, err := s.pool.Query(ctx, `SELECT cell_slug, group_name, claimed_by, claimed_at, claimed, cell_exists
		FROM queen_proxy.claim_gateway_cells($1, $2, $3)`, group, gateway, cells)
	if err != nil {
		return nil, fmt.Errorf("claim cells: %w", err)
	}
	claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CellClaim, error) {
		var c CellClaim
		err := row.Scan(&c.Cell, &c.Group, &c.ClaimedBy, &c.ClaimedAt, &c.Claimed, &c.Exists)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim cells: %w", err)
	}
	return claims, nil
}
