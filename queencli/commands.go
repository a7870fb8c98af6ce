// Package queencli is the `caddy queen` command tree: the operator
// subcommands (migrate, cells, tenants, clusters, keys, users, plans, usage)
// that call the control-plane SQL functions through package controlplane.
// Importing it registers the `queen` command with Caddy's command line.
package queencli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

// Exit codes of `caddy queen …`. They follow Caddy's: 0 is success and 1
// (caddy.ExitCodeFailedStartup) means "do not retry unchanged"; queengate
// adds 4, after Caddy's own 2 and 3, for a database that did not do its part.
const (
	// exitOK: the command did what it was asked.
	exitOK = caddy.ExitCodeSuccess
	// exitRefused: bad usage or input, something unknown, a name already
	// taken, a grant across tenants, an object in the wrong state, a missing
	// or malformed database URL, or a database without the schema.
	exitRefused = caddy.ExitCodeFailedStartup
	// exitDatabase: the database could not be reached, refused the
	// connection, did not answer in time or failed; a retry may succeed.
	exitDatabase = caddy.ExitCodeFailedQuit + 1
)

const queenLong = `
Operates the queengate control plane: the queen_proxy database that every
gateway reads. Each command is a thin call of the control-plane SQL functions,
which audit the change and tell every gateway to drop what it cached, so a
change reaches the gateways within a second.

Objects are named as operators name them: cells, tenants and clusters by slug
(or id), plans by code, users by e-mail, API keys by id.

The database URL comes from --database-url or, when that is not given, from
the environment variable QUEENGATE_DATABASE_URL (the one the example
Caddyfile reads), e.g. postgres://queengate@db.example.com:5432/queen_proxy.

Output is an aligned table or a short report; --json prints JSON instead, for
scripts. Errors are one line on stderr, "queen <command>: <problem>".

Exit codes:
  0  success
  1  refused: bad usage or input, unknown object, name already taken, grant
     across tenants, object in the wrong state, missing or invalid database
     URL, database without the queen_proxy schema (run "caddy queen migrate")
  4  the database could not be reached, refused the connection, did not
     answer in time or failed; retrying may help
`

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:      "queen",
		Usage:     "<command> [flags]",
		Short:     "Manages queengate cells, tenants, clusters, keys, machine tokens, users, plans, usage and webhooks",
		Long:      queenLong,
		CobraFunc: buildQueenCommand,
	})
}

// queenHelpTemplate is cobra's help layout, ending with where queengate's
// commands are documented.
const queenHelpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}
Every command is documented in docs/operations.md of queengate:
https://github.com/queengate/queengate/blob/main/docs/operations.md
`

// buildQueenCommand fills in the `queen` command Caddy created.
func buildQueenCommand(cmd *cobra.Command) {
	cmd.PersistentFlags().String("database-url", "", "control-plane database URL (default $"+controlplane.EnvDatabaseURL+")")
	cmd.PersistentFlags().Bool("json", false, "print JSON instead of tables")
	cmd.PersistentFlags().Duration("timeout", time.Minute, "give up on the database after this long")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fail(c, &controlplane.Error{Kind: controlplane.Invalid, Msg: err.Error() + usageHint(c)})
	})
	// Caddy's root help ends with Caddy's documentation link, which every
	// subcommand inherits; these commands are documented in queengate's.
	cmd.SetHelpTemplate(queenHelpTemplate)
	groupCommand(cmd)
	cmd.AddCommand(
		migrateCommand(),
		cellCommand(),
		tenantCommand(),
		clusterCommand(),
		keyCommand(),
		tokenCommand(),
		userCommand(),
		planCommand(),
		usageCommand(),
		webhookCommand(),
		versionCommand(),
	)
	silence(cmd)
}

// silence makes cobra leave error reporting to these commands, which print
// their own one-line messages, throughout the tree.
func silence(cmd *cobra.Command) {
	cmd.SilenceErrors = true
	cmd.SilenceUsage = true
	for _, c := range cmd.Commands() {
		silence(c)
	}
}

// groupCommand makes a command that only holds subcommands refuse to run
// without one.
func groupCommand(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return fail(c, &controlplane.Error{Kind: controlplane.Invalid, Msg: "missing command" + usageHint(c)})
		}
		return fail(c, &controlplane.Error{Kind: controlplane.Invalid,
			Msg: fmt.Sprintf("unknown command %q%s", args[0], usageHint(c))})
	}
}

// name is the command as error messages show it: "queen tenant create".
func name(c *cobra.Command) string {
	path := c.CommandPath()
	if i := strings.Index(path, " "); i >= 0 {
		return path[i+1:]
	}
	return path
}

func usageHint(c *cobra.Command) string {
	return fmt.Sprintf(" (see \"%s --help\")", c.CommandPath())
}

// errSilent ends a failed command whose message is already printed; Caddy's
// main turns it into exit code 1.
var errSilent = errors.New("queen: failed")

// fail prints err as "queen <command>: <message>" and returns what makes
// Caddy exit with the code for its kind.
func fail(c *cobra.Command, err error) error {
	fmt.Fprintf(c.ErrOrStderr(), "%s: %s\n", name(c), err.Error())
	return exitWith(c, exitCode(err))
}

// exitCode maps a failure to the exit code documented above.
func exitCode(err error) int {
	switch controlplane.KindOf(err) {
	case controlplane.Unavailable, controlplane.Failed:
		return exitDatabase
	}
	return exitRefused
}

// exitWith returns the error that makes caddycmd.Main exit with code: Main
// exits 1 on any error, and with the code itself only for the errors
// WrapCommandFuncForCobra makes from a code above 1.
func exitWith(c *cobra.Command, code int) error {
	switch {
	case code == exitOK:
		return nil
	case code == exitRefused:
		return errSilent
	}
	return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return code, nil })(c, nil)
}

// run is the state of one command invocation.
type run struct {
	cmd  *cobra.Command
	ctx  context.Context
	out  io.Writer
	json bool
	pool *pgxpool.Pool
}

// db connects to the control-plane database on first use.
func (r *run) db() (*pgxpool.Pool, error) {
	if r.pool != nil {
		return r.pool, nil
	}
	url, _ := r.cmd.Flags().GetString("database-url")
	if strings.TrimSpace(url) == "" {
		url = os.Getenv(controlplane.EnvDatabaseURL)
	}
	if strings.TrimSpace(url) == "" {
		return nil, &controlplane.Error{Kind: controlplane.Invalid,
			Msg: "no database URL: pass --database-url or set " + controlplane.EnvDatabaseURL}
	}
	pool, err := controlplane.Connect(r.ctx, url, 10*time.Second)
	if err != nil {
		return nil, err
	}
	r.pool = pool
	return pool, nil
}

// printf writes a line of human-readable output.
func (r *run) printf(format string, args ...any) {
	fmt.Fprintf(r.out, format+"\n", args...)
}

// emit prints v as JSON with --json, or else calls human.
func (r *run) emit(v any, human func() error) error {
	if r.json {
		return controlplane.WriteJSON(r.out, v)
	}
	return human()
}

// argsSpec says how many positional arguments a command takes.
type argsSpec struct {
	min, max int
}

func exactly(n int) argsSpec { return argsSpec{n, n} }

// action wraps a command body: it checks the arguments, sets up the
// invocation, and reports failures with the right exit code.
func action(spec argsSpec, body func(r *run, args []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if len(args) < spec.min || len(args) > spec.max {
			what := fmt.Sprintf("%d argument", spec.min)
			if spec.min != 1 {
				what += "s"
			}
			if spec.max != spec.min {
				what = fmt.Sprintf("%d to %d arguments", spec.min, spec.max)
			}
			return fail(c, &controlplane.Error{Kind: controlplane.Invalid,
				Msg: fmt.Sprintf("want %s (%s), got %d%s", what, c.Use, len(args), usageHint(c))})
		}
		timeout, _ := c.Flags().GetDuration("timeout")
		if timeout <= 0 {
			timeout = time.Minute
		}
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		asJSON, _ := c.Flags().GetBool("json")
		r := &run{cmd: c, ctx: ctx, out: c.OutOrStdout(), json: asJSON}
		defer func() {
			if r.pool != nil {
				r.pool.Close()
			}
		}()
		if err := body(r, args); err != nil {
			return fail(c, err)
		}
		return nil
	}
}

// refused is a usage error raised by the glue itself.
func refused(format string, args ...any) error {
	return &controlplane.Error{Kind: controlplane.Invalid, Msg: fmt.Sprintf(format, args...)}
}

// hint appends advice to the message of a failure of the given kind.
func hint(err error, kind controlplane.Kind, advice string) error {
	var e *controlplane.Error
	if errors.As(err, &e) && e.Kind == kind {
		return &controlplane.Error{Kind: e.Kind, Msg: e.Msg + "; " + advice, Err: e.Err}
	}
	return err
}

func migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Applies the embedded queen_proxy migrations the database lacks",
		Long: `
Applies the queen_proxy migrations embedded in this binary that the database
does not have yet, in order, each in its own transaction, under the advisory
lock a starting gateway takes (so running it while gateways start is safe).
Gateways apply them at start too; run this to migrate ahead of an upgrade or
before provisioning with the other commands. Prints what it applied.`,
		Args: cobra.ArbitraryArgs,
		RunE: action(exactly(0), func(r *run, _ []string) error {
			pool, err := r.db()
			if err != nil {
				return err
			}
			m, err := controlplane.Migrate(r.ctx, pool)
			for _, name := range m.Applied {
				if !r.json {
					r.printf("applied %s", name)
				}
			}
			if err != nil {
				return err
			}
			return r.emit(m, func() error {
				latest := m.Known[len(m.Known)-1]
				if len(m.Applied) == 0 {
					r.printf("database is up to date (%d migrations, latest %s)", len(m.Known), latest)
				} else {
					r.printf("database is at %s (%d migrations, %d applied now)", latest, len(m.Known), len(m.Applied))
				}
				return nil
			})
		}),
	}
}

func cellCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cell",
		Short: "Adds, updates, lists, drains and removes cells (one broker stack each, fronted by one gateway)",
	}
	groupCommand(cmd)

	add := &cobra.Command{
		Use:   "add <slug> --region <region> --url <broker URL> [--class shared|dedicated] [--tenancy probe|scoped|unscoped]",
		Short: "Adds a cell",
		Long: `
Adds a cell: one Queen broker (with its PostgreSQL) that one gateway fronts.
--url is the broker's plain-HTTP address as the gateway reaches it. When the
broker requires a token, give it with --secret-env (the name of an environment
variable that holds it, which keeps it out of the process list) or --secret;
the gateway presents it upstream as "Authorization: Bearer <secret>".
Cells are plain rows: no SQL function creates them.
` + capacityNote + tenancyNote + grantsNote,
	}
	add.Flags().String("region", "", "region label, e.g. eu1 (required)")
	add.Flags().String("url", "", "broker base URL, e.g. http://192.0.2.7:6632 (required)")
	add.Flags().String("class", "shared", "shared (many clusters) or dedicated (one)")
	add.Flags().Int("capacity", 0, "clusters the cell takes, enforced on every placement (0: no cap)")
	add.Flags().String("secret", "", "bearer token for the broker (visible in the process list; prefer --secret-env)")
	add.Flags().String("secret-env", "", "name of an environment variable holding the bearer token for the broker")
	add.Flags().String("broker-version", "", "broker version (informational)")
	add.Flags().String("tenancy", controlplane.TenancyProbe, "what the broker does with x-queen-tenant: probe (let the gateway find out), scoped or unscoped")
	add.Flags().String("grants", "verify", "how the broker takes feature grants: api (raft-storage line), verify (1.x) or none")
	add.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		secret, _ := f.GetString("secret")
		if env, _ := f.GetString("secret-env"); env != "" {
			if secret != "" {
				return refused("give --secret or --secret-env, not both")
			}
			var ok bool
			if secret, ok = os.LookupEnv(env); !ok || secret == "" {
				return refused("environment variable %s (from --secret-env) is not set", env)
			}
		}
		n := controlplane.NewCell{Slug: args[0], Secret: secret}
		n.Region, _ = f.GetString("region")
		n.BaseURL, _ = f.GetString("url")
		n.Class, _ = f.GetString("class")
		n.CapacitySlots, _ = f.GetInt("capacity")
		n.BrokerVersion, _ = f.GetString("broker-version")
		n.Tenancy, _ = f.GetString("tenancy")
		n.Grants, _ = f.GetString("grants")
		pool, err := r.db()
		if err != nil {
			return err
		}
		cell, err := controlplane.AddCell(r.ctx, pool, n)
		if err != nil {
			return err
		}
		return r.emit(cell, func() error {
			r.printf("added cell %q (%s, region %s, broker %s, tenancy %s), id %s", cell.Slug, cell.Class, cell.Region, cell.BaseURL,
				cell.TenancyStated, cell.ID)
			return nil
		})
	})

	list := &cobra.Command{Use: "list", Short: "Lists cells with their use, placement state and tenancy verdict", Long: cellListLong}
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		cells, err := controlplane.ListCells(r.ctx, pool)
		if err != nil {
			return err
		}
		return r.emit(cells, func() error { return controlplane.CellsTable(cells).WriteText(r.out) })
	})

	drain := &cobra.Command{
		Use:   "drain <cell> [--undo]",
		Short: "Stops placing new clusters on a cell",
		Long: `
Marks a cell as draining (cells.status = 'draining'). A draining cell keeps
serving the clusters it has: their traffic, keys and limits are untouched,
and every gateway goes on routing to it. It takes no new ones: placement
("cluster create" without --cell) passes it over, and "cluster create --cell"
and "cluster move --to" naming it are refused. To retire the cell, move its
clusters away with "cluster move" (their broker data does not move), then
"cell remove" it. --undo makes it active again.`,
	}
	drain.Flags().Bool("undo", false, "make the cell active again")
	drain.RunE = action(exactly(1), func(r *run, args []string) error {
		status := controlplane.CellDraining
		if undo, _ := r.cmd.Flags().GetBool("undo"); undo {
			status = controlplane.CellActive
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		cell, err := controlplane.SetCellStatus(r.ctx, pool, args[0], status)
		if err != nil {
			return err
		}
		return r.emit(cell, func() error {
			if cell.Status == controlplane.CellActive {
				r.printf("cell %q is active: new clusters may be placed on it", cell.Slug)
			} else {
				r.printf("cell %q is draining: it keeps serving its %d cluster(s) and takes no new ones", cell.Slug, cell.Clusters)
			}
			return nil
		})
	})
	cmd.AddCommand(add, cellUpdateCommand(), list, drain, cellRemoveCommand(), cellReleaseGatewayCommand())
	return cmd
}

func tenantCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Creates, lists, suspends, resumes and deletes tenants",
	}
	groupCommand(cmd)

	create := &cobra.Command{
		Use:   "create <slug> [--name <name>]",
		Short: "Creates a tenant",
		Long: `
Creates a tenant (create_tenant). The slug is a DNS label: 1 to 63 characters
from a-z, 0-9 and inner hyphens. The name defaults to the slug.`,
	}
	create.Flags().String("name", "", "display name (default: the slug)")
	create.RunE = action(exactly(1), func(r *run, args []string) error {
		nm, _ := r.cmd.Flags().GetString("name")
		pool, err := r.db()
		if err != nil {
			return err
		}
		t, err := controlplane.CreateTenant(r.ctx, pool, args[0], nm)
		if err != nil {
			return err
		}
		return r.emit(t, func() error {
			r.printf("created tenant %q (%s), id %s", t.Slug, t.Name, t.ID)
			return nil
		})
	})

	list := &cobra.Command{Use: "list", Short: "Lists tenants"}
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		ts, err := controlplane.ListTenants(r.ctx, pool)
		if err != nil {
			return err
		}
		return r.emit(ts, func() error { return controlplane.TenantsTable(ts).WriteText(r.out) })
	})

	suspend := &cobra.Command{
		Use:   "suspend <tenant> [--grace]",
		Short: "Stops a tenant's traffic (or only its pushes, with --grace)",
		Long: `
Suspends a tenant (set_tenant_status 'suspended'): every gateway refuses all
traffic to each of its clusters with 403 cluster_suspended. With --grace the
tenant goes to 'grace' instead: pushes are refused, consuming still works
(e.g. for an unpaid invoice). "tenant resume" undoes either.`,
	}
	suspend.Flags().Bool("grace", false, "refuse pushes only, keep consuming open")
	suspend.RunE = action(exactly(1), func(r *run, args []string) error {
		status := controlplane.TenantSuspended
		if g, _ := r.cmd.Flags().GetBool("grace"); g {
			status = controlplane.TenantGrace
		}
		return setTenantStatus(r, args[0], status, false)
	})

	resume := &cobra.Command{
		Use:   "resume <tenant>",
		Short: "Lets a suspended tenant's traffic through again",
		Long: `
Makes a tenant active again (set_tenant_status 'active'). A tenant that is
being deleted is refused unless --force is given, because some of its
clusters' broker data may already be purged.`,
	}
	resume.Flags().Bool("force", false, "also resume a tenant that is being deleted")
	resume.RunE = action(exactly(1), func(r *run, args []string) error {
		force, _ := r.cmd.Flags().GetBool("force")
		return setTenantStatus(r, args[0], controlplane.TenantActive, force)
	})

	del := &cobra.Command{
		Use:   "delete <tenant> [--purged | --force]",
		Short: "Deletes a tenant and everything it owns, in three steps",
		Long: `
Deleting a tenant takes three steps, in this order:

  1. caddy queen tenant delete <tenant>
     sets the tenant to 'deleting': every gateway stops all of its traffic at
     once (403 cluster_suspended). It prints each cluster with its cell and
     broker tenant id. Nothing is removed yet.

  2. Purge each cluster's queues and messages on its cell. On the cell's
     broker PostgreSQL, run for each cluster
         SELECT queen.delete_tenant_data_v1('<broker tenant id>');
     and repeat it until it reports nothing left to delete.
     The gateway cannot do this: the broker data lives on the cells.

  3. caddy queen tenant delete <tenant> --purged
     deletes the tenant from the control plane (delete_tenant): its users,
     clusters, roles, API keys (revoked first), queue registry, usage and
     audit rows. A tenant_deleted event stays in the outbox.

--force does step 3 at once without steps 1 and 2: the tenant's data stays
on the brokers, unreachable. Use it only for tenants that never pushed.

Step 3 (and --force) checks each cluster that is the keeper of a cell not
known to scope, as below.
` + keeperNote,
	}
	threeStepDeletion[controlplane.DeletionPlan, controlplane.Deletion]{
		what:       "tenant",
		purgedHelp: "step 3: the clusters are purged on their cells; delete the tenant",
		forceHelp:  "delete at once without stopping traffic or purging the brokers",
		stepTwo:    "its clusters",
		begin:      controlplane.BeginTenantDeletion,
		showPlan:   printDeletionPlan,
		finish:     controlplane.DeleteTenant,
		report:     reportTenantDeletion,
	}.attach(del)
	cmd.AddCommand(create, list, suspend, resume, del)
	return cmd
}

func setTenantStatus(r *run, tenant, status string, force bool) error {
	pool, err := r.db()
	if err != nil {
		return err
	}
	t, err := controlplane.SetTenantStatus(r.ctx, pool, tenant, status, force)
	if err != nil {
		return err
	}
	return r.emit(t, func() error {
		switch t.Status {
		case controlplane.TenantSuspended:
			r.printf("tenant %q is suspended: gateways refuse all traffic to its %d cluster(s)", t.Slug, t.Clusters)
		case controlplane.TenantGrace:
			r.printf("tenant %q is in grace: gateways refuse pushes to its %d cluster(s); consuming still works", t.Slug, t.Clusters)
		default:
			r.printf("tenant %q is active: its %d cluster(s) serve traffic again", t.Slug, t.Clusters)
		}
		return nil
	})
}

func printDeletionPlan(r *run, p controlplane.DeletionPlan) {
	if p.AlreadyDeleting {
		r.printf("step 1 of 3 was already done: tenant %q is deleting and gateways refuse all of its traffic", p.Tenant.Slug)
	} else {
		r.printf("step 1 of 3 done: tenant %q is now deleting; gateways refuse all of its traffic", p.Tenant.Slug)
	}
	if len(p.Purge) == 0 {
		r.printf("step 2 of 3: nothing to purge, the tenant has no clusters")
	} else {
		r.printf("step 2 of 3: purge each cluster's data on its cell's broker PostgreSQL, repeating each statement")
		r.printf("until it reports nothing left to delete:")
		t := controlplane.Table{Header: []string{"CLUSTER", "CELL", "BROKER", "PURGE"}}
		for _, c := range p.Purge {
			t.Rows = append(t.Rows, []string{c.ClusterSlug, c.CellSlug, c.CellURL, c.PurgeSQL()})
		}
		_ = t.WriteText(r.out)
	}
	r.printf("step 3 of 3: caddy queen tenant delete %s --purged", p.Tenant.Slug)
}

// reportTenantDeletion is step 3's (or --force's) report.
func reportTenantDeletion(r *run, d controlplane.Deletion) {
	r.printf("deleted tenant %q: %d cluster(s), %d user(s), %d API key(s) (%d revoked now), %d audit row(s)",
		d.TenantSlug, d.Counts["clusters"], d.Counts["users"], d.Counts["api_keys"],
		d.Counts["api_keys_revoked"], d.Counts["operations"])
	for _, k := range d.Released {
		r.printf("cluster %q was the keeper of cell %q; its queues there are gone, and the next cluster on the cell is its keeper now",
			k.ClusterSlug, k.CellSlug)
	}
	for _, n := range d.GrantsNotes {
		r.printf("note: %s", n)
	}
	if d.Forced && d.StatusWas != controlplane.TenantDeleting {
		r.printf("forced: the broker data of these clusters was not purged and stays on their cells:")
		for _, c := range d.Clusters {
			r.printf("  %s  broker tenant %s", c.Slug, c.BrokerTenantUUID)
		}
	}
}
