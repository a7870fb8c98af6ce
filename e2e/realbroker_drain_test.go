//go:build realbroker

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/realbroker"
)

// TestRealBrokerKeeperLeavesOnlyOnceItsTrafficStopped is
// TestKeeperLeavesOnlyOnceItsTrafficStopped against the public broker:
// whatever the keeper pushed while a command took it off the cell, the
// broker's store holds no queue and no message once the command is done.
func TestRealBrokerKeeperLeavesOnlyOnceItsTrafficStopped(t *testing.T) {
	b := realbroker.Start(t)
	cell := keeperCell{url: b.URL, leftover: func(t *testing.T, _ string) string {
		var left []string
		for _, q := range b.Queues(t) {
			if !strings.HasPrefix(q, "queengate-isolation-probe-") {
				left = append(left, q)
			}
		}
		msgs := brokerCount(t, b.Pool(t), `SELECT count(*) FROM queen.messages`)
		for _, q := range left { // the next run starts clean
			b.Do(t, "DELETE", "/api/v1/resources/queues/"+q, nil)
		}
		if len(left) == 0 && msgs == 0 {
			return ""
		}
		return fmt.Sprintf("queues %v, %d message(s)", left, msgs)
	}}
	runs := raceRuns(t, 3)
	for _, leave := range keeperLeaves {
		t.Run(leave.name, func(t *testing.T) {
			leaked := 0
			for i := range runs {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					prefix := fmt.Sprintf("real%d", i)
					if left := raceKeeperLeave(t, cell, prefix, leave.args); left != "" {
						leaked++
						t.Errorf("left on the real broker after the keeper was released: %s", left)
					}
				})
			}
			t.Logf("%s: %d of %d runs left the keeper's data to the next cluster", leave.name, leaked, runs)
		})
	}
}
