package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/tenancy"
)

// frontingOf is the configured fronting: the cells, trimmed and without
// repeats, under the group name the claim is recorded with. Called before
// gateway_name gets its default, which names a process rather than a
// gateway that restarts, and so cannot hold a claim.
func (a *App) frontingOf() tenancy.Fronting {
	var cells []string
	for _, c := range a.Cells {
		c = strings.TrimSpace(c)
		if !slices.Contains(cells, c) {
			cells = append(cells, c)
		}
	}
	group := a.LeaderGroup
	if group == "" {
		group = strings.TrimSpace(a.GatewayName)
	}
	return tenancy.Fronting{Group: group, Cells: cells}
}

func (a *App) validateCells() error {
	if len(a.Cells) == 0 {
		return nil
	}
	f := a.fronting
	if f.Cells == nil {
		f = a.frontingOf()
	}
	for _, c := range f.Cells {
		if c == "" || strings.ContainsAny(c, " \t\r\n,") {
			return fmt.Errorf("queen: cells: %q is not a cell slug", c)
		}
	}
	if f.Group == "" {
		return fmt.Errorf("queen: cells needs leader_group, or for a gateway of its own an explicit gateway_name: the claim on the cells is recorded under that name, which must stay the same across restarts")
	}
	return nil
}

// everyCellWarning is logged once per process: a gateway without cells
// serves every unclaimed cell, which is right only for the one gateway of
// a control plane.
var everyCellWarning sync.Once

// stateFronting says which cells the gateway fronts, and records its claim
// on them in the control-plane database. A cell another group holds fails
// the start (or the reload): two groups fronting one cell would each
// admit its clusters against buckets of their own. When the database does
// not answer at start, the claim is recorded once it does
// (claimFrontingLate); meanwhile the gateway serves only what the
// database confirms anyway.
func (a *App) stateFronting(ctx context.Context) error {
	f := a.fronting
	if f.FrontsEveryCell() {
		everyCellWarning.Do(func() {
			a.logger.Warn("no cells configured: this gateway serves every cell that no gateway group has claimed; "+
				"each per-cluster limit is exact only while it is the one gateway on its control plane, so set `cells` "+
				"in the queen block of every gateway of a production deployment",
				zap.String("group", f.Group))
		})
		return nil
	}
	a.logger.Info("fronting cells", zap.String("group", f.Group), zap.Strings("cells", f.Cells))
	if a.backend.lastDatabaseOK.Load() == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(a.DatabaseTimeout))
	defer cancel()
	err := a.claimCells(cctx)
	var conflict *cellConflictError
	if errors.As(err, &conflict) {
		return err
	}
	if err != nil {
		a.logger.Warn("claim on cells not recorded; clusters of cells another group claims are refused all the same",
			zap.Strings("cells", f.Cells), zap.Error(err))
	}
	return nil
}

// claimFrontingLate records the claim of the configuration in use once the
// database answers after a start without it. A conflict can no longer fail
// the start: it is logged for a person, and the clusters of the contested
// cell are refused, since the database names the other group for it.
func (b *backend) claimFrontingLate(ctx context.Context, log *zap.Logger) {
	a := b.app.Load()
	if a == nil || a.fronting.FrontsEveryCell() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(a.DatabaseTimeout))
	defer cancel()
	if err := a.claimCells(cctx); err != nil {
		log.Error("claim on cells not recorded; clusters of a cell another group holds are refused",
			zap.Strings("cells", a.fronting.Cells), zap.Error(err))
	}
}

// cellConflictError: a configured cell is recorded as fronted by another
// group.
type cellConflictError struct {
	held []tenancy.CellClaim
}

func (e *cellConflictError) Error() string {
	var parts []string
	for _, c := range e.held {
		parts = append(parts, fmt.Sprintf("cell %q is fronted by gateway group %q (claimed by gateway %q at %s)",
			c.Cell, c.Group, c.ClaimedBy, c.ClaimedAt.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ") + ": a cell is fronted by one group, whose gateways alone count its clusters' limits; " +
		"if that group no longer fronts it, stop its gateways and release the cell with `caddy queen cell release-gateway <cell>`"
}

func (a *App) claimCells(ctx context.Context) error {
	f := a.fronting
	claims, err := a.backend.store.ClaimCells(ctx, f.Group, a.GatewayName, f.Cells)
	if err != nil {
		return err
	}
	var held []tenancy.CellClaim
	for _, c := range claims {
		switch {
		case !c.Claimed:
			held = append(held, c)
		case !c.Exists:
			a.logger.Warn("a configured cell does not exist yet; its claim is recorded, and its clusters are served once it is added",
				zap.String("cell", c.Cell), zap.String("group", f.Group))
		}
	}
	if len(held) > 0 {
		return &cellConflictError{held: held}
	}
	return nil
}

// frontingReadiness says on /readyz which cells the gateway fronts; never
// unready.
func (a *App) frontingReadiness(context.Context) (string, string, bool) {
	f := a.fronting
	if f.FrontsEveryCell() {
		return "cells", "every cell no gateway group has claimed (cells not set)", true
	}
	return "cells", strings.Join(f.Cells, ", ") + " (group " + f.Group + ")", true
}
