package queencli

import (
	"bufio"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

// clusterLifecycleCommands are the cluster subcommands that change its
// status or delete it.
func clusterLifecycleCommands() []*cobra.Command {
	suspend := &cobra.Command{
		Use:   "suspend <cluster>",
		Short: "Stops all of a cluster's traffic",
		Long: `
Suspends a cluster (set_cluster_status 'suspended'): every gateway refuses
all of its traffic with 403 cluster_suspended within a second, before
anything reaches the cell. Its data stays on the broker. "cluster resume"
undoes it. To stop every cluster of a tenant, use "tenant suspend".`,
	}
	suspend.RunE = action(exactly(1), func(r *run, args []string) error {
		return setClusterStatus(r, args[0], controlplane.ClusterSuspended, false)
	})

	pushBlock := &cobra.Command{
		Use:   "push-block <cluster>",
		Short: "Refuses a cluster's pushes, keeps consuming open",
		Long: `
Blocks a cluster's pushes (set_cluster_status 'push_blocked'), e.g. for a
billing hold: every gateway refuses its pushes (push, transactions that push)
with 403 push_blocked within a second, while pops, acks and reads go on, so
its consumers can drain what is queued. It is the per-cluster form of
"tenant suspend --grace". "cluster resume" undoes it.`,
	}
	pushBlock.RunE = action(exactly(1), func(r *run, args []string) error {
		return setClusterStatus(r, args[0], controlplane.ClusterPushBlocked, false)
	})

	resume := &cobra.Command{
		Use:   "resume <cluster> [--force]",
		Short: "Lets a suspended or push-blocked cluster's traffic through again",
		Long: `
Makes a cluster active again (set_cluster_status 'active'), undoing "cluster
suspend" and "cluster push-block". A cluster that is being deleted is refused
unless --force is given, because its broker data may already be purged. A
tenant that is suspended or in grace still holds its clusters back: resume
the tenant too ("tenant resume").`,
	}
	resume.Flags().Bool("force", false, "also resume a cluster that is being deleted")
	resume.RunE = action(exactly(1), func(r *run, args []string) error {
		force, _ := r.cmd.Flags().GetBool("force")
		return setClusterStatus(r, args[0], controlplane.ClusterActive, force)
	})

	del := &cobra.Command{
		Use:   "delete <cluster> [--purged | --force] [--delete-queues [--yes]]",
		Short: "Deletes a cluster and everything it owns, in three steps",
		Long: `
Deleting a cluster takes three steps, in this order (as "tenant delete" does
for a whole tenant):

  1. caddy queen cluster delete <cluster>
     sets the cluster to 'deleting': every gateway stops all of its traffic
     at once (403 cluster_suspended). It prints the cluster's cell and broker
     tenant id. Nothing is removed yet.

  2. Purge the cluster's queues and messages on its cell. On the cell's
     broker PostgreSQL, run
         SELECT queen.delete_tenant_data_v1('<broker tenant id>');
     and repeat it until it reports nothing left to delete. The gateway
     cannot do this: the broker data lives on the cell.

  3. caddy queen cluster delete <cluster> --purged
     deletes the cluster from the control plane (delete_cluster): its roles,
     API keys (revoked first), queue registry and usage. A cluster_deleted
     event stays in the outbox and an audit row with the tenant.

--force does step 3 at once without steps 1 and 2: the cluster's data stays
on the broker, unreachable. Use it only for clusters that never pushed.

Step 3 (and --force) checks whether the cluster is the keeper of a cell not
known to scope, as below.
` + keeperNote,
	}
	threeStepDeletion[controlplane.ClusterDeletionPlan, controlplane.ClusterDeletion]{
		what:       "cluster",
		purgedHelp: "step 3: the cluster is purged on its cell; delete it",
		forceHelp:  "delete at once without stopping traffic or purging the broker",
		stepTwo:    "it on its cell",
		begin:      controlplane.BeginClusterDeletion,
		showPlan:   printClusterDeletionPlan,
		finish:     controlplane.DeleteCluster,
		report:     reportClusterDeletion,
	}.attach(del)
	return []*cobra.Command{suspend, resume, pushBlock, del}
}

func setClusterStatus(r *run, cluster, status string, force bool) error {
	pool, err := r.db()
	if err != nil {
		return err
	}
	c, err := controlplane.SetClusterStatus(r.ctx, pool, cluster, status, force)
	if err != nil {
		return err
	}
	return r.emit(c, func() error {
		switch c.Status {
		case controlplane.ClusterSuspended:
			r.printf("cluster %q is suspended: gateways refuse all of its traffic", c.Slug)
		case controlplane.ClusterPushBlocked:
			r.printf("cluster %q is push-blocked: gateways refuse its pushes; consuming still works", c.Slug)
		default:
			r.printf("cluster %q is active: it serves traffic again", c.Slug)
		}
		if c.TenantStatus != controlplane.TenantActive {
			r.printf("note: its tenant %q is %s, which still holds it back", c.TenantSlug, c.TenantStatus)
		}
		return nil
	})
}

func printClusterDeletionPlan(r *run, p controlplane.ClusterDeletionPlan) {
	if p.AlreadyDeleting {
		r.printf("step 1 of 3 was already done: cluster %q is deleting and gateways refuse all of its traffic", p.Cluster.Slug)
	} else {
		r.printf("step 1 of 3 done: cluster %q is now deleting; gateways refuse all of its traffic", p.Cluster.Slug)
	}
	r.printf("step 2 of 3: purge its data on cell %q's broker PostgreSQL (%s), repeating until it reports nothing left to delete:",
		p.Purge.CellSlug, p.Purge.CellURL)
	r.printf("  %s", p.Purge.PurgeSQL())
	r.printf("step 3 of 3: caddy queen cluster delete %s --purged", p.Cluster.Slug)
}

// keyRotateCommand is "key rotate".
func keyRotateCommand() *cobra.Command {
	rotate := &cobra.Command{
		Use:   "rotate <key id> [--overlap <duration>] [--expires <when>] [--env <env>]",
		Short: "Replaces an API key, keeping the old one valid for an overlap",
		Long: `
Issues a new API key with the old key's cluster, name and scopes and prints
it once, and brings the old key's expiry forward to now plus --overlap
(default ` + controlplane.DefaultRotationOverlap.String() + `; never later than an expiry it already had), in one
transaction, audited as api_key_issued and api_key_expiry_set. Both keys work
during the overlap; once it is over, every gateway refuses the old key like a
revoked one (401). Deploy the new key to every client within the overlap;
"key list" shows the old key's expiry and last use. --overlap 0 revokes the
old key at once (revoke_api_key).

--overlap is a duration (30m, 24h, 7d). --expires is the new key's own
expiry (as for "key create"; default never).`,
	}
	rotate.Flags().String("overlap", controlplane.DefaultRotationOverlap.String(), "how long the old key keeps working: a duration such as 30m, 24h or 7d; 0 revokes it now")
	rotate.Flags().String("expires", "", "the new key's expiry: RFC 3339 time, date or duration (default never)")
	rotate.Flags().String("env", "live", "the <env> part of the new qk_<env>_… key")
	rotate.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		raw, _ := f.GetString("overlap")
		overlap, err := controlplane.ParseOverlap(raw)
		if err != nil {
			return err
		}
		expires, _ := f.GetString("expires")
		newExpiry, err := controlplane.ParseExpiry(expires, time.Now())
		if err != nil {
			return err
		}
		env, _ := f.GetString("env")
		if _, _, err := controlplane.GenerateKey(env); err != nil {
			return err // checks --env before connecting
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		rot, err := controlplane.RotateKey(r.ctx, pool, args[0], overlap, env, newExpiry)
		if err != nil {
			return err
		}
		return r.emit(rot, func() error {
			r.printf("created API key %s %q for cluster %q, scopes %s, replacing %s",
				rot.New.ID, rot.New.Name, rot.New.ClusterSlug, strings.Join(rot.New.Scopes, ","), rot.Old.ID)
			r.printf("key (shown once, store it now): %s", rot.New.Key)
			if rot.OldValidUntil == nil {
				r.printf("old key %s is revoked: gateways refuse it now", rot.Old.ID)
			} else {
				r.printf("old key %s keeps working until %s, then gateways refuse it", rot.Old.ID, rot.OldValidUntil.UTC().Format(time.RFC3339))
			}
			return nil
		})
	})
	return rotate
}

// userSetPasswordCommand is "user set-password".
func userSetPasswordCommand() *cobra.Command {
	set := &cobra.Command{
		Use:   "set-password <email> (--password-stdin | --generate | --clear)",
		Short: "Sets, resets or removes a user's console password",
		Long: `
Sets a local user's console password (set_user_password), the step the
console's members page leaves to an operator: an invited user without a
Google or GitHub sign-in gets one this way, and a user who forgot theirs gets
a new one.

  --password-stdin  the first line of standard input is the password (12 to
                    128 characters, at most 72 bytes)
  --generate        a random 24-character password is generated and printed
                    once: hand it to the user over a channel you trust
  --clear           removes the password: the user signs in only through an
                    identity provider that vouches for the e-mail

Only a bcrypt hash is stored; the change is audited as user_password_set.
It also ends the user's sessions: within a second every gateway refuses each
session token of the user issued before it (one signed in the same second
counts as before), so whoever knew the old password is signed out.`,
	}
	set.Flags().Bool("password-stdin", false, "read the password from the first line of standard input")
	set.Flags().Bool("generate", false, "generate a random password and print it once")
	set.Flags().Bool("clear", false, "remove the password")
	set.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		fromStdin, _ := f.GetBool("password-stdin")
		generate, _ := f.GetBool("generate")
		clearIt, _ := f.GetBool("clear")
		chosen := 0
		for _, b := range []bool{fromStdin, generate, clearIt} {
			if b {
				chosen++
			}
		}
		if chosen != 1 {
			return refused("give one of --password-stdin, --generate or --clear")
		}
		var password string
		switch {
		case fromStdin:
			line, err := bufio.NewReader(r.cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return refused("--password-stdin: no password on standard input")
			}
			if password = strings.TrimRight(line, "\r\n"); password == "" {
				return refused("--password-stdin: the password is empty")
			}
		case generate:
			var err error
			if password, err = controlplane.GeneratePassword(); err != nil {
				return err
			}
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		var u controlplane.User
		if clearIt {
			u, err = controlplane.ClearPassword(r.ctx, pool, args[0])
		} else {
			u, err = controlplane.SetPassword(r.ctx, pool, args[0], password)
		}
		if err != nil {
			return err
		}
		out := struct {
			controlplane.User
			Password string `json:"password,omitempty"`
		}{User: u}
		if generate {
			out.Password = password
		}
		return r.emit(out, func() error {
			switch {
			case clearIt:
				r.printf("removed the password of %q: they sign in only through an identity provider", u.Email)
			case generate:
				r.printf("set a new password for %q", u.Email)
				r.printf("password (shown once, hand it to the user): %s", password)
			default:
				r.printf("set a new password for %q", u.Email)
			}
			return nil
		})
	})
	return set
}

// reportClusterDeletion is step 3's (or --force's) report.
func reportClusterDeletion(r *run, d controlplane.ClusterDeletion) {
	r.printf("deleted cluster %q: %d API key(s) (%d revoked now), %d role(s), %d registered queue(s)",
		d.ClusterSlug, d.Counts["api_keys"], d.Counts["api_keys_revoked"], d.Counts["cluster_roles"], d.Counts["queues"])
	if d.Released != nil {
		r.printf("it was the keeper of cell %q; its queues there are gone, and the next cluster on the cell is its keeper now",
			d.Released.CellSlug)
	}
	if d.GrantsNote != "" {
		r.printf("note: %s", d.GrantsNote)
	}
	if d.Forced && d.StatusWas != controlplane.ClusterDeleting {
		r.printf("forced: its broker data was not purged and stays on its cell: broker tenant %s", d.BrokerTenantUUID)
	}
}
