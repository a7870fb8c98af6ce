//go:build realbroker

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/realbroker"
	"github.com/queengate/queengate/tenancy"
)

// brokerDataTables are the broker's tables that hold what its clients
// wrote (queues, messages, consumer state, traces, streams), as opposed to
// its own metrics.
var brokerDataTables = []string{
	"queen.queues", "queen.partitions", "queen.messages", "queen.partition_consumers", "queen.partition_lookup",
	"queen.consumer_groups_metadata", "queen.consumer_watermarks", "queen.messages_consumed",
	"queen.dead_letter_queue", "queen.message_traces", "queen.message_trace_names", "queen.stats",
	"queen_streams.queries", "queen_streams.state",
}

// brokerData is the row count of every data table of the broker, and its
// queue names: what a probe that leaves nothing behind does not change.
func brokerData(t *testing.T, b *realbroker.Broker) string {
	t.Helper()
	pool := b.Pool(t)
	var parts []string
	for _, table := range brokerDataTables {
		query := "SELECT count(*) FROM " + table
		if table == "queen.stats" {
			// The broker writes its one 'system' row on its own stats cycle,
			// whenever that first comes after its start: its own metric, not
			// anything a client wrote.
			query += " WHERE stat_type <> 'system'"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", table, brokerCount(t, pool, query)))
	}
	return strings.Join(parts, " ") + " queues=" + strings.Join(b.Queues(t), ",")
}

// TestRealBrokerIsolationProbe: the public broker ignores x-queen-tenant.
// The gateway's probe finds that out (verdict unscoped) without leaving
// anything in the broker's data, keeps serving the cell's oldest cluster,
// and refuses a second cluster on the same cell before it reaches the
// broker.
func TestRealBrokerIsolationProbe(t *testing.T) {
	broker := realbroker.Start(t)
	rc := newRealCell(t, broker, "iso-keeper", "")
	rc.cp.exec(`UPDATE queen_proxy.clusters SET created_at = now() - interval '1 day' WHERE id = $1::uuid`, rc.cl.id)
	other := rc.cp.cluster(rc.cp.tenant("iso-second"), "iso-second", rc.cellID)
	_, otherKey := rc.cp.key(other.id)
	untouched := brokerData(t, broker)

	rc.start(t, "")
	if r := rc.send(t, "GET", "/api/v1/resources/queues", ""); r.status != http.StatusOK {
		t.Fatalf("the keeper's first request: %d %s", r.status, r.body)
	}
	eventually(t, 15*time.Second, func() error {
		if v := rc.cp.scalar(`SELECT tenant_scoping FROM queen_proxy.cells WHERE id = $1::uuid`, rc.cellID); v != "unscoped" {
			return fmt.Errorf("cells.tenant_scoping = %q", v)
		}
		return nil
	})
	ready := do(t, rc.c, "GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", rc.port), "", "")
	if s, _ := ready.json(t)["cell_isolation"].(string); !strings.Contains(s, "iso-keeper-cell: unscoped") {
		t.Fatalf("/readyz: %s", ready.body)
	}
	t.Logf("broker data: %s", untouched)
	if now := brokerData(t, broker); now != untouched {
		t.Fatalf("the probe changed the broker's data:\n before %s\n after  %s", untouched, now)
	}
	for _, q := range broker.Queues(t) {
		if strings.HasPrefix(q, tenancy.ProbeQueuePrefix) {
			t.Fatalf("probe queue %s left on the broker", q)
		}
	}

	// The second cluster is refused, and none of its requests writes
	// anything.
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/api/v1/resources/queues", ""},
		{"POST", "/api/v1/push", `{"items":[{"queue":"second","payload":{"secret":"second's"}}]}`},
		{"POST", "/api/v1/configure", `{"queue":"second","options":{}}`},
		{"GET", "/api/v1/pop/queue/keeper?autoAck=true", ""},
	} {
		assertRefusal(t, do(t, rc.c, req.method, rc.url(other, req.path), otherKey, req.body),
			http.StatusServiceUnavailable, "cell_not_isolated")
	}
	if now := brokerData(t, broker); now != untouched {
		t.Fatalf("the second cluster's refused requests changed the broker's data:\n before %s\n after  %s", untouched, now)
	}

	// The keeper is served: its push is stored and its pop delivers it.
	r := rc.send(t, "POST", "/api/v1/push", `{"items":[{"queue":"keeper","payload":{"secret":"keeper's"}}]}`)
	if acceptedItems(r) != 1 || broker.CountMessages(t, "keeper") != 1 {
		t.Fatalf("the keeper's push: %d %s; %d stored", r.status, r.body, broker.CountMessages(t, "keeper"))
	}
	r = rc.send(t, "GET", "/api/v1/pop/queue/keeper?autoAck=true", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "keeper's") {
		t.Fatalf("the keeper's pop: %d %s", r.status, r.body)
	}
	if got := broker.Queues(t); strings.Join(got, ",") != "keeper" {
		t.Fatalf("queues on the broker: %v, want only the keeper's", got)
	}
}
