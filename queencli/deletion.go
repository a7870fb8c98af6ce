package queencli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/queengate/queengate/controlplane"
)

// threeStepDeletion is what `tenant delete` and `cluster delete` share:
// step 1 (no flag) stops traffic and prints what to purge on the broker,
// step 3 (--purged) deletes from the control plane, and --force does step
// 3 at once. The broker's own step 2 is the operator's.
type threeStepDeletion[Plan, Done any] struct {
	// what is the object as the commands name it: "tenant" or "cluster".
	what string
	// purgedHelp and forceHelp are the two flags' help lines.
	purgedHelp, forceHelp string
	// stepTwo says, in the refusal of a step 3 that came too early, what
	// step 2 purges ("its clusters", "it on its cell").
	stepTwo  string
	begin    func(ctx context.Context, db controlplane.DB, ref string) (Plan, error)
	showPlan func(r *run, plan Plan)
	finish   func(ctx context.Context, db controlplane.DB, ref string, force bool, release controlplane.Releaser) (Done, error)
	report   func(r *run, done Done)
}

// attach gives del the flags and the action of the three steps.
func (s threeStepDeletion[Plan, Done]) attach(del *cobra.Command) {
	del.Flags().Bool("purged", false, s.purgedHelp)
	del.Flags().Bool("force", false, s.forceHelp)
	keeperFlags(del)
	drainFlag(del)
	del.RunE = action(exactly(1), func(r *run, args []string) error {
		purged, _ := r.cmd.Flags().GetBool("purged")
		force, _ := r.cmd.Flags().GetBool("force")
		if purged && force {
			return refused("give --purged or --force, not both")
		}
		pool, err := r.db()
		if err != nil {
			return err
		}
		if !purged && !force {
			plan, err := s.begin(r.drainContext(), pool, args[0])
			if err != nil {
				return err
			}
			return r.emit(plan, func() error { s.showPlan(r, plan); return nil })
		}
		done, err := s.finish(r.drainContext(), pool, args[0], force, r.keeperReleaser())
		if err != nil {
			return hint(err, controlplane.WrongState, fmt.Sprintf(
				"run \"caddy queen %s delete %s\" (step 1) and purge %s (step 2) first", s.what, strings.TrimSpace(args[0]), s.stepTwo))
		}
		return r.emit(done, func() error { s.report(r, done); return nil })
	})
}
