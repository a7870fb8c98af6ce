package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/tenancy"
)

// grantClient reaches cells' brokers for grants; each call is bounded.
var grantClient = &http.Client{Timeout: 15 * time.Second}

// grantTarget is what placing or withdrawing a cluster's grants on a cell
// needs.
type grantTarget struct {
	clusterSlug, brokerTenant, planCode string
	features                            tenancy.Features
	cellSlug, grants                    string
	// scoped: the cell's broker keeps tenants apart (not keeper-only), the
	// only kind of broker that gates features by grant.
	scoped bool
	call   cellclient.Client
}

func readGrantTarget(ctx context.Context, tx pgx.Tx, clusterID, cellID string) (grantTarget, error) {
	var g grantTarget
	var features, url, secret string
	err := tx.QueryRow(ctx, `SELECT c.slug, c.broker_tenant_uuid::text, p.code, p.features::text,
		ce.slug, ce.base_url, coalesce(ce.cell_secret, ''), ce.grants,
		NOT queen_proxy.tenancy_keeper_only(ce.tenancy_stated, ce.tenant_scoping)
		FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id, queen_proxy.cells ce
		WHERE c.id = $1::uuid AND ce.id = $2::uuid`, clusterID, cellID).
		Scan(&g.clusterSlug, &g.brokerTenant, &g.planCode, &features, &g.cellSlug, &url, &secret, &g.grants, &g.scoped)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, errorf(NotFound, "unknown cluster or cell (%s on %s)", clusterID, cellID)
	}
	if err != nil {
		return g, err
	}
	g.features = tenancy.ParseFeatures([]byte(features))
	g.call = cellclient.Client{HTTP: grantClient, BaseURL: url, Authorization: cellclient.Bearer(secret)}
	return g, nil
}

func kindList(kinds []tenancy.GrantKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// placeGrants gives the cluster, placed on the cell in tx and not yet
// committed, the feature grants its plan needs there (tenancy.GrantsFor:
// kv always, for the Kafka carve-out; ephemeral and streams when the plan
// has them). It is the one place that does so, for every placement (create,
// move). Only a cell whose broker keeps tenants apart gates features; on
// it, by the cell's grants statement:
//
//   - api: the grants are issued on the broker (idempotent); a failure
//     refuses the placement, so the caller's transaction rolls back and the
//     cluster is not placed (a grant issued before the failure stays on
//     the broker for a tenant no cluster has, which is harmless);
//   - verify: the broker is asked, as the cluster, whether it grants them;
//     a refusal (403 feature_gated) or a broker that cannot be asked
//     refuses the placement, naming the rows the operator writes in the
//     cell's database;
//   - none: nothing is checked; the operator stated the broker gates
//     nothing.
func placeGrants(ctx context.Context, tx pgx.Tx, clusterID, cellID string) error {
	g, err := readGrantTarget(ctx, tx, clusterID, cellID)
	if err != nil || !g.scoped {
		return err
	}
	kinds := tenancy.GrantsFor(g.features)
	switch g.grants {
	case tenancy.CellGrantsNone:
		return nil
	case tenancy.CellGrantsAPI:
		if err := tenancy.IssueGrants(ctx, g.call, g.brokerTenant, kinds); err != nil {
			return &Error{Kind: Unavailable, Err: err, Msg: fmt.Sprintf(
				"cannot issue cluster %q's grants (%s, for plan %s) on cell %q (grants: api) for broker tenant %s: %v; the cluster was not placed: "+
					"check that the broker at %s answers POST /api/v1/resources/quota for the gateway, or state how the cell takes grants with caddy queen cell update %s --grants verify|none",
				g.clusterSlug, kindList(kinds), g.planCode, g.cellSlug, g.brokerTenant, err, g.call.BaseURL, g.cellSlug)}
		}
		return nil
	}
	missing, err := tenancy.VerifyGrants(ctx, g.call, g.brokerTenant, kinds)
	if err != nil {
		return &Error{Kind: Unavailable, Err: err, Msg: fmt.Sprintf(
			"cannot verify cluster %q's grants (%s, for plan %s) on cell %q (grants: verify) for broker tenant %s: %v; the cluster was not placed: "+
				"a tenancy broker answers KV and ephemeral queues with 403 feature_gated until the tenant is granted them",
			g.clusterSlug, kindList(kinds), g.planCode, g.cellSlug, g.brokerTenant, err)}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Error{Kind: WrongState, Msg: fmt.Sprintf(
		"cell %q does not grant broker tenant %s the %s grant(s) that cluster %q on plan %s needs (its broker answered 403 feature_gated); the cluster was not placed. "+
			"The gateway cannot write the cell's database: there, run %s (and, for ephemeral, the broker's ephemeral grant for the tenant), "+
			"wait for the broker to re-read its grants (QUEEN_KV_QUOTA_REFRESH_MS, 30 s by default), then run the command again with --broker-tenant %s. "+
			"On a raft-storage cell state caddy queen cell update %s --grants api instead, and the gateway issues them",
		g.cellSlug, g.brokerTenant, kindList(missing), g.clusterSlug, g.planCode,
		tenancy.KVQuotaGrantSQL(g.brokerTenant), g.brokerTenant, g.cellSlug)}
}

// withdrawGrants takes back what placeGrants gave the cluster on the cell
// it is leaving (deleted, moved away), in the leaving transaction: on a
// cell with grants api every kind is withdrawn (withdrawing what was not
// granted changes nothing), and a failure refuses the leave. On a cell with
// grants verify the gateway cannot, and note says what the operator runs.
func withdrawGrants(ctx context.Context, tx pgx.Tx, clusterID, cellID string) (note string, err error) {
	g, err := readGrantTarget(ctx, tx, clusterID, cellID)
	if err != nil || !g.scoped {
		return "", err
	}
	switch g.grants {
	case tenancy.CellGrantsAPI:
		if err := tenancy.WithdrawGrants(ctx, g.call, g.brokerTenant, tenancy.AllGrantKinds); err != nil {
			return "", &Error{Kind: Unavailable, Err: err, Msg: fmt.Sprintf(
				"cannot withdraw cluster %q's grants on cell %q (grants: api) for broker tenant %s: %v; nothing changed",
				g.clusterSlug, g.cellSlug, g.brokerTenant, err)}
		}
		return "", nil
	case tenancy.CellGrantsVerify:
		return fmt.Sprintf("cell %q's grants for broker tenant %s stay in its database until the operator removes them there: %s",
			g.cellSlug, g.brokerTenant, tenancy.KVQuotaWithdrawSQL(g.brokerTenant)), nil
	}
	return "", nil
}

// withdrawClustersGrants withdraws the grants of clusters that are being
// deleted, each on its cell, in the deleting transaction, and returns the
// notes for the operator. A failure refuses the deletion unless force is
// set (the cell's broker is unreachable and its data abandoned): then the
// note says the grants stay.
func withdrawClustersGrants(ctx context.Context, tx pgx.Tx, ids []string, force bool) ([]string, error) {
	var notes []string
	for _, id := range ids {
		var cellID string
		if err := tx.QueryRow(ctx, `SELECT cell_id::text FROM queen_proxy.clusters WHERE id = $1::uuid`, id).Scan(&cellID); err != nil {
			return nil, err
		}
		note, err := withdrawGrants(ctx, tx, id, cellID)
		if err != nil {
			if !force {
				return nil, err
			}
			note = err.Error() + "; forced: the grants stay on the cell's broker"
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	return notes, nil
}
