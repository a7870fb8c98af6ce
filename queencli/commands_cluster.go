package queencli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

func clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Creates, lists, moves, suspends, resumes, push-blocks and deletes clusters, sets their plan and limit overrides",
	}
	groupCommand(cmd)

	create := &cobra.Command{
		Use:   "create <slug> --tenant <tenant> [--plan <code>] [--cell <cell>] [--delete-queues [--yes]]",
		Short: "Creates a cluster (a hostname and a broker namespace) for a tenant",
		Long: `
Creates a cluster (create_cluster). Its slug is the first label of its
hostname (<slug>.<base domain>) and is unique across all tenants. The cluster
gets its own broker namespace (broker tenant id, sent upstream as
x-queen-tenant).

Without --cell the database places it (place_cluster), as the console and
plain SQL do: on the least loaded active cell of the plan's cell class with
room (lowest used/capacity, then fewest clusters, then slug), and of the
cells whose broker is not known to keep tenants apart only an empty one (the
cluster becomes its keeper). Two creates at once never overfill a cell. With
no such cell it is refused with what to add. A cell named with --cell must be
active (not draining) and have room.

On a cell whose broker keeps tenants apart, the cluster gets (or must
already have) the broker's feature grants its plan needs, as the cell's
--grants says (see "cell add --help"); otherwise it is not created. On a
cell with grants verify, grant the broker tenant in the cell's database
first and give it with --broker-tenant (the refusal prints both).
` + keeperNote,
	}
	create.Flags().String("tenant", "", "owning tenant (required)")
	create.Flags().String("plan", "free", "plan code (see \"plan list\")")
	keeperFlags(create)
	create.Flags().String("cell", "", "cell to place it on (default: the database places it)")
	create.Flags().String("broker-tenant", "", "the cluster's broker tenant id (a UUID; default: a random one), e.g. one already granted on the cell")
	create.RunE = action(exactly(1), func(r *run, args []string) error {
		n := controlplane.NewCluster{Slug: args[0]}
		n.Tenant, _ = r.cmd.Flags().GetString("tenant")
		n.Plan, _ = r.cmd.Flags().GetString("plan")
		n.Cell, _ = r.cmd.Flags().GetString("cell")
		n.BrokerTenant, _ = r.cmd.Flags().GetString("broker-tenant")
		n.Release = r.keeperReleaser()
		if strings.TrimSpace(n.Tenant) == "" {
			return refused("--tenant is required")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		c, err := controlplane.CreateCluster(r.ctx, pool, n)
		if err != nil {
			return err
		}
		return r.emit(c, func() error {
			r.printf("created cluster %q for tenant %q on cell %q, plan %s, broker tenant %s, id %s",
				c.Slug, c.TenantSlug, c.CellSlug, c.PlanCode, c.BrokerTenantUUID, c.ID)
			if c.Placed {
				cell, err := controlplane.GetCell(r.ctx, pool, c.CellID)
				if err != nil {
					return err
				}
				r.printf("placed on cell %q: the least loaded active %s cell with room; now %s", cell.Slug, cell.Class, slotsText(cell))
			}
			return nil
		})
	})

	list := &cobra.Command{Use: "list [--tenant <tenant>] [--cell <cell>] [--plan <code>]", Short: "Lists clusters"}
	list.Flags().String("tenant", "", "only this tenant's clusters")
	list.Flags().String("cell", "", "only the clusters on this cell")
	list.Flags().String("plan", "", "only the clusters on this plan")
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		var f controlplane.ClusterFilter
		f.Tenant, _ = r.cmd.Flags().GetString("tenant")
		f.Cell, _ = r.cmd.Flags().GetString("cell")
		f.Plan, _ = r.cmd.Flags().GetString("plan")
		pool, err := r.db()
		if err != nil {
			return err
		}
		cs, err := controlplane.ListClusters(r.ctx, pool, f)
		if err != nil {
			return err
		}
		return r.emit(cs, func() error { return controlplane.ClustersTable(cs).WriteText(r.out) })
	})

	move := &cobra.Command{
		Use:   "move <cluster> --to <cell> [--delete-queues [--yes]]",
		Short: "Sends a cluster's traffic to another cell",
		Long: `
Points a cluster at another cell: from the next request on, every gateway
sends its traffic there (the change is audited as cluster_moved and announced
to the gateways). The target cell must be active.

The broker data does NOT move: the cluster's queues and messages stay on the
old cell's broker. Move the data first (or accept starting empty), and run
the cluster's traffic through the new cell's gateway (update DNS). On the new
cell the cluster is placed now: it comes after the cell's clusters, so it
never becomes the keeper of a cell that has one.
` + keeperNote,
	}
	move.Flags().String("to", "", "target cell (required)")
	keeperFlags(move)
	drainFlag(move)
	move.RunE = action(exactly(1), func(r *run, args []string) error {
		to, _ := r.cmd.Flags().GetString("to")
		if strings.TrimSpace(to) == "" {
			return refused("--to is required")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		m, err := controlplane.MoveCluster(r.drainContext(), pool, args[0], to, r.keeperReleaser())
		if err != nil {
			return err
		}
		return r.emit(m, func() error {
			if !m.Moved {
				r.printf("cluster %q is already on cell %q; nothing changed", m.Cluster.Slug, m.ToCell)
				return nil
			}
			r.printf("moved cluster %q from cell %q to cell %q", m.Cluster.Slug, m.FromCell, m.ToCell)
			if m.Released != nil {
				r.printf("note: it was the keeper of cell %q; its queues there are gone, and the next cluster on the cell is its keeper now",
					m.FromCell)
			} else {
				r.printf("note: its queues and messages stay on cell %q's broker (broker tenant %s); they were not copied",
					m.FromCell, m.Cluster.BrokerTenantUUID)
			}
			if m.GrantsNote != "" {
				r.printf("note: %s", m.GrantsNote)
			}
			return nil
		})
	})

	setPlan := &cobra.Command{
		Use:   "set-plan <cluster> <plan>",
		Short: "Puts a cluster on another plan",
		Long: `
Assigns a plan to a cluster (assign_plan). The cluster's limit overrides stay
and still apply on top of the new plan.`,
	}
	setPlan.RunE = action(exactly(2), func(r *run, args []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		c, err := controlplane.SetClusterPlan(r.ctx, pool, args[0], args[1])
		if err != nil {
			return err
		}
		return r.emit(c, func() error {
			r.printf("cluster %q is on plan %s", c.Slug, c.PlanCode)
			return nil
		})
	})

	override := &cobra.Command{
		Use:   "override <cluster> [<overrides JSON>] [--clear]",
		Short: "Sets a cluster's limit overrides and shows its effective limits",
		Long: `
Replaces a cluster's limit overrides as a whole (set_limit_override) and shows
its limits: the plan's, the overrides and the effective ones the gateway
enforces. The overrides are a JSON object whose keys are plan limit names and
whose values are whole numbers (0 or more) or null (unlimited), e.g.

  caddy queen cluster override acme-prod '{"max_queues": 500, "req_burst": null}'

A key that is absent keeps the plan's value. --clear (or '{}') removes every
override. Without a JSON argument nothing changes and the limits are shown.

Limit names: ` + strings.Join(controlplane.LimitNames, ", ") + `.`,
	}
	override.Flags().Bool("clear", false, "remove every override")
	override.RunE = action(argsSpec{1, 2}, func(r *run, args []string) error {
		clearAll, _ := r.cmd.Flags().GetBool("clear")
		if clearAll && len(args) == 2 {
			return refused("give overrides or --clear, not both")
		}
		var doc []byte
		if len(args) == 2 {
			var err error
			if doc, err = controlplane.NormalizeOverrides([]byte(args[1])); err != nil {
				return err
			}
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		var l controlplane.Limits
		switch {
		case clearAll:
			l, err = controlplane.SetOverrides(r.ctx, pool, args[0], []byte("{}"))
		case doc != nil:
			l, err = controlplane.SetOverrides(r.ctx, pool, args[0], doc)
		default:
			l, err = controlplane.ClusterLimits(r.ctx, pool, args[0])
		}
		if err != nil {
			return err
		}
		return r.emit(l, func() error {
			r.printf("cluster %q, plan %s, overrides %s", l.Cluster, l.Plan, string(l.Overrides))
			return controlplane.LimitsTable(l).WriteText(r.out)
		})
	})
	cmd.AddCommand(create, list, move, setPlan, override)
	cmd.AddCommand(clusterLifecycleCommands()...)
	return cmd
}

func keyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Creates, lists, rotates and revokes API keys",
	}
	groupCommand(cmd)

	create := &cobra.Command{
		Use:   "create --cluster <cluster> [--name <name>] [--scopes <list>] [--expires <when>]",
		Short: "Creates an API key for a cluster and prints it once",
		Long: `
Creates an API key for a cluster: qk_<env>_ followed by 43 random base64url
characters (32 bytes). Only its SHA-256 is stored (issue_api_key), so the key
is printed this once: store it now. An expiry is stored with
set_api_key_expiry; past it the gateway refuses the key like a revoked one.

--scopes is a comma-separated subset of produce, consume, read, admin.
--expires is an RFC 3339 time (2027-01-31T00:00:00Z), a date (2027-01-31,
midnight UTC) or a duration from now (720h, 90d); default never.`,
	}
	create.Flags().String("cluster", "", "cluster the key belongs to (required)")
	create.Flags().String("name", "default", "name to recognise the key by")
	create.Flags().String("scopes", "produce,consume,read,admin", "comma-separated scopes")
	create.Flags().String("env", "live", "the <env> part of qk_<env>_…, e.g. live or test")
	create.Flags().String("expires", "", "expiry: RFC 3339 time, date or duration (default never)")
	create.RunE = action(exactly(0), func(r *run, _ []string) error {
		f := r.cmd.Flags()
		var n controlplane.NewKey
		n.Cluster, _ = f.GetString("cluster")
		n.Name, _ = f.GetString("name")
		n.Env, _ = f.GetString("env")
		if strings.TrimSpace(n.Cluster) == "" {
			return refused("--cluster is required")
		}
		scopes, _ := f.GetString("scopes")
		var err error
		if n.Scopes, err = controlplane.ParseScopes(scopes); err != nil {
			return err
		}
		expires, _ := f.GetString("expires")
		if n.ExpiresAt, err = controlplane.ParseExpiry(expires, time.Now()); err != nil {
			return err
		}
		if _, _, err := controlplane.GenerateKey(n.Env); err != nil {
			return err // checks --env before connecting
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		k, err := controlplane.CreateKey(r.ctx, pool, n)
		if err != nil {
			return err
		}
		return r.emit(k, func() error {
			exp := "never"
			if k.ExpiresAt != nil {
				exp = k.ExpiresAt.UTC().Format(time.RFC3339)
			}
			r.printf("created API key %s %q for cluster %q, scopes %s, expires %s",
				k.ID, k.Name, k.ClusterSlug, strings.Join(k.Scopes, ","), exp)
			r.printf("key (shown once, store it now): %s", k.Key)
			return nil
		})
	})

	list := &cobra.Command{Use: "list --cluster <cluster> [--all]", Short: "Lists a cluster's API keys"}
	list.Flags().String("cluster", "", "cluster whose keys to list (required)")
	list.Flags().Bool("all", false, "include revoked keys")
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		cluster, _ := r.cmd.Flags().GetString("cluster")
		all, _ := r.cmd.Flags().GetBool("all")
		if strings.TrimSpace(cluster) == "" {
			return refused("--cluster is required")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		ks, err := controlplane.ListKeys(r.ctx, pool, cluster, all)
		if err != nil {
			return err
		}
		return r.emit(ks, func() error { return controlplane.KeysTable(ks).WriteText(r.out) })
	})

	revoke := &cobra.Command{
		Use:   "revoke <key id>",
		Short: "Revokes an API key",
		Long:  "\nRevokes an API key by its id (revoke_api_key); every gateway refuses it within a second.",
	}
	revoke.RunE = action(exactly(1), func(r *run, args []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		k, err := controlplane.RevokeKey(r.ctx, pool, args[0])
		if err != nil {
			return err
		}
		return r.emit(k, func() error {
			r.printf("revoked API key %s %q of cluster %q", k.ID, k.Name, k.ClusterSlug)
			return nil
		})
	})
	cmd.AddCommand(create, list, keyRotateCommand(), revoke)
	return cmd
}
