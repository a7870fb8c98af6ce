package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// newCellIsolation builds the per-cell isolation tracker: it probes each
// cell the gateway serves for whether its broker scopes by x-queen-tenant,
// and records the verdict in the control-plane database.
func (b *backend) newCellIsolation(every time.Duration, log *zap.Logger) {
	client := &http.Client{Timeout: 10 * time.Second}
	b.isolation = tenancy.NewCellIsolation(tenancy.CellIsolationConfig{
		Probe: func(ctx context.Context, cell tenancy.ProbeCell) (tenancy.TenantScoping, error) {
			return tenancy.ProbeTenantScoping(ctx, client, cell, b.app.Load().probeCredential(cell))
		},
		// The verdict is recorded only for the broker the probe reached: a
		// cell whose URL or secret changed meanwhile keeps its reset.
		Record: func(ctx context.Context, cell tenancy.ProbeCell, v tenancy.TenantScoping, detail string) error {
			var recorded bool
			err := b.pool.QueryRow(ctx, `SELECT queen_proxy.record_cell_tenant_scoping($1::uuid, $2, $3, $4, $5)`,
				cell.ID, string(v), detail, cell.BaseURL, cell.Secret).Scan(&recorded)
			if err != nil {
				return fmt.Errorf("record cell tenant scoping: %w", err)
			}
			if !recorded {
				log.Named("isolation").Info("cell verdict not recorded: the cell changed since it was probed", zap.String("cell", cell.Slug))
			}
			return nil
		},
		Keeper: func(ctx context.Context, cellID string) (string, error) {
			var id string
			err := b.pool.QueryRow(ctx, `SELECT coalesce(queen_proxy.cell_keeper_cluster($1::uuid)::text, '')`, cellID).Scan(&id)
			if err != nil {
				return "", fmt.Errorf("read cell keeper: %w", err)
			}
			return id, nil
		},
		Every: every,
		Log:   log.Named("isolation"),
	})
}

// probeCredential is what the gateway presents to a cell to probe it: an
// admin token in the gateway's own name (the probe configures and deletes
// a queue), or the cell's static secret.
func (a *App) probeCredential(cell tenancy.ProbeCell) string {
	return a.ownCellCredential(cell.Slug, cell.Secret, "queengate-isolation-probe", tenancy.BrokerRoleAdmin)
}

// errCellNotIsolated answers a cluster whose cell serves only its keeper
// (the first cluster placed on it).
var errCellNotIsolated = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.CellNotIsolated,
	Message: "this cluster's cell cannot keep it apart from other clusters: its broker does not scope by tenant (or is not yet verified to); the operator must move the cluster to a dedicated cell or run a broker with tenancy"}

// errReservedName answers a request that names (in its path, query or
// body, in any spelling) one of the isolation probe's reserved names: a
// tenant that could touch the probe's queue could move the verdict.
var errReservedName = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest,
	Message: tenancy.ReservedNameMessage}

// admitOnCell refuses a cluster that its cell may not serve.
func (g *Gateway) admitOnCell(r *http.Request, c *tenancy.Cluster) *apierror.Error {
	iso := g.app.backend.isolation
	cell := tenancy.ProbeCellOf(c)
	d := iso.Admit(r.Context(), cell, c.ID)
	if d.Serve {
		return nil
	}
	iso.NoteRefusal(cell, c.Slug, d)
	return errCellNotIsolated
}

// noteCellFailure tells the isolation tracker that a cell could not be
// reached: whatever answers there next is probed before it serves more
// than one cluster.
func (g *Gateway) noteCellFailure(c *tenancy.Cluster, err error) {
	var dial reverseproxy.DialError
	if errors.As(err, &dial) {
		g.app.backend.isolation.CellUnreachable(c.CellID)
	}
}

// isolationReadiness shows each served cell's verdict on the readiness
// endpoint. It never makes the gateway unready: a cell that does not scope
// still serves its keeper.
func (b *backend) isolationReadiness(context.Context) (string, string, bool) {
	vs := b.isolation.Verdicts()
	if len(vs) == 0 {
		return "cell_isolation", "no cell served yet", true
	}
	parts := make([]string, 0, len(vs))
	for _, v := range vs {
		s := v.CellSlug + ": " + string(v.Verdict)
		switch {
		case v.Contradicted:
			s += " (CONTRADICTS the operator's stated scoped: only the keeper is served; fix the broker or run caddy queen cell update " + v.CellSlug + " --tenancy probe|unscoped)"
		case v.Verdict != tenancy.ScopingScoped && v.Stated == tenancy.StatedUnscoped:
			s += " (stated unscoped: only the keeper is served)"
		case v.Verdict != tenancy.ScopingScoped:
			s += " (only the keeper is served)"
		case v.Stated == tenancy.StatedScoped:
			s += " (stated)"
		}
		parts = append(parts, s)
	}
	return "cell_isolation", strings.Join(parts, "; "), true
}
