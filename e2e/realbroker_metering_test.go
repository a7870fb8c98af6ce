//go:build realbroker

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/internal/realbroker"
)

// popped is the part of a pop answer the metering test follows.
type popped struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
	} `json:"messages"`
}

func readPop(t *testing.T, r response) popped {
	t.Helper()
	var p popped
	if r.status != http.StatusOK || json.Unmarshal(r.body, &p) != nil {
		t.Fatalf("pop: %d %s", r.status, r.body)
	}
	return p
}

func (p popped) txns() []string {
	var out []string
	for _, m := range p.Messages {
		out = append(out, m.TransactionID)
	}
	return out
}

// ackBody acknowledges every message of a pop as completed.
func (p popped) ackBody() string {
	var acks []string
	for _, m := range p.Messages {
		acks = append(acks, fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
			m.TransactionID, m.PartitionID, p.LeaseID))
	}
	return `{"acknowledgments":[` + strings.Join(acks, ",") + `]}`
}

// TestRealBrokerMeteringMatchesWhatItStored pushes (with a duplicate the
// broker does not store twice), runs transactions (one with a duplicate,
// which the broker refuses whole),
// pops with and without autoAck, acks, and lets a lease expire so that a
// batch is delivered again; then it holds the gateway's usage against the
// broker's own database: push and txn messages are the rows the broker
// stored, deliveries are the messages it completed plus the one batch it
// delivered twice, and acks are requests without messages.
func TestRealBrokerMeteringMatchesWhatItStored(t *testing.T) {
	broker := realbroker.Start(t)
	rc := newRealCell(t, broker, "metered", "")
	rc.start(t, "")
	pool := broker.Pool(t)

	if r := rc.send(t, "POST", "/api/v1/configure", `{"queue":"metered","options":{"leaseTime":2,"retryLimit":10}}`); r.status != 200 {
		t.Fatalf("configure: %d %s", r.status, r.body)
	}
	pushes := []string{
		`{"items":[{"queue":"metered","payload":{"n":1},"transactionId":"p-1"},{"queue":"metered","payload":{"n":2},"transactionId":"p-2"},` +
			`{"queue":"metered","payload":{"n":3},"transactionId":"p-3"},{"queue":"metered","transactionId":"p-4"}]}`,
		`{"items":[{"queue":"metered","payload":{"n":4},"transactionId":"p-4"},{"queue":"metered","payload":{"n":5},"transactionId":"p-5"}]}`,
	}
	var pushAccepted int64
	for _, body := range pushes {
		r := rc.send(t, "POST", "/api/v1/push", body)
		pushAccepted += acceptedItems(r)
	}
	if pushAccepted != 5 {
		t.Fatalf("the broker accepted %d pushed items, want 5 (one duplicate)", pushAccepted)
	}
	txns := []string{
		`{"operations":[{"type":"push","items":[{"queue":"metered","payload":{"t":1},"transactionId":"t-1"},` +
			`{"queue":"metered","payload":{"t":2},"transactionId":"t-2"}]},{"type":"push","queue":"metered","payload":{"t":3},"transactionId":"t-3"}]}`,
		// The broker stores a transaction whole or not at all: t-3 is a
		// duplicate, so t-4 is not stored either, and the answer says
		// success false.
		`{"operations":[{"type":"push","items":[{"queue":"metered","payload":{"t":4},"transactionId":"t-4"},` +
			`{"queue":"metered","payload":{"t":3},"transactionId":"t-3"}]}]}`,
	}
	for i, body := range txns {
		r := rc.send(t, "POST", "/api/v1/transaction", body)
		// (A failed transaction's results still list the pushes before the
		// duplicate as successes, though they were rolled back.)
		if ok, _ := r.json(t)["success"].(bool); r.status != 200 || ok != (i == 0) {
			t.Fatalf("transaction %d: %d %s", i, r.status, r.body)
		}
	}

	// Deliveries: a leased batch acked, a leased batch left to expire and
	// delivered again (then acked one by one), the rest with autoAck, and an
	// empty pop.
	var deliveries, popRequests, ackRequests int64
	pop := func(query string) popped {
		t.Helper()
		p := readPop(t, rc.send(t, "GET", "/api/v1/pop/queue/metered"+query, ""))
		deliveries += int64(len(p.Messages))
		popRequests++
		return p
	}
	ack := func(path, body string) {
		t.Helper()
		r := rc.send(t, "POST", path, body)
		ackRequests++
		if r.status != 200 || strings.Contains(string(r.body), `"success":false`) {
			t.Fatalf("ack: %d %s", r.status, r.body)
		}
	}
	first := pop("?batch=3")
	ack("/api/v1/ack/batch", first.ackBody())
	expiring := pop("?batch=2")
	time.Sleep(2500 * time.Millisecond) // the queue's leaseTime is 2 s
	again := pop("?batch=2")
	if len(expiring.Messages) != 2 || !slices.Equal(again.txns(), expiring.txns()) {
		t.Fatalf("after the lease expired the broker delivered %v, want %v again", again.txns(), expiring.txns())
	}
	for _, m := range again.Messages {
		ack("/api/v1/ack", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
			m.TransactionID, m.PartitionID, again.LeaseID))
	}
	pop("?batch=10&autoAck=true")
	if rest := pop("?batch=10&autoAck=true"); len(rest.Messages) != 0 {
		t.Fatalf("messages left after the autoAck pop: %v", rest.txns())
	}

	if err := caddy.Stop(); err != nil { // drains every open minute
		t.Fatal(err)
	}
	storedPush := brokerCount(t, pool, `SELECT count(*) FROM queen.messages WHERE transaction_id LIKE 'p-%'`)
	storedTxn := brokerCount(t, pool, `SELECT count(*) FROM queen.messages WHERE transaction_id LIKE 't-%'`)
	completed := brokerCount(t, pool, `SELECT coalesce(sum(total_messages_consumed), 0) FROM queen.partition_consumers`)
	completedRows := brokerCount(t, pool, `SELECT coalesce(sum(messages_completed), 0) FROM queen.messages_consumed`)
	redelivered := int64(len(again.Messages))
	t.Logf("broker: %d pushed and %d transaction messages stored, %d completed (%d in messages_consumed); %d redelivered",
		storedPush, storedTxn, completed, completedRows, redelivered)
	if storedPush != 5 || storedTxn != 3 || completed != storedPush+storedTxn || completedRows != completed {
		t.Fatalf("the broker's own books do not add up")
	}
	for _, u := range []struct {
		op         string
		reqs, msgs int64
	}{
		{"push", int64(len(pushes)), storedPush},
		{"txn", int64(len(txns)), storedTxn},
		{"delivery", popRequests, completed + redelivered},
		{"configure", 1, 0},
		{"read", ackRequests, 0}, // acks are requests without messages
	} {
		if reqs, msgs := rc.cp.usageOf(rc.cl.id, u.op); reqs != u.reqs || msgs != u.msgs {
			t.Errorf("%s usage: %d requests, %d messages; the broker's books say %d and %d", u.op, reqs, msgs, u.reqs, u.msgs)
		}
	}
	if deliveries != completed+redelivered {
		t.Errorf("the pops returned %d messages, the broker completed %d and redelivered %d", deliveries, completed, redelivered)
	}
}
