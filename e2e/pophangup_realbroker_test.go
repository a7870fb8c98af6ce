//go:build realbroker

package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestPopHangUpBilledAsTheRealBrokerDelivered is the red team's
// reproduction against the real broker 0.15.1: a consumer pops 200
// messages of 50 KB (a 10 MB answer) through the gateway and leaves right
// after the head or halfway through, with a reset or a plain close, with
// autoAck and with a lease. What the broker delivered is what it no
// longer hands out to the next pop; usage_minutes bills exactly that, and
// every pop is counted as a request in usage_minutes and request_minutes.
func TestPopHangUpBilledAsTheRealBrokerDelivered(t *testing.T) {
	g := startMeteredRealGateway(t, "pophangup-real", "20s")
	broker, cp, cl, key, port, host := g.broker, g.cp, g.cl, g.key, g.port, g.host

	var delivered int64
	pops := 0
	for _, sc := range []struct {
		after   string
		reset   bool
		autoAck bool
	}{
		{"head", true, true}, {"mid", true, true}, {"mid", false, true},
		{"head", true, false}, {"mid", true, false}, {"mid", false, false},
	} {
		name := fmt.Sprintf("%s-reset-%v-autoack-%v", sc.after, sc.reset, sc.autoAck)
		queue := fmt.Sprintf("pophangup-%d", pops)
		// The messages go to the broker straight, 20 at a time.
		for i := 0; i < popHangUpMessages; i += 20 {
			if status, body := broker.Do(t, "POST", "/api/v1/push", []byte(popHangUpPush(queue, 20, popHangUpPayload))); status != 201 && status != 200 {
				t.Fatalf("%s: seeding push: %d %.300s", name, status, body)
			}
		}
		if n := broker.CountMessages(t, queue); n != popHangUpMessages {
			t.Fatalf("%s: the broker holds %d messages, want %d", name, n, popHangUpMessages)
		}
		path := fmt.Sprintf("/api/v1/pop/queue/%s?batch=%d&autoAck=%v", queue, popHangUpMessages, sc.autoAck)
		h1PopHangUp(t, port, host, path, key, sc.after, sc.reset)
		pops++
		// What the broker delivered to the pop that hung up, it does not
		// hand out again (acknowledged, or leased for minutes).
		time.Sleep(500 * time.Millisecond)
		status, body := broker.Do(t, "GET", fmt.Sprintf("/api/v1/pop/queue/%s?batch=1000&autoAck=true", queue), nil)
		var rest struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if status == 200 {
			if err := json.Unmarshal(body, &rest); err != nil {
				t.Fatalf("%s: the broker's pop: %v %.300s", name, err, body)
			}
		}
		got := int64(popHangUpMessages - len(rest.Messages))
		if got == 0 {
			t.Fatalf("%s: the pop that hung up took no message from the broker: the test shows nothing", name)
		}
		delivered += got
		t.Logf("%s: the broker delivered %d messages", name, got)
	}
	time.Sleep(time.Second)
	g.stop(t)
	reqs, msgs, _ := cp.usageDetail(cl.id, "delivery")
	t.Logf("usage_minutes bills %d pops and %d deliveries; the broker delivered %d in %d pops", reqs, msgs, delivered, pops)
	if reqs != int64(pops) || msgs != delivered {
		t.Fatalf("usage_minutes bills %d pops and %d deliveries; the broker delivered %d in %d pops", reqs, msgs, delivered, pops)
	}
	// The queue listings before the pops were requests too.
	var pre int64
	if _, err := fmt.Sscan(cp.scalar(`SELECT coalesce(sum(reqs), 0)::text FROM queen_proxy.usage_minutes
		WHERE cluster_id = $1::uuid AND op_class <> 'delivery'`, cl.id), &pre); err != nil {
		t.Fatal(err)
	}
	if n := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, cl.id); n != fmt.Sprint(pre+int64(pops)) {
		t.Fatalf("request_minutes counts %s requests, want %d (%d pops)", n, pre+int64(pops), pops)
	}
}
