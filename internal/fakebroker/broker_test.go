package fakebroker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/uuidtext"
)

// client talks to a broker under test as one tenant.
type client struct {
	t      *testing.T
	base   string
	tenant string
	header http.Header
}

func startBroker(t *testing.T, opts Options) (*Broker, string) {
	t.Helper()
	b := New(opts)
	url, err := b.Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, url
}

func (c *client) do(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		data, err := json.Marshal(v)
		if err != nil {
			c.t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		c.t.Fatalf("request: %v", err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.tenant != "" {
		req.Header.Set(TenantHeader, c.tenant)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// call sends a request and decodes the JSON answer into a generic value.
func (c *client) call(method, path string, body any) (int, any) {
	c.t.Helper()
	status, _, data, err := c.do(context.Background(), method, path, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	var v any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %s", method, path, data)
		}
	}
	return status, v
}

func (c *client) push(items ...map[string]any) []map[string]any {
	c.t.Helper()
	status, v := c.call("POST", "/api/v1/push", map[string]any{"items": items})
	if status != 200 {
		c.t.Fatalf("push: status %d: %v", status, v)
	}
	return objects(c.t, v)
}

func (c *client) pop(pathAndQuery string) map[string]any {
	c.t.Helper()
	status, v := c.call("GET", pathAndQuery, nil)
	if status != 200 {
		c.t.Fatalf("pop: status %d: %v", status, v)
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.t.Fatalf("pop: want an object, got %v", v)
	}
	return m
}

func objects(t *testing.T, v any) []map[string]any {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("want an array, got %v", v)
	}
	out := make([]map[string]any, len(arr))
	for i, e := range arr {
		out[i], ok = e.(map[string]any)
		if !ok {
			t.Fatalf("want objects, got %v", v)
		}
	}
	return out
}

func messagesOf(t *testing.T, pop map[string]any) []map[string]any {
	t.Helper()
	return objects(t, pop["messages"])
}

func TestTenantIsolation(t *testing.T) {
	_, url := startBroker(t, Options{})
	a := &client{t: t, base: url, tenant: "aaaaaaaa-0000-4000-8000-000000000001"}
	bb := &client{t: t, base: url, tenant: "bbbbbbbb-0000-4000-8000-000000000002"}
	def := &client{t: t, base: url}

	ra := a.push(map[string]any{"queue": "orders", "payload": map[string]any{"who": "A"}, "transactionId": "same"})
	rb := bb.push(map[string]any{"queue": "orders", "payload": map[string]any{"who": "B"}, "transactionId": "same"})
	if ra[0]["status"] != "queued" || rb[0]["status"] != "queued" {
		t.Fatalf("same transactionId in two tenants must both be queued: %v / %v", ra, rb)
	}
	if ra[0]["partition_id"] == rb[0]["partition_id"] {
		t.Fatalf("tenants share a partition id")
	}

	msgs := messagesOf(t, bb.pop("/api/v1/pop/queue/orders?batch=10"))
	if len(msgs) != 1 || msgs[0]["data"].(map[string]any)["who"] != "B" {
		t.Fatalf("B popped %v, want only its own message", msgs)
	}
	if m := def.pop("/api/v1/pop/queue/orders"); m["error"] != "no_available_partition" {
		t.Fatalf("the default tenant sees another tenant's queue: %v", m)
	}

	// B cannot ack A's message, A can.
	ack := map[string]any{"transactionId": "same", "partitionId": ra[0]["partition_id"], "status": "completed"}
	_, v := bb.call("POST", "/api/v1/ack", ack)
	if r := objects(t, v)[0]; r["success"] != false || r["error"] != "Message not found" {
		t.Fatalf("B acked A's message: %v", r)
	}
	_, v = a.call("POST", "/api/v1/ack", ack)
	if r := objects(t, v)[0]; r["success"] != true {
		t.Fatalf("A's own ack failed: %v", r)
	}

	for _, c := range []*client{a, bb} {
		_, v := c.call("GET", "/api/v1/resources/queues", nil)
		qs := objects(t, v.(map[string]any)["queues"])
		if len(qs) != 1 || qs[0]["name"] != "orders" {
			t.Fatalf("tenant %s lists %v, want exactly its one queue", c.tenant, qs)
		}
	}
	_, v = def.call("GET", "/api/v1/resources/queues", nil)
	if qs := v.(map[string]any)["queues"].([]any); len(qs) != 0 {
		t.Fatalf("the default tenant lists %v", qs)
	}

	// Deleting B's queue leaves A's.
	bb.call("DELETE", "/api/v1/resources/queues/orders", nil)
	_, v = a.call("GET", "/api/v1/resources/queues/orders", nil)
	if v.(map[string]any)["name"] != "orders" {
		t.Fatalf("A's queue is gone after B deleted its own: %v", v)
	}
}

func TestLongPollWokenByPush(t *testing.T) {
	b := New(Options{})
	b.poll = time.Hour // only a wake can release the pop in time
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := &client{t: t, base: url, tenant: "cccccccc-0000-4000-8000-000000000003"}
	other := &client{t: t, base: url, tenant: "dddddddd-0000-4000-8000-000000000004"}

	type popResult struct {
		m       map[string]any
		elapsed time.Duration
	}
	done := make(chan popResult, 1)
	start := time.Now()
	go func() {
		m := c.pop("/api/v1/pop/queue/jobs?batch=5&wait=true&timeout=10000")
		done <- popResult{m, time.Since(start)}
	}()
	waitFor(t, func() bool { return b.Parked() == 1 }, "the pop to park")

	// A push to the same queue name in another tenant must not wake it.
	other.push(map[string]any{"queue": "jobs", "payload": 1})
	select {
	case r := <-done:
		t.Fatalf("another tenant's push woke the pop: %v", r.m)
	case <-time.After(200 * time.Millisecond):
	}

	c.push(map[string]any{"queue": "jobs", "payload": map[string]any{"wake": true}, "transactionId": "w1"})
	select {
	case r := <-done:
		msgs := messagesOf(t, r.m)
		if len(msgs) != 1 || msgs[0]["transactionId"] != "w1" || r.m["leaseId"] == nil {
			t.Fatalf("woken pop answered %v", r.m)
		}
		if r.elapsed > 5*time.Second {
			t.Fatalf("pop took %v: it waited for its timeout instead of being woken", r.elapsed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the push did not wake the parked pop")
	}
	if n := b.Parked(); n != 0 {
		t.Fatalf("Parked() = %d after the pop returned", n)
	}
}

func TestLongPollTimeoutAndCancel(t *testing.T) {
	b, url := startBroker(t, Options{})
	c := &client{t: t, base: url}

	start := time.Now()
	m := c.pop("/api/v1/pop/queue/idle/partition/lane?wait=true&timeout=300")
	if time.Since(start) < 300*time.Millisecond {
		t.Fatalf("long-poll answered after %v, before its timeout", time.Since(start))
	}
	want := map[string]any{
		"consumerGroup": QueueMode, "leaseId": nil, "messages": []any{}, "partition": "lane",
		"partitionId": nil, "queue": "idle", "success": true,
	}
	if !jsonEqual(m, want) {
		t.Fatalf("timeout answer %v, want %v", m, want)
	}

	// A client that goes away releases its parked pop.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, _, err := c.do(ctx, "GET", "/api/v1/pop/queue/idle?wait=true", nil)
		errc <- err
	}()
	waitFor(t, func() bool { return b.Parked() == 1 }, "the pop to park")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pop: err = %v", err)
	}
	waitFor(t, func() bool { return b.Parked() == 0 }, "the cancelled pop to leave")
}

func TestRedeliveryAfterFailedAck(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	status, v := c.call("POST", "/api/v1/configure", map[string]any{
		"queue":   "work",
		"options": map[string]any{"retryLimit": 1, "retryDelay": 0, "dlqAfterMaxRetries": true},
	})
	if status != 200 || v.(map[string]any)["configured"] != true {
		t.Fatalf("configure: %d %v", status, v)
	}
	pushed := c.push(map[string]any{"queue": "work", "partition": "p", "payload": "job", "transactionId": "j1"})

	fail := func(leaseID any) map[string]any {
		_, v := c.call("POST", "/api/v1/ack", map[string]any{
			"transactionId": "j1", "partitionId": pushed[0]["partition_id"], "leaseId": leaseID,
			"status": "failed", "error": "boom",
		})
		return objects(t, v)[0]
	}

	first := c.pop("/api/v1/pop/queue/work")
	m1 := messagesOf(t, first)[0]
	if r := fail(first["leaseId"]); r["success"] != true || r["dlq"] != false || r["leaseReleased"] != true {
		t.Fatalf("first failed ack: %v", r)
	}
	second := c.pop("/api/v1/pop/queue/work")
	m2 := messagesOf(t, second)
	if len(m2) != 1 || m2[0]["id"] != m1["id"] || m2[0]["transactionId"] != "j1" {
		t.Fatalf("redelivery %v, want message %v again", m2, m1["id"])
	}
	if second["leaseId"] == first["leaseId"] {
		t.Fatalf("redelivery reused the lease id")
	}
	// retryLimit 1 is used up: the next failure dead-letters the message.
	if r := fail(second["leaseId"]); r["dlq"] != true {
		t.Fatalf("second failed ack: %v, want dlq", r)
	}
	if m := c.pop("/api/v1/pop/queue/work"); m["error"] != "no_available_partition" {
		t.Fatalf("dead-lettered message delivered again: %v", m)
	}
	_, v = c.call("GET", "/api/v1/dlq?queue=work", nil)
	dl := objects(t, v.(map[string]any)["messages"])
	if len(dl) != 1 || dl[0]["transactionId"] != "j1" || dl[0]["errorMessage"] != "boom" || dl[0]["retryCount"] != 1.0 {
		t.Fatalf("dlq = %v", dl)
	}
}

func TestDuplicatePerPartition(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	first := c.push(map[string]any{"queue": "q", "partition": "p1", "payload": 1, "transactionId": "t1"})[0]
	res := c.push(
		map[string]any{"queue": "q", "partition": "p1", "payload": 2, "transactionId": "t1"},
		map[string]any{"queue": "q", "partition": "p2", "payload": 3, "transactionId": "t1"},
		map[string]any{"queue": "q", "payload": 4},
	)
	dup := res[0]
	if dup["status"] != "duplicate" || dup["message_id"] != first["message_id"] {
		t.Fatalf("duplicate = %v, want the original message id %v", dup, first["message_id"])
	}
	if _, ok := dup["partition_id"]; ok {
		t.Fatalf("duplicate carries partition_id: %v", dup)
	}
	if _, ok := dup["trace_id"]; ok {
		t.Fatalf("duplicate carries trace_id: %v", dup)
	}
	if res[1]["status"] != "queued" || res[1]["partition_id"] == first["partition_id"] {
		t.Fatalf("same transactionId on another partition = %v, want queued", res[1])
	}
	gen, _ := res[2]["transaction_id"].(string)
	if res[2]["status"] != "queued" || !uuidtext.Valid(gen) {
		t.Fatalf("item without transactionId = %v, want a generated UUID", res[2])
	}
	msgs := messagesOf(t, c.pop("/api/v1/pop/queue/q/partition/p1?batch=10"))
	if len(msgs) != 1 || msgs[0]["data"] != 1.0 {
		t.Fatalf("partition p1 holds %v, want only the first message", msgs)
	}
	if msgs := messagesOf(t, c.pop("/api/v1/pop/queue/q/partition/Default")); len(msgs) != 1 {
		t.Fatalf("the item without partition did not land in Default: %v", msgs)
	}
}

func TestLeaseHeldAndExtend(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	c.push(map[string]any{"queue": "q", "partition": "p", "payload": 1})
	first := c.pop("/api/v1/pop/queue/q/partition/p")
	if m := c.pop("/api/v1/pop/queue/q/partition/p"); m["error"] != "lease_held" || m["success"] != false {
		t.Fatalf("second pop of a leased partition = %v", m)
	}
	if m := c.pop("/api/v1/pop/queue/q/partition/p?consumerGroup=other"); len(messagesOf(t, m)) != 1 {
		t.Fatalf("another consumer group is blocked by queue mode's lease: %v", m)
	}
	_, v := c.call("POST", "/api/v1/lease/"+first["leaseId"].(string)+"/extend", map[string]any{})
	if r := objects(t, v)[0]; r["success"] != true || r["expiresAt"] == nil {
		t.Fatalf("extend = %v", r)
	}
	_, v = c.call("POST", "/api/v1/lease/not-a-lease/extend", map[string]any{"seconds": 5})
	if r := objects(t, v)[0]; r["success"] != false || r["error"] != "Lease not found" {
		t.Fatalf("extend unknown = %v", r)
	}
}

func TestAutoAckAndConsumerGroups(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	c.push(map[string]any{"queue": "q", "payload": 1}, map[string]any{"queue": "q", "payload": 2})
	m := c.pop("/api/v1/pop/queue/q?batch=10&autoAck=true")
	if m["leaseId"] != "" || len(messagesOf(t, m)) != 2 {
		t.Fatalf("autoAck pop = %v", m)
	}
	if m := c.pop("/api/v1/pop/queue/q"); m["error"] != "no_available_partition" {
		t.Fatalf("autoAcked messages delivered again: %v", m)
	}
	// Each consumer group has its own cursor.
	if m := c.pop("/api/v1/pop/queue/q?batch=10&consumerGroup=g1"); len(messagesOf(t, m)) != 2 || m["consumerGroup"] != "g1" {
		t.Fatalf("group g1 = %v", m)
	}
	// A subscriptionMode=new group skips what was there before it.
	if m := c.pop("/api/v1/pop/queue/q?batch=10&consumerGroup=g2&subscriptionMode=new"); len(messagesOf(t, m)) != 0 {
		t.Fatalf("new group got old messages: %v", m)
	}
	c.push(map[string]any{"queue": "q", "payload": 3})
	if m := c.pop("/api/v1/pop/queue/q?batch=10&consumerGroup=g2&subscriptionMode=new"); len(messagesOf(t, m)) != 1 {
		t.Fatalf("new group did not get the new message: %v", m)
	}
}

// TestConsumerGroupListEmpty: with no group that has consumed, the broker
// lists its consumer groups as an empty body, not as [] (measured on
// 0.15.1); once a pop has consumed, as rows.
func TestConsumerGroupListEmpty(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	c.push(map[string]any{"queue": "q", "payload": 1})
	status, h, body, err := c.do(context.Background(), "GET", "/api/v1/consumer-groups", nil)
	if err != nil || status != 200 || len(body) != 0 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("no groups: %d %q content-type %q (%v)", status, body, h.Get("Content-Type"), err)
	}
	c.pop("/api/v1/pop/queue/q?autoAck=true")
	if status, v := c.call("GET", "/api/v1/consumer-groups", nil); status != 200 || len(objects(t, v)) != 1 {
		t.Fatalf("after a pop: %d %v", status, v)
	}
}

// TestEmptyPopOfOnePartition: a pop of one named partition that finds
// nothing is answered as the broker answers it (measured on 0.15.1): a
// success with no messages on a partition it has, and the lease it names
// holds nothing back; partition_not_found on one it does not have.
func TestEmptyPopOfOnePartition(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	c.push(map[string]any{"queue": "q", "partition": "p", "payload": 1})
	if m := c.pop("/api/v1/pop/queue/q/partition/p?autoAck=true"); len(messagesOf(t, m)) != 1 {
		t.Fatalf("first pop = %v", m)
	}
	for _, query := range []string{"", "?autoAck=true"} {
		m := c.pop("/api/v1/pop/queue/q/partition/p" + query)
		lease, _ := m["leaseId"].(string)
		if m["success"] != true || len(messagesOf(t, m)) != 0 || m["partition"] != "p" || m["queue"] != "q" ||
			m["partitionsClaimed"] != float64(1) || (query == "") != (lease != "") {
			t.Fatalf("empty pop%s = %v", query, m)
		}
	}
	c.push(map[string]any{"queue": "q", "partition": "p", "payload": 2})
	if m := c.pop("/api/v1/pop/queue/q/partition/p"); len(messagesOf(t, m)) != 1 {
		t.Fatalf("the empty pop's lease held the partition: %v", m)
	}
	for _, path := range []string{"/api/v1/pop/queue/q/partition/nope", "/api/v1/pop/queue/nope/partition/p"} {
		if m := c.pop(path); m["error"] != "partition_not_found" || m["success"] != false {
			t.Fatalf("%s = %v", path, m)
		}
	}
	if m := c.pop("/api/v1/pop/queue/q"); m["error"] != "no_available_partition" {
		t.Fatalf("queue-wide empty pop = %v", m)
	}
}

// TestMessageListMode: the listing says how its queues are consumed, and
// "none" before anyone consumed them (measured on 0.15.1).
func TestMessageListMode(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	c.push(map[string]any{"queue": "q", "payload": 1}, map[string]any{"queue": "q", "payload": 2})
	mode := func() any {
		t.Helper()
		_, v := c.call("GET", "/api/v1/messages?queue=q", nil)
		return v.(map[string]any)["mode"].(map[string]any)["type"]
	}
	for _, step := range []struct {
		pop, want string
	}{
		{"", "none"},
		{"/api/v1/pop/queue/q?autoAck=true", "queue"},
		{"/api/v1/pop/queue/q?autoAck=true&consumerGroup=g", "hybrid"},
	} {
		if step.pop != "" {
			c.pop(step.pop)
		}
		if got := mode(); got != step.want {
			t.Fatalf("after %q the mode is %v, want %s", step.pop, got, step.want)
		}
	}
}

// TestTransactionDuplicateAndFlatForm: as the broker (measured on 0.15.1)
// a transaction reads an operation without items as the item itself,
// numbers its results in the order of the items, and is refused whole, with
// PostgreSQL's unique violation, when it pushes a transaction id the
// partition holds or that it repeats.
func TestTransactionDuplicateAndFlatForm(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	status, v := c.call("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []any{
			map[string]any{"queue": "q", "payload": 1, "transactionId": "a"},
			map[string]any{"queue": "q", "payload": 2, "transactionId": "b"},
		}},
		map[string]any{"type": "push", "queue": "q", "payload": 3, "transactionId": "c"},
	}})
	m := v.(map[string]any)
	res := objects(t, m["results"])
	if status != 200 || m["success"] != true || len(res) != 3 || res[2]["transactionId"] != "c" ||
		res[0]["index"] != float64(0) || res[1]["index"] != float64(1) || res[2]["index"] != float64(2) {
		t.Fatalf("transaction = %d %v", status, v)
	}
	for _, ops := range [][]any{
		{map[string]any{"type": "push", "items": []any{
			map[string]any{"queue": "q", "payload": 4, "transactionId": "d"},
			map[string]any{"queue": "q", "payload": 1, "transactionId": "a"},
		}}},
		{map[string]any{"type": "push", "items": []any{
			map[string]any{"queue": "q", "partition": "p", "payload": 5, "transactionId": "e"},
			map[string]any{"queue": "q", "partition": "p", "payload": 6, "transactionId": "e"},
		}}},
	} {
		status, v := c.call("POST", "/api/v1/transaction", map[string]any{"operations": ops})
		m := v.(map[string]any)
		if status != 200 || m["success"] != false || len(objects(t, m["results"])) != 1 ||
			m["error"] != `duplicate key value violates unique constraint "messages_partition_transaction_unique"` {
			t.Fatalf("duplicate in a transaction = %d %v", status, v)
		}
	}
	if m := c.pop("/api/v1/pop/queue/q?batch=10&autoAck=true"); len(messagesOf(t, m)) != 3 {
		t.Fatalf("a refused transaction stored something: %v", m)
	}
	if status, v := c.call("GET", "/api/v1/resources/queues/q", nil); status != 200 || len(v.(map[string]any)["partitions"].([]any)) != 1 {
		t.Fatalf("a refused transaction created a partition: %v", v)
	}
}

func TestMultiPartitionPop(t *testing.T) {
	_, url := startBroker(t, Options{PartitionOrder: func(_, a, b string) bool { return a < b }})
	c := &client{t: t, base: url}
	for _, p := range []string{"a", "b", "c", "d"} {
		c.push(map[string]any{"queue": "q", "partition": p, "payload": p})
	}
	m := c.pop("/api/v1/pop/queue/q?batch=10&partitions=3")
	msgs := messagesOf(t, m)
	if m["partitionsClaimed"] != 3.0 || m["partition"] != "a" || len(msgs) != 3 {
		t.Fatalf("partitions=3 pop = %v", m)
	}
	for _, msg := range msgs {
		if msg["leaseId"] != m["leaseId"] {
			t.Fatalf("messages of one pop carry different leases: %v", m)
		}
	}
	if m := c.pop("/api/v1/pop/queue/q?batch=10"); m["partition"] != "d" {
		t.Fatalf("next pop took %v, want the only unleased partition d", m["partition"])
	}
}

func TestTransactionAllOrNothing(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	res := c.push(map[string]any{"queue": "in", "payload": 1, "transactionId": "m1"})
	pid := res[0]["partition_id"]
	_, v := c.call("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "nope", "partitionId": pid, "status": "completed"},
		map[string]any{"type": "push", "items": []any{map[string]any{"queue": "out", "payload": 2}}},
	}})
	r := v.(map[string]any)
	if r["success"] != false || r["error"] != "ACK operation failed: Message not found" {
		t.Fatalf("failing transaction = %v", r)
	}
	if m := c.pop("/api/v1/pop/queue/out"); m["error"] != "no_available_partition" {
		t.Fatalf("the failed transaction's push was applied: %v", m)
	}
	_, v = c.call("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "m1", "partitionId": pid, "status": "completed"},
		map[string]any{"type": "push", "items": []any{map[string]any{"queue": "out", "payload": 2}}},
	}})
	if r := v.(map[string]any); r["success"] != true || len(r["results"].([]any)) != 2 {
		t.Fatalf("transaction = %v", r)
	}
	if m := c.pop("/api/v1/pop/queue/out"); len(messagesOf(t, m)) != 1 {
		t.Fatalf("the transaction's push is missing: %v", m)
	}
	if m := c.pop("/api/v1/pop/queue/in"); m["error"] != "no_available_partition" {
		t.Fatalf("the transaction's ack is missing: %v", m)
	}
}

func TestRetainedBytes(t *testing.T) {
	b, url := startBroker(t, Options{ReportKVTimerBytes: true})
	c := &client{t: t, base: url, tenant: "eeeeeeee-0000-4000-8000-000000000005"}
	res := c.push(
		map[string]any{"queue": "q", "payload": "abc", "transactionId": "t1"},       // 5 bytes: "abc"
		map[string]any{"queue": "q", "payload": []int{1, 2}, "transactionId": "t2"}, // 5 bytes: [1,2]
	)
	b.SetKVTimerBytes("eeeeeeee-0000-4000-8000-000000000005", 100, 7)
	list := func() map[string]any {
		_, v := c.call("GET", "/api/v1/resources/queues?stats=cached", nil)
		return v.(map[string]any)
	}
	l := list()
	q := objects(t, l["queues"])[0]
	if q["retainedBytes"] != 10.0 || l["kvBytes"] != 100.0 || l["timerBytes"] != 7.0 {
		t.Fatalf("listing = %v", l)
	}
	// Completed messages stay retained; deleting one releases its bytes.
	c.pop("/api/v1/pop/queue/q?batch=10&autoAck=true")
	if q := objects(t, list()["queues"])[0]; q["retainedBytes"] != 10.0 {
		t.Fatalf("retainedBytes after consumption = %v", q["retainedBytes"])
	}
	c.call("DELETE", "/api/v1/messages/"+res[0]["partition_id"].(string)+"/t1", nil)
	if q := objects(t, list()["queues"])[0]; q["retainedBytes"] != 5.0 {
		t.Fatalf("retainedBytes after delete = %v", q["retainedBytes"])
	}
}

func TestRequestLog(t *testing.T) {
	b, url := startBroker(t, Options{RequestLogSize: 3})
	c := &client{t: t, base: url, tenant: "ffffffff-0000-4000-8000-000000000006",
		header: http.Header{"Authorization": {"Bearer cell-secret"}}}
	c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": 1}}})
	reqs := b.Requests()
	if len(reqs) != 1 {
		t.Fatalf("Requests() = %d entries, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/api/v1/push" || r.Tenant() != c.tenant ||
		r.Header.Get("Authorization") != "Bearer cell-secret" || !bytes.Contains(r.Body, []byte(`"queue":"q"`)) {
		t.Fatalf("logged request = %+v", r)
	}
	for i := 0; i < 4; i++ {
		c.call("GET", "/health?n="+string(rune('0'+i)), nil)
	}
	reqs = b.Requests()
	if len(reqs) != 3 || reqs[0].RawQuery != "n=1" || reqs[2].RawQuery != "n=3" {
		t.Fatalf("ring keeps %d entries %v, want the last 3 in order", len(reqs), reqs)
	}
	b.ResetRequests()
	if n := len(b.Requests()); n != 0 {
		t.Fatalf("after ResetRequests: %d entries", n)
	}
	big := strings.Repeat("x", maxLoggedBody+10)
	c.call("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "q", "payload": big}}})
	if r := b.Requests()[0]; len(r.Body) != maxLoggedBody || !r.BodyTruncated {
		t.Fatalf("large body logged as %d bytes, truncated=%v", len(r.Body), r.BodyTruncated)
	}
}

func TestPushModes(t *testing.T) {
	b, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	item := map[string]any{"queue": "q", "partition": "p", "payload": 1, "transactionId": "t1"}

	b.SetPushMode(PushBuffered)
	status, v := c.call("POST", "/api/v1/push", map[string]any{"items": []any{item}})
	want := []any{map[string]any{"status": "buffered", "queue": "q", "partition": "p", "transactionId": "t1"}}
	if status != 201 || !jsonEqual(v, want) {
		t.Fatalf("maintenance push = %d %v", status, v)
	}
	b.SetPushMode(PushFailed)
	status, v = c.call("POST", "/api/v1/push", map[string]any{"items": []any{item}})
	want = []any{map[string]any{"status": "failed", "queue": "q", "partition": "p", "error": "File buffer write failed"}}
	if status != 500 || !jsonEqual(v, want) {
		t.Fatalf("failed push = %d %v", status, v)
	}
	b.SetPushMode(PushQueued)
	b.SetPushHook(func(it PushItem) PushOutcome {
		if it.Index == 1 {
			return PushBufferedFailover
		}
		return PushQueued
	})
	status, v = c.call("POST", "/api/v1/push", map[string]any{"items": []any{
		map[string]any{"queue": "q", "payload": 2, "transactionId": "t2"},
		map[string]any{"queue": "q", "payload": 3, "transactionId": "t3"},
	}})
	res := objects(t, v)
	if status != 200 || res[0]["status"] != "queued" || !jsonEqual(res[1], map[string]any{"status": "buffered", "queue": "q"}) {
		t.Fatalf("hooked push = %d %v", status, v)
	}
	b.SetPushHook(nil)
	// Buffered messages are flushed at once; the failed one is not stored.
	msgs := messagesOf(t, c.pop("/api/v1/pop/queue/q/partition/p?batch=10"))
	if len(msgs) != 1 || msgs[0]["transactionId"] != "t1" {
		t.Fatalf("partition p holds %v, want the buffered t1 only", msgs)
	}
	msgs = messagesOf(t, c.pop("/api/v1/pop/queue/q/partition/Default?batch=10"))
	if len(msgs) != 2 {
		t.Fatalf("Default holds %v, want t2 and the buffered t3", msgs)
	}
}

func TestProtocolEdges(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"}, {"PUT", "/api/v1/push"}, {"GET", "/api/v1/push"}, {"GET", "/"},
		{"GET", "/api/v1/pop"}, {"GET", "/api/v1/resources/partitions"},
	} {
		status, h, body, err := c.do(context.Background(), tc.method, tc.path, nil)
		if err != nil || status != 404 || string(body) != notFoundBody || h.Get("Content-Type") != "" {
			t.Errorf("%s %s = %d %q content-type %q (%v)", tc.method, tc.path, status, body, h.Get("Content-Type"), err)
		}
	}
	status, h, body, err := c.do(context.Background(), "OPTIONS", "/anything/at/all", nil)
	if err != nil || status != 200 || len(body) != 0 || h.Get("Content-Type") != "" {
		t.Errorf("OPTIONS = %d %q content-type %q (%v)", status, body, h.Get("Content-Type"), err)
	}

	checks := []struct {
		path, body string
		status     int
		errText    string
	}{
		{"/api/v1/push", "", 400, "Empty request body"},
		{"/api/v1/push", "not json", 400, "Invalid JSON: "},
		{"/api/v1/push", `{"nope":1}`, 400, "items array is required"},
		{"/api/v1/push", `{"items":[{"payload":{}}]}`, 400, "Queue must be a string"},
		{"/api/v1/push", `{"items":[{"queue":"q","partition":7}]}`, 400, "Partition must be a string"},
		{"/api/v1/push", `{"items":[{"queue":"q","transactionId":9}]}`, 400, "TransactionId must be a string"},
		{"/api/v1/configure", `{"queue":42}`, 400, "queue is required"},
		{"/api/v1/configure", `{"queue":"q"}`, 200, "[json.exception.type_error.306] cannot use value() with null"},
		{"/api/v1/ack", `{"transactionId":"t"}`, 400, "partitionId is required to ensure message uniqueness"},
		// The broker checks transactionId first, and only that each is a
		// string (measured on 0.15.1).
		{"/api/v1/ack", `{}`, 400, "transactionId is required"},
		{"/api/v1/ack", `{"transactionId":7,"partitionId":"p"}`, 400, "transactionId is required"},
		{"/api/v1/ack", `{"transactionId":"t","partitionId":""}`, 200, `ERROR:  invalid input syntax for type uuid: ""`},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"partitionId":"p"}]}`, 400, "Each acknowledgment must have a valid transactionId string"},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t"}]}`, 400,
			"Each acknowledgment must have a valid partitionId string to ensure message uniqueness"},
		{"/api/v1/ack/batch", `{}`, 400, "acknowledgments array is required"},
		{"/api/v1/transaction", `{}`, 400, "operations array required"},
		{"/api/v1/transaction", `{"operations":[]}`, 400, "operations array cannot be empty"},
	}
	for _, tc := range checks {
		status, _, body, err := c.do(context.Background(), "POST", tc.path, tc.body)
		var v map[string]any
		_ = json.Unmarshal(body, &v)
		msg, _ := v["error"].(string)
		if err != nil || status != tc.status || !strings.HasPrefix(msg, tc.errText) {
			t.Errorf("POST %s %s = %d %s, want %d %q", tc.path, tc.body, status, body, tc.status, tc.errText)
		}
	}
	// configure without options answered an error, but created the queue.
	if _, v := c.call("GET", "/api/v1/resources/queues/q", nil); v.(map[string]any)["name"] != "q" {
		t.Errorf("configure without options did not create the queue: %v", v)
	}
	status, v := c.call("POST", "/api/v1/push", map[string]any{"items": []any{}})
	if status != 201 || !jsonEqual(v, []any{}) {
		t.Errorf("empty items = %d %v, want 201 []", status, v)
	}

	// An empty acknowledgments array is never answered.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, _, err := c.do(ctx, "POST", "/api/v1/ack/batch", `{"acknowledgments":[]}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("empty ack batch: err = %v, want no answer", err)
	}
}

func TestRequireTenantAndToken(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	_, url := startBroker(t, Options{RequireTenant: true, Token: "s3cret", Name: "cell-b"})
	anon := &client{t: t, base: url}
	status, v := anon.call("GET", "/health", nil)
	if status != 200 || v.(map[string]any)["shared_state"].(map[string]any)["server_id"] != "cell-b" {
		t.Fatalf("/health = %d %v", status, v)
	}
	if status, _ := anon.call("GET", "/api/v1/resources/queues", nil); status != 401 {
		t.Fatalf("no token: status %d, want 401", status)
	}
	authed := &client{t: t, base: url, header: http.Header{"Authorization": {"Bearer s3cret"}}}
	status, v = authed.call("GET", "/api/v1/resources/queues", nil)
	if status != 400 || v.(map[string]any)["error"] != "x-queen-tenant header is required" {
		t.Fatalf("no tenant: %d %v", status, v)
	}
	authed.tenant = "abababab-0000-4000-8000-000000000007"
	if status, _ := authed.call("GET", "/api/v1/resources/queues", nil); status != 200 {
		t.Fatalf("with tenant and token: status %d", status)
	}
}

func TestCloseReleasesParkedPops(t *testing.T) {
	b := New(Options{})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, base: url}
	done := make(chan struct{})
	go func() {
		_, _, _, _ = c.do(context.Background(), "GET", "/api/v1/pop/queue/q?wait=true&timeout=60000", nil)
		close(done)
	}()
	waitFor(t, func() bool { return b.Parked() == 1 }, "the pop to park")
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a parked pop hanging")
	}
	waitFor(t, func() bool { return b.Parked() == 0 }, "the parked counter to drop")
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// jsonEqual compares two values through their JSON encodings.
func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// TestSetTokens: the accepted tokens change while the broker runs, one or
// several at once, and none turns the check off.
func TestSetTokens(t *testing.T) {
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	b, url := startBroker(t, Options{Token: "old"})
	as := func(token string) int {
		c := &client{t: t, base: url, tenant: "abababab-0000-4000-8000-000000000008"}
		if token != "" {
			c.header = http.Header{"Authorization": {"Bearer " + token}}
		}
		status, _ := c.call("GET", "/api/v1/resources/queues", nil)
		return status
	}
	check := func(step string, want map[string]int) {
		t.Helper()
		for token, status := range want {
			if got := as(token); got != status {
				t.Errorf("%s: token %q answered %d, want %d", step, token, got, status)
			}
		}
	}
	check("start", map[string]int{"old": 200, "new": 401, "": 401})
	b.SetTokens("old", "new")
	check("both", map[string]int{"old": 200, "new": 200, "": 401})
	b.SetTokens("new")
	check("new only", map[string]int{"old": 401, "new": 200})
	b.SetTokens()
	check("none", map[string]int{"": 200, "old": 200})
}
