package controlplane

import (
	"context"
	"strings"
)

// ReleasedCellGateway is what ReleaseCellGateway did.
type ReleasedCellGateway struct {
	Cell string `json:"cell"`
	// Group is the gateway group that was recorded as fronting the cell;
	// nil when none was.
	Group *string `json:"released_group"`
}

// ReleaseCellGateway forgets which gateway group fronts cell
// (queen_proxy.release_gateway_cell), so that another group may claim it
// at its next start. The cell is named by slug and need not exist: a
// gateway may have claimed a cell before it was added. Every gateway
// reloads the cell's clusters at once.
func ReleaseCellGateway(ctx context.Context, db DB, cell string) (ReleasedCellGateway, error) {
	cell = strings.TrimSpace(cell)
	if cell == "" {
		return ReleasedCellGateway{}, errorf(Invalid, "a cell slug is required")
	}
	out := ReleasedCellGateway{Cell: cell}
	if err := db.QueryRow(ctx, `SELECT queen_proxy.release_gateway_cell($1)`, cell).Scan(&out.Group); err != nil {
		return ReleasedCellGateway{}, dbError("release cell gateway", err)
	}
	return out, nil
}
