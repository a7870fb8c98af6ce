package queencli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// keeperFlags adds the flags of a command that may take a keeper off its
// cell or place a cluster on a cell a keeper left its queues on (cluster
// create, cluster move, tenant delete).
func keeperFlags(c *cobra.Command) {
	c.Flags().Bool("delete-queues", false, "when the cluster is the keeper of a cell not known to scope, delete its queues on the cell's broker so it may leave")
	c.Flags().Bool("yes", false, "with --delete-queues: do not ask for confirmation")
}

// drainFlag adds --drain-timeout to a command that drains a cluster off
// its cell (cluster move, cluster delete, tenant delete).
func drainFlag(c *cobra.Command) {
	c.Flags().Duration("drain-timeout", controlplane.DefaultDrainWait,
		"how long to wait for every gateway to confirm it sends nothing more of the cluster to its cell; past it the command fails and changes nothing")
}

// drainContext is r.ctx with the command's --drain-timeout.
func (r *run) drainContext() context.Context {
	d, _ := r.cmd.Flags().GetDuration("drain-timeout")
	return controlplane.WithDrainWait(r.ctx, d)
}

// keeperNote is the paragraph the help of those commands shares.
const keeperNote = `
On a cell whose broker is not known to keep tenants apart (cell list shows
its stated tenancy and the probe's verdict), the gateway serves one cluster:
the cell's keeper, the first cluster placed on it. When the keeper leaves
(moved, or deleted with its tenant) while other clusters stay, the next one
would become the keeper and be served the queues and messages it left in the
broker's one shared namespace. So the keeper may leave only once its queues
are gone from the broker: the command lists them (GET
/api/v1/resources/queues as the cluster's x-queen-tenant, with the cell's
secret) and refuses while there are any. --delete-queues deletes them
(asking first; --yes skips the question), checks the listing is empty, and
then records the release (release_keeper, audited as keeper_released) in the
same transaction as the change. A keeper may leave an emptied cell without
this, but its queues stay on the broker: the cell remembers them, and the
next cluster placed on it (cluster create or move), which would be its
keeper, goes through the same check first.`

// brokerQueues lists and deletes one cluster's queues on its cell's broker.
type brokerQueues struct {
	client *http.Client
	k      controlplane.Keeper
}

// list returns the names of the cluster's queues. The probe's own
// transient queues are not the cluster's (clients may not name them) and
// are left alone: deleting one under a running probe is the attack the
// probe has to withstand, not something to do to it.
func (b brokerQueues) list(ctx context.Context) ([]string, error) {
	inv, err := limits.ReadInventory(ctx, b.client, limits.ClusterRef{
		ID: b.k.ClusterID, BrokerTenant: b.k.BrokerTenant, CellURL: b.k.CellURL, Authorization: cellclient.Bearer(b.k.CellSecret),
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, q := range inv.Queues {
		if !strings.HasPrefix(q.Name, tenancy.ProbeQueuePrefix) {
			names = append(names, q.Name)
		}
	}
	return names, nil
}

// remove deletes one queue (DELETE /api/v1/resources/queues/:queue). The
// broker reports many errors as 200 with {"error": ...}: only an answer
// saying deleted counts.
func (b brokerQueues) remove(ctx context.Context, name string) error {
	cell := cellclient.Client{HTTP: b.client, BaseURL: b.k.CellURL, Authorization: cellclient.Bearer(b.k.CellSecret)}
	a, err := cell.Do(ctx, cellclient.Request{Method: http.MethodDelete, Path: "/api/v1/resources/queues/" + url.PathEscape(name), Tenant: b.k.BrokerTenant})
	if err != nil {
		return err
	}
	status, body := a.Status, a.Body
	var ans struct {
		Deleted bool   `json:"deleted"`
		Error   string `json:"error"`
	}
	if status/100 != 2 {
		return fmt.Errorf("broker answered HTTP %d", status)
	}
	if err := json.Unmarshal(body, &ans); err != nil || !ans.Deleted {
		if ans.Error != "" {
			return fmt.Errorf("broker error %q", ans.Error)
		}
		return fmt.Errorf("broker did not confirm the deletion: %.200s", body)
	}
	return nil
}

// keeperReleaser is the Releaser of a command run: it refuses while the
// keeper has queues, unless --delete-queues (confirmed) deletes them all.
func (r *run) keeperReleaser() controlplane.Releaser {
	deleteQueues, _ := r.cmd.Flags().GetBool("delete-queues")
	yes, _ := r.cmd.Flags().GetBool("yes")
	client := &http.Client{Timeout: 15 * time.Second}
	return func(ctx context.Context, k controlplane.Keeper) (map[string]any, error) {
		b := brokerQueues{client: client, k: k}
		names, err := b.list(ctx)
		if err != nil {
			return nil, &controlplane.Error{Kind: controlplane.Unavailable, Err: err, Msg: fmt.Sprintf(
				"cannot list cluster %q's queues on cell %q's broker (%s): %v; the keeper of a cell not known to scope leaves only once they are gone",
				k.ClusterSlug, k.CellSlug, k.CellURL, err)}
		}
		if len(names) == 0 {
			return map[string]any{"queues_found": 0}, nil
		}
		if !deleteQueues {
			if k.Residue {
				return nil, &controlplane.Error{Kind: controlplane.WrongState, Msg: fmt.Sprintf(
					"cell %q, whose broker is not known to keep tenants apart, still holds %d queue(s) (%s) of cluster %q, which left it as its keeper: "+
						"the cluster placed there now would be its keeper and be served them; delete them with --delete-queues",
					k.CellSlug, len(names), summarize(names), k.ClusterSlug)}
			}
			return nil, &controlplane.Error{Kind: controlplane.WrongState, Msg: fmt.Sprintf(
				"cluster %q is the keeper of cell %q, whose broker is not known to keep tenants apart, and has %d queue(s) there (%s): "+
					"the next of the %d cluster(s) staying would be served them; delete them with --delete-queues, or move the other clusters off the cell first",
				k.ClusterSlug, k.CellSlug, len(names), summarize(names), k.Staying)}
		}
		if !yes {
			whose := fmt.Sprintf("cluster %q", k.ClusterSlug)
			if k.Residue {
				whose = fmt.Sprintf("cluster %q (gone from the cell)", k.ClusterSlug)
			}
			if err := r.confirm(fmt.Sprintf("delete %d queue(s) of %s on cell %q's broker (%s), with their messages? [y/N] ",
				len(names), whose, k.CellSlug, summarize(names))); err != nil {
				return nil, err
			}
		}
		for _, n := range names {
			if err := b.remove(ctx, n); err != nil {
				return nil, &controlplane.Error{Kind: controlplane.Unavailable, Err: err, Msg: fmt.Sprintf(
					"deleting queue %q of cluster %q on cell %q's broker: %v; nothing changed in the control plane", n, k.ClusterSlug, k.CellSlug, err)}
			}
		}
		left, err := b.list(ctx)
		if err != nil {
			return nil, &controlplane.Error{Kind: controlplane.Unavailable, Err: err, Msg: fmt.Sprintf(
				"cannot list cluster %q's queues on cell %q's broker after deleting them: %v; nothing changed in the control plane", k.ClusterSlug, k.CellSlug, err)}
		}
		if len(left) > 0 {
			return nil, &controlplane.Error{Kind: controlplane.Failed, Msg: fmt.Sprintf(
				"cluster %q still has %d queue(s) on cell %q's broker after deleting them (%s); nothing changed in the control plane",
				k.ClusterSlug, len(left), k.CellSlug, summarize(left))}
		}
		if !r.json {
			r.printf("deleted %d queue(s) of cluster %q on cell %q's broker", len(names), k.ClusterSlug, k.CellSlug)
		}
		return map[string]any{"queues_deleted": names}, nil
	}
}

// confirm asks question on stderr and reads the answer from stdin; only y
// or yes goes on.
func (r *run) confirm(question string) error {
	fmt.Fprint(r.cmd.ErrOrStderr(), question)
	line, err := bufio.NewReader(r.cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(r.cmd.ErrOrStderr())
		return refused("no answer on standard input; nothing changed (pass --yes to skip the question)")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return refused("not confirmed; nothing changed")
}

// summarize names up to five queues.
func summarize(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:most], ", ") + fmt.Sprintf(", and %d more", len(names)-most)
}
