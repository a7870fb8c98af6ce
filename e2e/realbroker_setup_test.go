//go:build realbroker

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/realbroker"
)

// The files named realbroker_*_test.go are the contract suite: the
// gateway, in a real Caddy, in front of the real public broker (Queen
// 0.15.1, which has no tenancy), held against the same requests sent to
// the broker directly and against what the broker stored in its database.

// unlimited lifts every rate and size limit a contract test could run
// into, so that what the gateway refuses is refused for how it reads the
// request, never for a budget.
const unlimited = `{"max_req_per_sec": null, "req_burst": null, "max_msgs_per_sec": null, "msgs_burst": null,
	"max_queues": null, "max_partitions_per_queue": null, "max_batch_items": null, "max_payload_bytes": null}`

// realCell is one real broker behind a gateway: a cell whose only cluster
// (so its keeper) has an all-scopes key, on a control-plane database of
// its own.
type realCell struct {
	broker *realbroker.Broker
	cp     *controlPlane
	db     string
	cellID string
	cl     cluster
	key    string
	port   int
	c      *http.Client
}

// newRealCell provisions the cell and its cluster; the gateway is started
// by start, so a test can look at the broker before the gateway probes it.
func newRealCell(t *testing.T, broker *realbroker.Broker, slug, overrides string) *realCell {
	t.Helper()
	rc := &realCell{broker: broker, db: pgtest.NewDatabase(t), port: freePort(t)}
	rc.cp = newControlPlane(t, rc.db)
	rc.cellID = rc.cp.cell(slug+"-cell", broker.URL, "")
	rc.cl = rc.cp.cluster(rc.cp.tenant(slug), slug, rc.cellID)
	if overrides != "" {
		rc.cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, $2::jsonb)`, rc.cl.id, overrides)
	}
	_, rc.key = rc.cp.key(rc.cl.id)
	rc.c = client(rc.port)
	return rc
}

// start runs the in-process gateway, flushing usage every second.
func (rc *realCell) start(t *testing.T, appOptions string) {
	t.Helper()
	startGateway(t, gatewayCaddyfile(rc.port, rc.db,
		"meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir()+"\n\t\t"+appOptions, ""))
}

func (rc *realCell) url(cl cluster, path string) string {
	return fmt.Sprintf("http://%s.eu1.example.test:%d%s", cl.slug, rc.port, path)
}

// send is a request of the keeper's through the gateway.
func (rc *realCell) send(t *testing.T, method, path, body string) response {
	t.Helper()
	return do(t, rc.c, method, rc.url(rc.cl, path), rc.key, body)
}

// direct sends a request to a broker as a client of the broker would,
// without the gateway.
func direct(t *testing.T, b *realbroker.Broker, method, path, body string) response {
	t.Helper()
	return do(t, http.DefaultClient, method, b.URL+path, "", body)
}

// brokerCount runs a count query on a broker's own database.
func brokerCount(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
