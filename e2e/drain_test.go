package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// keeperLeaves are the commands that take a keeper off a cell not known to
// scope while another tenant's cluster stays there; %s is the keeper's
// slug, and its tenant's.
var keeperLeaves = []struct {
	name string
	args func(keeper, tenant string) []string
}{
	{"move", func(k, _ string) []string {
		return []string{"cluster", "move", k, "--to", "away", "--delete-queues", "--yes"}
	}},
	{"tenant delete --force", func(_, tn string) []string {
		return []string{"tenant", "delete", tn, "--force", "--delete-queues", "--yes"}
	}},
	{"cluster delete --force", func(k, _ string) []string {
		return []string{"cluster", "delete", k, "--force", "--delete-queues", "--yes"}
	}},
}

// raceRuns is how many times each command is raced against a pushing
// keeper (QUEENGATE_DRAIN_RACE_RUNS overrides it).
func raceRuns(t *testing.T, def int) int {
	if s := os.Getenv("QUEENGATE_DRAIN_RACE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("QUEENGATE_DRAIN_RACE_RUNS=%q", s)
		}
		return n
	}
	return def
}

// keeperCell is the cell the keeper leaves: its broker's URL, and what is
// left on it of the keeper once the command has finished.
type keeperCell struct {
	url string
	// leftover names what of the keeper's is on the broker (its queues and
	// what the next cluster, another tenant, would pop), empty for nothing,
	// and removes it so that the next run starts clean.
	leftover func(t *testing.T, next string) string
}

// raceKeeperLeave runs one race: the keeper pushes every 5 ms through a
// gateway while the command takes it off the cell. Whatever the keeper
// pushed, nothing of it may be on the cell's broker once the command said
// the keeper's queues are gone; it returns what was.
func raceKeeperLeave(t *testing.T, cell keeperCell, prefix string, args func(keeper, tenant string) []string) string {
	t.Helper()
	db := pgtest.NewDatabase(t)
	cp := newControlPlane(t, db)
	cellID := cp.cell(prefix+"-cell", cell.url, "")
	_, awayURL := startFakeBroker(t, fakebroker.Options{IgnoreTenant: true, Name: prefix + "-away"})
	cp.cell("away", awayURL, "")
	keeperTenant := prefix + "-acme"
	keeper := cp.cluster(cp.tenant(keeperTenant), prefix+"-acme", cellID)
	cp.exec(`UPDATE queen_proxy.clusters SET created_at = now() - interval '1 day' WHERE id = $1::uuid`, keeper.id)
	next := cp.cluster(cp.tenant(prefix+"-globex"), prefix+"-globex", cellID)
	_, key := cp.key(keeper.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, db, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), ""))
	c := client(port)
	url := fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", keeper.slug, port)
	push := func(i int) int {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(fmt.Sprintf(`{"items":[{"queue":"payroll","payload":{"n":%d}}]}`, i)))
		if err != nil {
			return 0
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, 10*time.Second, func() error {
		if s := push(-1); s != http.StatusOK {
			return fmt.Errorf("keeper push: %d", s)
		}
		return nil
	})

	var stop atomic.Bool
	var pushed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if push(i) == http.StatusOK {
				pushed.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	time.Sleep(50 * time.Millisecond)
	q := cliFor(t)(db)
	out := q.ok(t, args(keeper.slug, keeperTenant)...)
	if !strings.Contains(out, "its queues there are gone") {
		t.Errorf("the command did not say the keeper was released: %q", out)
	}
	time.Sleep(150 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if pushed.Load() == 0 {
		t.Fatal("no push of the keeper's went through: the race raced nothing")
	}
	return cell.leftover(t, next.brokerTenant)
}

// startFakeBroker is startBroker with the URL Start returned (URL is set
// only once the broker serves).
func startFakeBroker(t *testing.T, opts fakebroker.Options) (*fakebroker.Broker, string) {
	b := fakebroker.New(opts)
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, url
}

// fakeKeeperCell is a fresh fake broker without tenancy, the public
// broker's mode.
func fakeKeeperCell(t *testing.T, name string) keeperCell {
	b, url := startFakeBroker(t, fakebroker.Options{IgnoreTenant: true, Name: name})
	return keeperCell{url: url, leftover: func(t *testing.T, next string) string {
		var left []string
		for _, n := range b.QueueNames("") {
			if !strings.HasPrefix(n, "queengate-isolation-probe-") {
				left = append(left, n)
			}
		}
		// What the next cluster would be served: a pop as its tenant.
		req, err := http.NewRequest(http.MethodGet, url+"/api/v1/pop/queue/payroll?autoAck=true&batch=1000", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-queen-tenant", next)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"n"`) {
			left = append(left, fmt.Sprintf("popped by the next cluster: %.300s", body))
		}
		return strings.Join(left, "; ")
	}}
}

// TestKeeperLeavesOnlyOnceItsTrafficStopped races a keeper pushing every
// 5 ms against each command that takes it off a cell without tenancy
// (fake broker in the public broker's mode), many times: the command
// deletes the keeper's queues and releases it, and nothing the keeper
// pushed may be left for the next cluster, another tenant's.
func TestKeeperLeavesOnlyOnceItsTrafficStopped(t *testing.T) {
	runs := raceRuns(t, 8)
	for _, leave := range keeperLeaves {
		t.Run(leave.name, func(t *testing.T) {
			leaked := 0
			for i := range runs {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					prefix := fmt.Sprintf("race%d", i)
					if left := raceKeeperLeave(t, fakeKeeperCell(t, prefix+"-cell"), prefix, leave.args); left != "" {
						leaked++
						t.Errorf("left on the cell's broker after the keeper was released: %s", left)
					}
				})
			}
			t.Logf("%s: %d of %d runs left the keeper's data to the next cluster", leave.name, leaked, runs)
		})
	}
}
