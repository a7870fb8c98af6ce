//go:build realbroker

package limits

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/realbroker"
)

// TestSchemaViolationsPoisonTheRealBroker shows the harm each rule of
// schema.go prevents, on a broker of its own (it is poisoned for good):
// the real broker 0.15.1 answers each violating push "buffered" and stores
// nothing of it, while the gateway's parser refuses the same body. Values
// at the limits are stored, so the rules are no stricter than the schema.
func TestSchemaViolationsPoisonTheRealBroker(t *testing.T) {
	b := realbroker.Start(t)
	long := strings.Repeat("t", MaxNameChars+1)
	wide := strings.Repeat("é", MaxNameChars+1)
	item := func(queue, extra string) []byte {
		return []byte(`{"items":[{"queue":"` + queue + `","payload":{"n":1}` + extra + `}]}`)
	}
	status := func(t *testing.T, answer []byte) string {
		var items []struct{ Status string }
		if err := json.Unmarshal(answer, &items); err != nil || len(items) != 1 {
			t.Fatalf("answer %s: %v", answer, err)
		}
		return items[0].Status
	}

	// First what the schema holds, before anything poisons the broker.
	held := map[string][]byte{
		"ok-names":  item(strings.Repeat("é", MaxNameChars), `,"partition":"`+strings.Repeat("p", MaxNameChars)+`","transactionId":"`+strings.Repeat("\\u00e9", MaxNameChars)+`"`),
		"ok-trace":  item("ok-trace", `,"traceId":"{0190B4C89A5E7C3D8F215B6A7C8D9E0F}"`),
		"ok-trace2": item("ok-trace2", `,"traceId":"0190-b4c8-9a5e-7c3d-8f21-5b6a-7c8d-9e0f"`),
		"ok-empty":  item("ok-empty", `,"traceId":""`),
		"ok-text":   item("ok-text", `,"transactionId":"\\\\u0000"`),
	}
	for name, body := range held {
		if _, err := ParsePush(body); err != nil {
			t.Fatalf("%s: the gateway refuses what the broker stores: %v", name, err)
		}
		code, answer := b.Do(t, "POST", "/api/v1/push", body)
		if code != 200 || status(t, answer) != "queued" {
			t.Fatalf("%s: %d %s, want queued", name, code, answer)
		}
	}

	poison := map[string][]byte{
		"nul-payload":      []byte(`{"items":[{"queue":"nul-payload","payload":{"a":"x\u0000"}}]}`),
		"nul-member-name":  []byte(`{"items":[{"queue":"nul-member-name","payload":{"k\u0000":1}}]}`),
		"nul-partition":    item("nul-partition", `,"partition":"p\u0000"`),
		"nul-transaction":  item("nul-transaction", `,"transactionId":"t\u0000"`),
		"trace-bad":        item("trace-bad", `,"traceId":"bad"`),
		"trace-x":          item("trace-x", `,"traceId":"x"`),
		"transaction-256":  item("transaction-256", `,"transactionId":"`+long+`"`),
		"transaction-wide": item("transaction-wide", `,"transactionId":"`+wide+`"`),
		"partition-256":    item("partition-256", `,"partition":"`+wide+`"`),
		"queue-256":        item("queue."+long, ""),
	}
	for name, body := range poison {
		if _, err := ParsePush(body); err == nil {
			t.Errorf("%s: the gateway reads a body the broker cannot store", name)
		}
		code, answer := b.Do(t, "POST", "/api/v1/push", body)
		if code != 200 || status(t, answer) != "buffered" {
			t.Errorf("%s: %d %s, want the broker to answer buffered", name, code, answer)
		}
	}
	// What was buffered never lands: the broker retries it and fails again.
	time.Sleep(2 * time.Second)
	for name := range poison {
		queue := name
		if name == "queue-256" {
			queue = "queue." + long
		}
		if n := b.CountMessages(t, queue); n != 0 {
			t.Errorf("%s: %d messages stored", name, n)
		}
	}
	if !strings.Contains(b.Output(), "Failed over") {
		t.Errorf("the broker did not report its failover; output:\n%s", b.Output())
	}
}

// TestSchemaViolationsTheRealBrokerFailsOn shows the rules beyond pushes:
// the real broker tries each of these, and answers its database's error.
// The gateway refuses each before the cell (e2e/schema_test.go).
func TestSchemaViolationsTheRealBrokerFailsOn(t *testing.T) {
	b := realbroker.Start(t)
	long := strings.Repeat("g", MaxNameChars+1)
	code, answer := b.Do(t, "POST", "/api/v1/push", []byte(`{"items":[{"queue":"acks","transactionId":"a1","payload":1}]}`))
	var pushed []struct {
		PartitionID string `json:"partition_id"`
	}
	if err := json.Unmarshal(answer, &pushed); code != 200 || err != nil || len(pushed) != 1 {
		t.Fatalf("push: %d %s", code, answer)
	}
	if code, answer := b.Do(t, "GET", "/api/v1/pop/queue/acks?batch=1", nil); code != 200 || !strings.Contains(string(answer), `"a1"`) {
		t.Fatalf("pop: %d %s", code, answer)
	}
	ackBatch := `{"consumerGroup":"` + long + `","acknowledgments":[{"transactionId":"a1","partitionId":"` + pushed[0].PartitionID + `","status":"completed"}]}`
	if err := AckNamesError([]byte(ackBatch)); err == nil {
		t.Error("the gateway reads an ack the broker cannot store")
	}
	for _, c := range []struct{ name, method, path, body, dbError string }{
		{"configure namespace", "POST", "/api/v1/configure", `{"queue":"c1","namespace":"` + long + `"}`, "character varying(255)"},
		{"configure task", "POST", "/api/v1/configure", `{"queue":"c2","task":"` + long + `"}`, "character varying(255)"},
		{"pop consumer group", "GET", "/api/v1/pop/queue/acks?batch=1&consumerGroup=" + long, "", "character varying(255)"},
		{"pop consumer group with %00", "GET", "/api/v1/pop/queue/acks?batch=1&consumerGroup=a%00b", "", `\\u0000 cannot be converted to text`},
		{"transaction traceId", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"t","traceId":"bad","payload":1}]}]}`, "uuid"},
		{"transaction transactionId", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"t","transactionId":"` + long + `"}]}]}`, "character varying(255)"},
		{"ack consumer group", "POST", "/api/v1/ack/batch", ackBatch, "character varying(255)"},
		{"trace eventType", "POST", "/api/v1/traces", `{"transactionId":"a1","partitionId":"` + pushed[0].PartitionID + `","eventType":"` + strings.Repeat("e", 101) + `","data":{}}`, "character varying(100)"},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		_, answer := b.Do(t, c.method, c.path, body)
		if !strings.Contains(string(answer), c.dbError) {
			t.Errorf("%s: the broker answered %.300s, want its database's error (%s)", c.name, answer, c.dbError)
		}
	}
}
