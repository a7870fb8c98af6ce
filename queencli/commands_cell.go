package queencli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

// tenancyNote is the help both cell add and cell update give on --tenancy.
const tenancyNote = `
--tenancy states what the cell's broker does with x-queen-tenant:
  probe     (default) the gateway probes the broker and serves every cluster
            only once the probe decided it keeps tenants apart; until then,
            and when it does not, only the cell's keeper (its first cluster
            placed) is served
  scoped    the broker keeps tenants apart: every cluster is served, unless
            a probe finds otherwise; then only the keeper is, and the
            gateway says so (metric, log, /readyz, "cell list")
  unscoped  the broker does not (the public Queen broker): only the keeper is
            served and the cell takes no second cluster, whatever a probe finds`

// grantsNote is the help cell add and cell update give on --grants.
const grantsNote = `
--grants states how the cell's broker takes per-tenant feature grants. A
tenancy broker (Queen's Rust brokers with QUEEN_TENANCY_HEADER=true) answers
KV, timers, locks and ephemeral queues (and so Kafka offset commits) with
403 feature_gated until the tenant holds a grant. Whenever a cluster is
placed on a cell whose broker keeps tenants apart (cluster create, cluster
move), the cluster needs the kv grant (always: the Kafka carve-out commits
offsets through KV), ephemeral when its plan has ephemeral, and streams when
its plan has streams:
  verify    (default) the 1.x line: grants are queen.kv_quota rows in the
            cell's own database, which the gateway cannot write; it reads,
            as the cluster, whether the broker grants them, and refuses the
            placement with the SQL to run there when it does not
  api       the raft-storage line: the gateway issues them (POST
            /api/v1/resources/quota) and withdraws them when the cluster is
            deleted or moved away; a failure leaves the cluster unplaced
  none      the broker gates nothing by grant (tenancy off, or 0.15)
`

// capacityNote is the help cell add and cell update give on --capacity.
const capacityNote = `
--capacity is how many clusters the cell takes (cells.capacity_slots), held on
every placement, chosen or named, by the database; 0 (the default) is no cap.
"cluster create" without --cell places a cluster on the least loaded active
cell of its plan's class with room (see "cell list --help").
`

const cellListLong = `
Lists every cell. USED/CAPACITY is the clusters placed on it over its cap
("no cap" for 0), kept exact by the database. PLACEMENT says whether
"cluster create" without --cell may choose it:
  open         yes
  draining     no: drained ("cell drain"); it keeps serving its clusters
  dead         no: marked dead
  full         no: USED has reached CAPACITY
  keeper-only  no: its broker is not known to keep tenants apart and it
               holds its keeper (its first cluster), the only one served
  residue      no: empty, but a keeper's queues are still on its broker
  occupied     no: a dedicated cell with its one cluster
Of the open cells of the plan's class, the least loaded wins: the lowest
USED/CAPACITY (0 for a cell without a cap), then the fewest clusters, then
the slug. TENANCY is the operator's statement, TENANT SCOPING the probe's
verdict (and when it was taken), SERVES what the gateway serves on it.`

func cellUpdateCommand() *cobra.Command {
	update := &cobra.Command{
		Use:   "update <cell> [--url <broker URL>] [--secret-env <VAR> | --secret <token> | --clear-secret] [--tenancy probe|scoped|unscoped] [--region <region>] [--capacity <n>] [--grants api|verify|none]",
		Short: "Changes a cell's broker URL, secret, stated tenancy, region or capacity",
		Long: `
Changes a cell through update_cell, as the console and plain SQL do. Every
gateway reloads the cell's clusters within a second.

A new URL or secret points the cell at a broker no probe has seen: the
probe's verdict is reset to unknown in the same statement, so until the
gateway has probed it again only the cell's keeper is served (unless the
cell is stated scoped).
` + capacityNote + `A capacity below the clusters the cell holds is refused.
` + tenancyNote + grantsNote,
	}
	f := update.Flags()
	f.String("url", "", "new broker base URL, e.g. http://192.0.2.7:6632")
	f.String("secret", "", "new bearer token for the broker (visible in the process list; prefer --secret-env)")
	f.String("secret-env", "", "name of an environment variable holding the new bearer token")
	f.Bool("clear-secret", false, "send no bearer token to the broker any more")
	f.String("tenancy", "", "probe, scoped or unscoped")
	f.String("region", "", "new region label")
	f.Int("capacity", 0, "clusters the cell takes (0: no cap); not below the clusters it holds")
	f.String("grants", "", "how the broker takes feature grants: api, verify or none")
	update.RunE = action(exactly(1), func(r *run, args []string) error {
		var ch controlplane.CellChange
		str := func(name string) *string {
			if !f.Changed(name) {
				return nil
			}
			v, _ := f.GetString(name)
			return &v
		}
		ch.BaseURL, ch.Tenancy, ch.Region, ch.Grants = str("url"), str("tenancy"), str("region"), str("grants")
		ch.Secret = str("secret")
		if env := str("secret-env"); env != nil {
			if ch.Secret != nil {
				return refused("give --secret or --secret-env, not both")
			}
			v, ok := os.LookupEnv(*env)
			if !ok || v == "" {
				return refused("environment variable %s (from --secret-env) is not set", *env)
			}
			ch.Secret = &v
		}
		ch.ClearSecret, _ = f.GetBool("clear-secret")
		if f.Changed("capacity") {
			n, _ := f.GetInt("capacity")
			ch.Capacity = &n
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		before, err := controlplane.GetCell(r.ctx, pool, args[0])
		if err != nil {
			return err
		}
		cell, err := controlplane.UpdateCell(r.ctx, pool, args[0], ch)
		if err != nil {
			return err
		}
		return r.emit(cell, func() error {
			r.printf("updated cell %q (broker %s, tenancy %s, %s); gateways reload its %d cluster(s)",
				cell.Slug, cell.BaseURL, cell.TenancyStated, slotsText(cell), cell.Clusters)
			if cell.TenantScoping == "unknown" && before.TenantScopingDetail != cell.TenantScopingDetail {
				r.printf("note: the broker URL or secret changed: the probe's verdict (was %s) is unknown until the gateway probes the cell again",
					before.TenantScoping)
			}
			return nil
		})
	})
	return update
}

// slotsText is a cell's use for messages: "2 of 10 slots used" or "2
// clusters, no cap".
func slotsText(c controlplane.Cell) string {
	if c.CapacitySlots == 0 {
		return fmt.Sprintf("%d cluster(s), no cap", c.UsedSlots)
	}
	return fmt.Sprintf("%d of %d slots used", c.UsedSlots, c.CapacitySlots)
}

func cellRemoveCommand() *cobra.Command {
	remove := &cobra.Command{
		Use:   "remove <cell> [--forget-residue]",
		Short: "Removes a cell that holds no cluster",
		Long: `
Removes a cell (remove_cell). It is refused while any cluster is placed on
the cell, with their number: drain the cell ("cell drain") so nothing new is
placed there, move each cluster with "cluster move <cluster> --to <cell>"
("cluster list --cell <cell>" lists them), then remove it.

It is also refused while the cell records queues its keeper left on a broker
not known to keep tenants apart (a re-added cell for that broker would not
know of them): delete them there first, or give --forget-residue when the
broker is retired with its data.

The removal is recorded in the outbox (kind cell_removed). A cell without
clusters has nothing cached on any gateway, so no gateway needs telling.`,
	}
	remove.Flags().Bool("forget-residue", false, "remove the cell although a keeper's queues are still on its broker (the broker is retired)")
	remove.RunE = action(exactly(1), func(r *run, args []string) error {
		forget, _ := r.cmd.Flags().GetBool("forget-residue")
		pool, err := r.db()
		if err != nil {
			return err
		}
		removed, err := controlplane.RemoveCell(r.ctx, pool, args[0], forget)
		if err != nil {
			return err
		}
		return r.emit(removed, func() error {
			r.printf("removed cell %q (%s, region %s, broker %s)", removed.Slug, removed.Class, removed.Region, removed.BaseURL)
			if removed.ResidueForgotten != nil {
				r.printf("note: the queues its keeper left on that broker were not deleted: %s", removed.ResidueForgotten)
			}
			return nil
		})
	})
	return remove
}

func cellReleaseGatewayCommand() *cobra.Command {
	release := &cobra.Command{
		Use:   "release-gateway <cell>",
		Short: "Forgets which gateway group fronts a cell, so that another group may claim it",
		Long: `
A gateway configured with "cells" in its queen block records at start that
its group (its leader_group, or its gateway_name) fronts those cells, in
queen_proxy.gateway_group_cells; a cell is fronted by one group, and a
gateway of another group that claims it does not start. To hand a cell to
new gateways, stop the old group's gateways (or remove the cell from their
"cells"), release the cell here, then start the new ones. A gateway of the
old group that still runs serves the cell's clusters until the new group has
claimed it; started again with the cell configured, it claims it again.
Every gateway reloads the cell's clusters within a second.`,
	}
	release.RunE = action(exactly(1), func(r *run, args []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		out, err := controlplane.ReleaseCellGateway(r.ctx, pool, args[0])
		if err != nil {
			return err
		}
		return r.emit(out, func() error {
			if out.Group == nil {
				r.printf("no gateway group is recorded as fronting cell %q; nothing changed", out.Cell)
				return nil
			}
			r.printf("cell %q is no longer recorded as fronted by gateway group %q; the next group to start with it in \"cells\" claims it",
				out.Cell, *out.Group)
			return nil
		})
	})
	return release
}
