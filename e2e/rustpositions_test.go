package e2e

import (
	"fmt"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestRustTransactionPositions: on a Rust tenancy cell a transaction's
// positions rider (cursor writes that store no message) reaches the cell
// as sent and bills only the transaction's pushes; a rider the broker
// would refuse, and a position written as an operation (which the gateway
// would otherwise read as a flat push of its queue), are refused with a
// 400 that reaches nothing and bills nothing.
func TestRustTransactionPositions(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "pos-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("pos-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("pos"), "pos", cell)
	_, key := cp.key(cl.id)

	port := freePort(t)
	startMeteredGateway(t, port)
	c := client(port)
	url := func(path string) string { return fmt.Sprintf("http://%s.eu1.example.test:%d%s", cl.slug, port, path) }
	txn := func(body string) response { return do(t, c, "POST", url("/api/v1/transaction"), key, body) }

	if r := do(t, c, "POST", url("/api/v1/configure"), key, `{"queue":"orders","options":{}}`); r.status != 200 {
		t.Fatalf("configure: %d %s", r.status, r.body)
	}
	cellGot(broker)

	// Two positions on the queue (one set, one forgotten) ride with one
	// pushed item: the cell stores one message, and one is billed.
	ok := `{"operations":[{"type":"push","items":[{"queue":"orders","payload":1}]}],` +
		`"positions":[{"queue":"orders","partition":"p1","consumerGroup":"billing","offset":5,"metadata":"m"},` +
		`{"queue":"orders","consumerGroup":"audit","offset":null}]}`
	if r := txn(ok); r.status != 200 || r.json(t)["success"] != true {
		t.Fatalf("a transaction with positions: %d %s", r.status, r.body)
	}
	reachedCell(t, broker, "/api/v1/transaction", ok)

	refusedUnseen(t, broker, txn(`{"operations":[{"type":"push","items":[{"queue":"orders","payload":1}]}],`+
		`"positions":[{"queue":"orders","consumerGroup":"billing","offset":-1}]}`),
		400, "bad_request", "positions[0]: offset is a non-negative integer or null")
	refusedUnseen(t, broker, txn(`{"operations":[{"type":"ack","transactionId":"t","partitionId":"p"}],"positions":{}}`),
		400, "bad_request", "positions must be an array")
	refusedUnseen(t, broker, txn(`{"operations":[{"type":"positions","queue":"orders","consumerGroup":"billing","offset":3}]}`),
		400, "bad_request", "operation 0: a position is not an operation; send it in the transaction's positions array")

	stopMetered()
	if reqs, msgs := cp.usageOf(cl.id, "txn"); reqs != 1 || msgs != 1 {
		t.Errorf("transaction usage reqs=%d msgs=%d, want 1 and 1 (a position is no message, refusals bill nothing)", reqs, msgs)
	}
}
