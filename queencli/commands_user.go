package queencli

import (
	"bufio"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

func userCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Creates users, sets their passwords, grants and revokes their cluster roles, sets the operator bit",
	}
	groupCommand(cmd)

	create := &cobra.Command{
		Use:   "create <email> (--tenant <tenant> | --operator) [--name <name>] [--password-stdin]",
		Short: "Creates a user of a tenant, or a platform operator",
		Long: `
Creates a local user of a tenant (create_user, and set_user_name for --name).
With --operator the user also gets the operator bit (set_operator) in the same
transaction; without --tenant an operator lands in the platform tenant
("platform"), the operators' own, which "caddy queen migrate" creates and
"tenant delete" refuses to delete.
E-mails are unique across all tenants. With --password-stdin the first line
of standard input is the password (12 to 128 characters), stored as a bcrypt
hash; without it the user can only sign in through an identity provider that
vouches for the e-mail. Give the user a role on a cluster with "user grant".`,
	}
	create.Flags().String("tenant", "", "tenant the user belongs to (required without --operator)")
	create.Flags().Bool("operator", false, "give the user the operator bit; without --tenant, in the platform tenant")
	create.Flags().String("name", "", "display name")
	create.Flags().Bool("password-stdin", false, "read the password from the first line of standard input")
	create.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		n := controlplane.NewUser{Email: args[0]}
		n.Tenant, _ = f.GetString("tenant")
		n.Name, _ = f.GetString("name")
		n.Operator, _ = f.GetBool("operator")
		if strings.TrimSpace(n.Tenant) == "" && !n.Operator {
			return refused("--tenant is required (or --operator, for a platform operator)")
		}
		if fromStdin, _ := f.GetBool("password-stdin"); fromStdin {
			line, err := bufio.NewReader(r.cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return refused("--password-stdin: no password on standard input")
			}
			n.Password = strings.TrimRight(line, "\r\n")
			if n.Password == "" {
				return refused("--password-stdin: the password is empty")
			}
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		u, err := controlplane.CreateUser(r.ctx, pool, n)
		if err != nil {
			return err
		}
		return r.emit(u, func() error {
			r.printf("created user %q in tenant %q, id %s", u.Email, u.TenantSlug, u.ID)
			if u.IsOperator {
				r.printf("operator: yes; the fleet view also needs operator_enabled and identity { operator_api } (docs/identity.md)")
			}
			if !u.HasPassword {
				r.printf("note: no password set; the user can sign in only through an identity provider")
			}
			return nil
		})
	})

	list := &cobra.Command{
		Use:   "list [--tenant <tenant>] [--created-from <origin>] [--never-signed-in]",
		Short: "Lists users and their roles",
		Long: `
Lists users with their roles, last sign-in and where each account was created
(CREATED FROM): control_plane (this CLI or SQL), operator, console (by a
cluster admin) or signup (a provider sign-in with autoprovision), with who
created it when known.

The console once created an account for any e-mail address a cluster admin
typed, which kept the address's owner out of their own tenant. To review
such accounts:

  caddy queen user list --created-from console --never-signed-in`,
	}
	list.Flags().String("tenant", "", "only this tenant's users")
	list.Flags().String("created-from", "", "only accounts created from: "+strings.Join(controlplane.Origins, ", "))
	list.Flags().Bool("never-signed-in", false, "only accounts nobody has signed in to")
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		var f controlplane.UserFilter
		f.Tenant, _ = r.cmd.Flags().GetString("tenant")
		f.CreatedFrom, _ = r.cmd.Flags().GetString("created-from")
		f.NeverSignedIn, _ = r.cmd.Flags().GetBool("never-signed-in")
		pool, err := r.db()
		if err != nil {
			return err
		}
		us, err := controlplane.FindUsers(r.ctx, pool, f)
		if err != nil {
			return err
		}
		return r.emit(us, func() error { return controlplane.UsersTable(us).WriteText(r.out) })
	})

	grant := &cobra.Command{
		Use:   "grant <email> --cluster <cluster> --role admin|producer|consumer|viewer",
		Short: "Gives a user a role on a cluster of its tenant",
		Long: `
Gives a user a role on a cluster (grant_cluster_role), replacing the role it
had there. User and cluster must belong to the same tenant.`,
	}
	grant.Flags().String("cluster", "", "cluster (required)")
	grant.Flags().String("role", "", "admin, producer, consumer or viewer (required)")
	grant.RunE = action(exactly(1), func(r *run, args []string) error {
		cluster, _ := r.cmd.Flags().GetString("cluster")
		role, _ := r.cmd.Flags().GetString("role")
		if strings.TrimSpace(cluster) == "" {
			return refused("--cluster is required")
		}
		if strings.TrimSpace(role) == "" {
			return refused("--role is required (admin, producer, consumer or viewer)")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		g, err := controlplane.GrantRole(r.ctx, pool, args[0], cluster, role)
		if err != nil {
			return err
		}
		return r.emit(g, func() error {
			if g.Previous != "" && g.Previous != g.Role {
				r.printf("%q is now %s on cluster %q (was %s)", g.Email, g.Role, g.Cluster, g.Previous)
			} else {
				r.printf("%q is %s on cluster %q", g.Email, g.Role, g.Cluster)
			}
			return nil
		})
	})

	revoke := &cobra.Command{
		Use:   "revoke <email> --cluster <cluster>",
		Short: "Takes a user's role on a cluster away",
	}
	revoke.Flags().String("cluster", "", "cluster (required)")
	revoke.RunE = action(exactly(1), func(r *run, args []string) error {
		cluster, _ := r.cmd.Flags().GetString("cluster")
		if strings.TrimSpace(cluster) == "" {
			return refused("--cluster is required")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		g, err := controlplane.RevokeRole(r.ctx, pool, args[0], cluster)
		if err != nil {
			return err
		}
		return r.emit(g, func() error {
			r.printf("%q no longer has a role on cluster %q (was %s)", g.Email, g.Cluster, g.Previous)
			return nil
		})
	})

	operator := &cobra.Command{
		Use:   "operator on|off <email>",
		Short: "Grants or withdraws the operator (super-admin) bit",
		Long: `
Grants (on) or withdraws (off) a user's operator bit (set_operator), the only
way to change it: no HTTP route can. An operator administers every cluster on
the cells it reaches. Every gateway drops its cached bit at once (the change
is announced to them); an operator act that commits after the withdrawal is
refused by the database itself.`,
	}
	operator.RunE = action(exactly(2), func(r *run, args []string) error {
		var on bool
		switch strings.ToLower(args[0]) {
		case "on":
			on = true
		case "off":
		default:
			return refused("want on or off, got %q", args[0])
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		u, err := controlplane.SetOperator(r.ctx, pool, args[1], on)
		if err != nil {
			return err
		}
		return r.emit(u, func() error {
			if u.IsOperator {
				r.printf("%q is an operator", u.Email)
			} else {
				r.printf("%q is not an operator", u.Email)
			}
			return nil
		})
	})
	cmd.AddCommand(create, list, userSetPasswordCommand(), grant, revoke, operator)
	return cmd
}

// limitFlag is the flag name of a plan limit: max_req_per_sec → max-req-per-sec.
func limitFlag(name string) string { return strings.ReplaceAll(name, "_", "-") }

func planCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Lists the plan catalogue and creates or changes plans",
	}
	groupCommand(cmd)

	list := &cobra.Command{Use: "list", Short: "Lists plans with their limits and features"}
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		ps, err := controlplane.ListPlans(r.ctx, pool)
		if err != nil {
			return err
		}
		return r.emit(ps, func() error { return controlplane.PlansTable(ps).WriteText(r.out) })
	})

	set := &cobra.Command{
		Use:   "set <code> [--cell-class shared|dedicated] [--<limit> <n>|unlimited]... [--feature <name>=on|off]...",
		Short: "Creates a plan or changes its limits and features",
		Long: `
Creates the plan when it does not exist (then --cell-class is required) and
otherwise changes only the limits and features given. A limit is a whole
number above 0 or "unlimited". Features: ` + strings.Join(controlplane.FeatureNames, ", ") + `.
Every gateway drops the cached limits of the plan's clusters at once. Plans
belong to no tenant, so the change leaves no audit row.

  caddy queen plan set pro --max-queues 300 --monthly-msgs-quota unlimited --feature traces=off`,
	}
	set.Flags().String("cell-class", "", "shared or dedicated (required for a new plan)")
	for _, n := range controlplane.LimitNames {
		set.Flags().String(limitFlag(n), "", "limit "+n+" (a whole number or unlimited)")
	}
	set.Flags().StringArray("feature", nil, "feature flag name=on|off (repeatable)")
	set.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		ch := controlplane.PlanChange{Code: args[0], Limits: map[string]*int64{}, Features: map[string]bool{}}
		ch.CellClass, _ = f.GetString("cell-class")
		for _, n := range controlplane.LimitNames {
			if !f.Changed(limitFlag(n)) {
				continue
			}
			s, _ := f.GetString(limitFlag(n))
			v, err := controlplane.ParseLimit(n, s)
			if err != nil {
				return err
			}
			ch.Limits[n] = v
		}
		features, _ := f.GetStringArray("feature")
		for _, s := range features {
			nm, on, err := controlplane.ParseFeature(s)
			if err != nil {
				return err
			}
			ch.Features[nm] = on
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		p, created, err := controlplane.SetPlan(r.ctx, pool, ch)
		if err != nil {
			return err
		}
		return r.emit(p, func() error {
			if created {
				r.printf("created plan %q", p.Code)
			} else {
				r.printf("updated plan %q; gateways reload the limits of its %d cluster(s)", p.Code, p.Clusters)
			}
			return controlplane.PlansTable([]controlplane.Plan{p}).WriteText(r.out)
		})
	})
	cmd.AddCommand(list, set)
	return cmd
}

func usageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage [--from <time>] [--to <time>] [--month YYYY-MM] [--tenant <tenant>] [--cluster <cluster>] [--format table|csv|json]",
		Short: "Reports each cluster's usage over a period",
		Long: `
Reports, per cluster, the requests, messages (all op classes), pushed messages
(push and transaction: what is billed), delivered messages and bytes over the
period [--from, --to), from usage_minutes and the daily roll-up usage_days.
Times are RFC 3339 (2026-01-31T12:00:00Z) or dates (2026-01-31, midnight UTC);
--from defaults to the start of the current UTC month and --to to now.
--month 2026-01 selects that whole UTC month. Clusters without usage show
zeros. The gateway writes usage a minute or two after the fact.`,
	}
	cmd.Flags().String("from", "", "start of the period (inclusive)")
	cmd.Flags().String("to", "", "end of the period (exclusive)")
	cmd.Flags().String("month", "", "a whole UTC month, YYYY-MM")
	cmd.Flags().String("tenant", "", "only this tenant's clusters")
	cmd.Flags().String("cluster", "", "only this cluster")
	cmd.Flags().String("format", "table", "table, csv or json (--json is json)")
	cmd.RunE = action(exactly(0), func(r *run, _ []string) error {
		f := r.cmd.Flags()
		format, _ := f.GetString("format")
		format = strings.ToLower(strings.TrimSpace(format))
		switch format {
		case "table", "csv", "json":
		default:
			return refused("invalid --format %q: use table, csv or json", format)
		}
		if r.json {
			if f.Changed("format") && format != "json" {
				return refused("--json and --format %s disagree", format)
			}
			format = "json"
		}
		from, _ := f.GetString("from")
		to, _ := f.GetString("to")
		month, _ := f.GetString("month")
		var q controlplane.UsageQuery
		var err error
		if q.From, q.To, err = controlplane.ParsePeriod(from, to, month, time.Now()); err != nil {
			return err
		}
		q.Tenant, _ = f.GetString("tenant")
		q.Cluster, _ = f.GetString("cluster")
		pool, err := r.db()
		if err != nil {
			return err
		}
		rep, err := controlplane.Usage(r.ctx, pool, q)
		if err != nil {
			return err
		}
		switch format {
		case "json":
			return controlplane.WriteJSON(r.out, rep)
		case "csv":
			return controlplane.UsageCSV(rep).WriteCSV(r.out)
		}
		r.printf("usage from %s to %s", rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339))
		return controlplane.UsageTable(rep).WriteText(r.out)
	})
	return cmd
}
