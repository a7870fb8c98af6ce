package fakebroker

import "testing"

// TestBenchmarkOptions covers the options the load benchmark runs the fake
// with: no request log, and completed messages dropped at once.
func TestBenchmarkOptions(t *testing.T) {
	b, url := startBroker(t, Options{NoRequestLog: true, DiscardCompleted: true})
	c := &client{t: t, base: url, tenant: "eeeeeeee-0000-4000-8000-000000000009"}
	c.push(
		map[string]any{"queue": "q", "payload": "abc"},
		map[string]any{"queue": "q", "payload": "de"},
	)
	retained := func() any {
		_, v := c.call("GET", "/api/v1/resources/queues", nil)
		return objects(t, v.(map[string]any)["queues"])[0]["retainedBytes"]
	}
	if got := messagesOf(t, c.pop("/api/v1/pop/queue/q?batch=1&autoAck=true")); len(got) != 1 || got[0]["data"] != "abc" {
		t.Fatalf("first pop: %v", got)
	}
	if r := retained(); r != 4.0 { // "de" as JSON text
		t.Fatalf("retainedBytes after an autoAck pop = %v, want only the message left", r)
	}
	// A leased (not autoAck) delivery is kept until it is acknowledged.
	if got := messagesOf(t, c.pop("/api/v1/pop/queue/q?batch=1")); len(got) != 1 || got[0]["data"] != "de" {
		t.Fatalf("second pop: %v", got)
	}
	if r := retained(); r != 4.0 {
		t.Fatalf("retainedBytes after a leased pop = %v", r)
	}
	if n := len(b.Requests()); n != 0 {
		t.Fatalf("%d requests logged with NoRequestLog", n)
	}
}
