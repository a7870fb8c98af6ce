package queencli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

func tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Creates, lists, rotates and revokes machine tokens (callers of the provisioning API)",
	}
	groupCommand(cmd)

	create := &cobra.Command{
		Use:   "create <name> --scopes <list> [--rate <n>] [--burst <n>] [--expires <when>]",
		Short: "Creates a machine token and prints it once",
		Long: `
Creates a machine token for the provisioning API: qmt_ followed by 43 random
base64url characters (32 bytes). Only its SHA-256 is stored
(create_machine_token), so the token is printed this once: store it now.

--scopes is a comma-separated subset of provision (change tenants, clusters,
keys and roles), usage (read usage and activity) and read (read the rest).
--rate and --burst are the token's limit on each gateway, in requests per
second and the burst on top. --expires is an RFC 3339 time, a date or a
duration from now (720h, 90d); default never.`,
	}
	create.Flags().String("scopes", "", "comma-separated scopes: provision, usage, read (required)")
	create.Flags().Int("rate", controlplane.DefaultTokenRate, "requests per second on each gateway")
	create.Flags().Int("burst", controlplane.DefaultTokenBurst, "requests above the rate in a burst")
	create.Flags().String("expires", "", "expiry: RFC 3339 time, date or duration (default never)")
	create.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		n := controlplane.NewMachineToken{Name: args[0]}
		scopes, _ := f.GetString("scopes")
		var err error
		if n.Scopes, err = controlplane.CheckTokenScopes(strings.Split(scopes, ",")); err != nil {
			return err
		}
		n.RatePerSecond, _ = f.GetInt("rate")
		n.Burst, _ = f.GetInt("burst")
		if n.RatePerSecond < 1 || n.Burst < 1 {
			return refused("--rate and --burst must be positive")
		}
		expires, _ := f.GetString("expires")
		if n.ExpiresAt, err = controlplane.ParseExpiry(expires, time.Now()); err != nil {
			return err
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		t, err := controlplane.CreateMachineToken(r.ctx, pool, n)
		if err != nil {
			return err
		}
		return r.emit(t, func() error {
			r.printf("created machine token %s %q, scopes %s, %d/s burst %d, expires %s",
				t.ID, t.Name, strings.Join(t.Scopes, ","), t.RatePerSecond, t.Burst, expiryText(t.ExpiresAt))
			r.printf("token (shown once, store it now): %s", t.Token)
			return nil
		})
	})

	list := &cobra.Command{Use: "list [--all]", Short: "Lists machine tokens"}
	list.Flags().Bool("all", false, "include revoked tokens")
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		all, _ := r.cmd.Flags().GetBool("all")
		pool, err := r.db()
		if err != nil {
			return err
		}
		ts, err := controlplane.ListMachineTokens(r.ctx, pool, all)
		if err != nil {
			return err
		}
		return r.emit(ts, func() error { return controlplane.MachineTokensTable(ts).WriteText(r.out) })
	})

	rotate := &cobra.Command{
		Use:   "rotate <token id or name> [--overlap <duration>]",
		Short: "Gives a machine token a new secret and prints it once",
		Long: `
Gives a machine token a new secret (rotate_machine_token), keeping its id,
name, scopes and limits. The old secret stays valid for --overlap (default
24h; 0 refuses it at once), so the caller can switch without a failed call.`,
	}
	rotate.Flags().String("overlap", "24h", "how long the old secret stays valid (0: not at all)")
	rotate.RunE = action(exactly(1), func(r *run, args []string) error {
		o, _ := r.cmd.Flags().GetString("overlap")
		overlap, err := controlplane.ParseOverlap(o)
		if err != nil {
			return err
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		t, err := controlplane.RotateMachineToken(r.ctx, pool, args[0], overlap)
		if err != nil {
			return err
		}
		return r.emit(t, func() error {
			r.printf("rotated machine token %s %q; the old secret is valid until %s", t.ID, t.Name, expiryText(t.PreviousValidUntil))
			r.printf("token (shown once, store it now): %s", t.Token)
			return nil
		})
	})

	revoke := &cobra.Command{
		Use:   "revoke <token id or name>",
		Short: "Revokes a machine token",
		Long:  "\nRevokes a machine token (revoke_machine_token); every gateway refuses it within a second.",
	}
	revoke.RunE = action(exactly(1), func(r *run, args []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		t, err := controlplane.RevokeMachineToken(r.ctx, pool, args[0])
		if err != nil {
			return err
		}
		return r.emit(t, func() error {
			r.printf("revoked machine token %s %q", t.ID, t.Name)
			return nil
		})
	})
	cmd.AddCommand(create, list, rotate, revoke)
	return cmd
}

// expiryText shows an optional instant, "never" for none.
func expiryText(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
