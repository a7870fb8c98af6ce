package queencli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/webhook"
)

func webhookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Adds, lists, updates and removes webhook endpoints; shows their attempts and replays events",
		Long: `
Webhook endpoints receive every event the control plane records (or the kinds
their filter names), signed as the Standard Webhooks specification says, at
least once, in order per endpoint, retried with exponential backoff. See
docs/webhooks.md. Event kinds: ` + strings.Join(webhook.KindNames(), ", ") + `.`,
	}
	groupCommand(cmd)

	add := &cobra.Command{
		Use:   "add <name> --url <URL> [--events <kind,kind…>]",
		Short: "Adds an endpoint and prints its secret",
		Long: `
Adds an endpoint named <name> (1 to 63 of a-z, 0-9, inner hyphens). It
receives the events recorded from now on; "webhook replay" sends earlier
ones. Without --events it receives every kind. Prints the endpoint's secret
(whsec_…), with which the receiver checks the webhook-signature header.`,
	}
	add.Flags().String("url", "", "where deliveries are POSTed (https:// or http://) (required)")
	add.Flags().StringSlice("events", nil, "the event kinds to deliver, comma-separated (default: all)")
	add.RunE = action(exactly(1), func(r *run, args []string) error {
		url, _ := r.cmd.Flags().GetString("url")
		events, _ := r.cmd.Flags().GetStringSlice("events")
		pool, err := r.db()
		if err != nil {
			return err
		}
		w, err := controlplane.AddWebhook(r.ctx, pool, controlplane.NewWebhook{Name: args[0], URL: url, Events: events})
		if err != nil {
			return err
		}
		return r.emit(w, func() error {
			r.printf("added webhook endpoint %q for %s, id %s", w.Name, eventsText(w.Events), w.ID)
			r.printf("secret (the receiver checks signatures with it): %s", w.Secret)
			return nil
		})
	})

	list := &cobra.Command{Use: "list", Short: "Lists endpoints with their delivery state"}
	list.RunE = action(exactly(0), func(r *run, _ []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		ws, err := controlplane.ListWebhooks(r.ctx, pool)
		if err != nil {
			return err
		}
		return r.emit(ws, func() error { return controlplane.WebhooksTable(ws).WriteText(r.out) })
	})

	update := &cobra.Command{
		Use:   "update <endpoint> [--url <URL>] [--events <kinds> | --all-events] [--enable | --disable]",
		Short: "Changes an endpoint's URL or filter, or enables or disables it",
		Long: `
Changes only what is given. --enable makes a disabled endpoint active again:
its pending deliveries are due at once, in order, and its failure clock
restarts. --disable stops deliveries (events still queue for it) and records
webhook_endpoint_disabled.`,
	}
	update.Flags().String("url", "", "new URL")
	update.Flags().StringSlice("events", nil, "new filter: the event kinds to deliver")
	update.Flags().Bool("all-events", false, "deliver every kind")
	update.Flags().Bool("enable", false, "make the endpoint active")
	update.Flags().Bool("disable", false, "disable the endpoint")
	update.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		var u controlplane.WebhookUpdate
		if f.Changed("url") {
			s, _ := f.GetString("url")
			u.URL = &s
		}
		u.Events, _ = f.GetStringSlice("events")
		if f.Changed("events") && len(u.Events) == 0 {
			return refused("--events names no kind; use --all-events to deliver every kind")
		}
		u.AllEvents, _ = f.GetBool("all-events")
		enable, _ := f.GetBool("enable")
		disable, _ := f.GetBool("disable")
		switch {
		case enable && disable:
			return refused("give --enable or --disable, not both")
		case enable || disable:
			u.Enabled = &enable
		}
		if u.URL == nil && len(u.Events) == 0 && !u.AllEvents && u.Enabled == nil {
			return refused("nothing to change: give --url, --events, --all-events, --enable or --disable")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		w, err := controlplane.UpdateWebhook(r.ctx, pool, args[0], u)
		if err != nil {
			return err
		}
		return r.emit(w, func() error {
			r.printf("webhook endpoint %q: %s, %s, %s; %d pending", w.Name, w.Status, w.URL, eventsText(w.Events), w.Pending)
			return nil
		})
	})

	remove := &cobra.Command{
		Use:   "remove <endpoint>",
		Short: "Removes an endpoint with its pending deliveries and recorded attempts",
	}
	remove.RunE = action(exactly(1), func(r *run, args []string) error {
		pool, err := r.db()
		if err != nil {
			return err
		}
		w, err := controlplane.RemoveWebhook(r.ctx, pool, args[0])
		if err != nil {
			return err
		}
		return r.emit(w, func() error {
			r.printf("removed webhook endpoint %q (%d undelivered event(s) dropped)", w.Name, w.Pending)
			return nil
		})
	})

	rotate := &cobra.Command{
		Use:   "rotate-secret <endpoint> [--overlap <duration>]",
		Short: "Gives an endpoint a new secret; the old one also signs during the overlap",
		Long: `
Gives the endpoint a new secret and prints it. During --overlap (default 24h)
every delivery carries two signatures, one per secret, so the receiver may
switch to the new secret at any time in it; 0 drops the old secret at once.`,
	}
	rotate.Flags().Duration("overlap", 24*time.Hour, "how long the old secret keeps signing")
	rotate.RunE = action(exactly(1), func(r *run, args []string) error {
		overlap, _ := r.cmd.Flags().GetDuration("overlap")
		pool, err := r.db()
		if err != nil {
			return err
		}
		w, err := controlplane.RotateWebhookSecret(r.ctx, pool, args[0], overlap)
		if err != nil {
			return err
		}
		return r.emit(w, func() error {
			if w.PreviousSecretUntil != nil {
				r.printf("webhook endpoint %q has a new secret; the old one also signs until %s", w.Name,
					w.PreviousSecretUntil.UTC().Format(time.RFC3339))
			} else {
				r.printf("webhook endpoint %q has a new secret; the old one no longer signs", w.Name)
			}
			r.printf("secret: %s", w.Secret)
			return nil
		})
	})

	attempts := &cobra.Command{
		Use:   "attempts <endpoint> [--limit <n>]",
		Short: "Lists an endpoint's latest delivery attempts (status, latency, error)",
	}
	attempts.Flags().Int("limit", 50, "how many attempts, newest first")
	attempts.RunE = action(exactly(1), func(r *run, args []string) error {
		limit, _ := r.cmd.Flags().GetInt("limit")
		pool, err := r.db()
		if err != nil {
			return err
		}
		as, err := controlplane.WebhookAttempts(r.ctx, pool, args[0], limit)
		if err != nil {
			return err
		}
		return r.emit(as, func() error { return controlplane.WebhookAttemptsTable(as).WriteText(r.out) })
	})

	replay := &cobra.Command{
		Use:   "replay <endpoint> (--event <id> | --since <time> [--until <time>])",
		Short: "Sends recorded events to an endpoint again, with their original webhook-id",
		Long: `
Queues recorded events for the endpoint again, after what it has pending:
one event by id (as "webhook attempts" shows it), or every event its filter
takes recorded in [--since, --until). Each keeps its webhook-id, so a
receiver that deduplicates by id takes each once.`,
	}
	replay.Flags().String("event", "", "the id of one event")
	replay.Flags().String("since", "", "replay events recorded from this time (RFC 3339 or a date)")
	replay.Flags().String("until", "", "up to this time (default: now)")
	replay.RunE = action(exactly(1), func(r *run, args []string) error {
		f := r.cmd.Flags()
		event, _ := f.GetString("event")
		since, _ := f.GetString("since")
		until, _ := f.GetString("until")
		p, err := controlplane.ParseWebhookReplay(event, since, until)
		if err != nil {
			return err
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		n, err := controlplane.ReplayWebhook(r.ctx, pool, args[0], p)
		if err != nil {
			return err
		}
		return r.emit(map[string]any{"endpoint": args[0], "queued": n}, func() error {
			r.printf("queued %d event(s) for webhook endpoint %q", n, args[0])
			return nil
		})
	})
	cmd.AddCommand(add, list, update, remove, rotate, attempts, replay)
	return cmd
}

func eventsText(events []string) string {
	if len(events) == 0 {
		return "every event"
	}
	return strings.Join(events, ",")
}
