package queencli

import (
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

func cellUpdateCommand() *cobra.Command {
	update := &cobra.Command{
		Use:   "update <cell> [--url <broker URL>] [--secret-env <VAR> | --secret <token> | --clear-secret] [--tenancy probe|scoped|unscoped] [--region <region>]",
		Short: "Changes a cell's broker URL, secret, stated tenancy or region",
		Long: `
Changes a cell through update_cell, as the console and plain SQL do. Every
gateway reloads the cell's clusters within a second.

A new URL or secret points the cell at a broker no probe has seen: the
probe's verdict is reset to unknown in the same statement, so until the
gateway has probed it again only the cell's keeper is served (unless the
cell is stated scoped).
` + tenancyNote,
	}
	f := update.Flags()
	f.String("url", "", "new broker base URL, e.g. http://192.0.2.7:6632")
	f.String("secret", "", "new bearer token for the broker (visible in the process list; prefer --secret-env)")
	f.String("secret-env", "", "name of an environment variable holding the new bearer token")
	f.Bool("clear-secret", false, "send no bearer token to the broker any more")
	f.String("tenancy", "", "probe, scoped or unscoped")
	f.String("region", "", "new region label")
	update.RunE = action(exactly(1), func(r *run, args []string) error {
		var ch controlplane.CellChange
		str := func(name string) *string {
			if !f.Changed(name) {
				return nil
			}
			v, _ := f.GetString(name)
			return &v
		}
		ch.BaseURL, ch.Tenancy, ch.Region = str("url"), str("tenancy"), str("region")
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
			r.printf("updated cell %q (broker %s, tenancy %s); gateways reload its %d cluster(s)",
				cell.Slug, cell.BaseURL, cell.TenancyStated, cell.Clusters)
			if cell.TenantScoping == "unknown" && before.TenantScopingDetail != cell.TenantScopingDetail {
				r.printf("note: the broker URL or secret changed: the probe's verdict (was %s) is unknown until the gateway probes the cell again",
					before.TenantScoping)
			}
			return nil
		})
	})
	return update
}
