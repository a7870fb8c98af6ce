package webhook_test

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/webhook"
)

// Every delivery verifies with an implementation of the specification
// written here, carries the event's id, type and data, and comes in the
// order the events were recorded; during a secret rotation's overlap each
// delivery verifies with either secret, after it only with the new one.
func TestDeliveriesVerifyWithAnIndependentImplementation(t *testing.T) {
	pool := fresh(t)
	rcv := newReceiver(t, nil)
	ep, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "billing", URL: rcv.url})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, emit(t, pool, "cell_removed", map[string]any{"n": i}))
	}
	run(t, pool, webhook.Config{})
	eventually(t, 30*time.Second, "three deliveries", func() bool { return len(rcv.accepted()) >= 3 })
	got := rcv.accepted()
	for i, g := range got {
		if err := verify(ep.Secret, g.Header, g.Body); err != nil {
			t.Errorf("delivery %d does not verify: %v", i, err)
		}
		if g.ID != ids[i] || g.Type != "cell_removed" || g.Data["n"] != float64(i) {
			t.Errorf("delivery %d: id %s type %s data %v, want id %s, cell_removed, n %d", i, g.ID, g.Type, g.Data, ids[i], i)
		}
		if ct := g.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("delivery %d: content type %q", i, ct)
		}
	}
	// The check can fail: a changed body, another secret.
	other, _ := webhook.NewSecret()
	if verify(ep.Secret, got[0].Header, append([]byte(nil), strings.Replace(string(got[0].Body), "0", "1", 1)...)) == nil ||
		verify(other, got[0].Header, got[0].Body) == nil {
		t.Fatal("the verifier accepts a changed body or another secret")
	}

	rotated, err := controlplane.RotateWebhookSecret(ctxT(t), pool, "billing", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.PreviousSecretUntil == nil || rotated.Secret == ep.Secret {
		t.Fatalf("rotation: %+v", rotated)
	}
	overlapID := emit(t, pool, "cell_removed", map[string]any{"n": 3})
	eventually(t, 30*time.Second, "the delivery during the overlap", func() bool { return len(rcv.accepted()) >= 4 })
	g := rcv.accepted()[3]
	if g.ID != overlapID || verify(ep.Secret, g.Header, g.Body) != nil || verify(rotated.Secret, g.Header, g.Body) != nil {
		t.Fatalf("during the overlap, %s signed %q: want it to verify with the old and the new secret", g.ID, g.Header.Get("webhook-signature"))
	}

	last, err := controlplane.RotateWebhookSecret(ctxT(t), pool, "billing", 0)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, pool, "cell_removed", map[string]any{"n": 4})
	eventually(t, 30*time.Second, "the delivery after the rotation", func() bool { return len(rcv.accepted()) >= 5 })
	g = rcv.accepted()[4]
	if verify(last.Secret, g.Header, g.Body) != nil || verify(rotated.Secret, g.Header, g.Body) == nil {
		t.Fatalf("after a rotation without overlap, signed %q: want only the newest secret to verify", g.Header.Get("webhook-signature"))
	}
}

// A receiver that is down (nothing listens), then answers 503, then 200:
// the events arrive in order, the second never before the first was
// taken, every attempt is recorded with its outcome, and the endpoint is
// healthy again.
func TestReceiverDownForAWhileThenAnswers(t *testing.T) {
	pool := fresh(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // down: connections are refused
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "ops", URL: "http://" + addr + "/hook"}); err != nil {
		t.Fatal(err)
	}
	first := emit(t, pool, "cluster_deleted", map[string]any{"n": 1})
	second := emit(t, pool, "cluster_deleted", map[string]any{"n": 2})
	run(t, pool, webhook.Config{RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	attempts := func() int {
		return scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.webhook_attempts`)
	}
	eventually(t, 30*time.Second, "three refused attempts", func() bool { return attempts() >= 3 })
	if s := scalar[*time.Time](t, pool, `SELECT failing_since FROM queen_proxy.webhook_endpoints`); s == nil {
		t.Fatal("failing endpoint has no failing_since")
	}
	// Up, with two 503s first.
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{answer: func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	rcv.serve(t, l2)
	eventually(t, 30*time.Second, "both events delivered and recorded", func() bool {
		return len(rcv.accepted()) >= 2 &&
			scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.webhook_deliveries WHERE delivered_at IS NULL`) == 0
	})
	all := rcv.all()
	var order []string
	for _, g := range all {
		order = append(order, g.ID)
	}
	if len(all) != 4 || all[0].ID != first || all[1].ID != first || all[2].ID != first || all[3].ID != second {
		t.Fatalf("requests in order %v, want the first event three times (503, 503, 200), then the second (%s, %s)", order, first, second)
	}
	type row struct {
		status *int
		err    *string
		ms     int
	}
	rows, err := pool.Query(ctxT(t), `SELECT status, error, latency_ms FROM queen_proxy.webhook_attempts ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.status, &r.err, &r.ms); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, r)
	}
	refused, unavailable, ok := 0, 0, 0
	for _, r := range recorded {
		switch {
		case r.status == nil && r.err != nil && strings.Contains(*r.err, "refused"):
			refused++
		case r.status != nil && *r.status == 503 && r.err != nil:
			unavailable++
		case r.status != nil && *r.status == 200 && r.err == nil:
			ok++
		default:
			t.Errorf("attempt recorded as status %v error %v", r.status, r.err)
		}
		if r.ms < 0 {
			t.Errorf("latency %d ms", r.ms)
		}
	}
	if refused < 3 || unavailable != 2 || ok != 2 {
		t.Fatalf("recorded %d refused, %d 503, %d delivered attempts; want at least 3, 2, 2", refused, unavailable, ok)
	}
	if s := scalar[*time.Time](t, pool, `SELECT failing_since FROM queen_proxy.webhook_endpoints`); s != nil {
		t.Fatalf("healthy endpoint still failing since %v", s)
	}
	as, err := controlplane.WebhookAttempts(ctxT(t), pool, "ops", 100)
	if err != nil || len(as) != len(recorded) || !as[0].Delivered || as[0].EventID != second {
		t.Fatalf("webhook attempts: %d rows (want %d), newest %+v, %v", len(as), len(recorded), as[0], err)
	}
}

// An endpoint that fails for longer than disable_after is disabled, and
// the other endpoints are told (webhook_endpoint_disabled); re-enabled, it
// gets what queued meanwhile, in order.
func TestLongFailureDisablesTheEndpoint(t *testing.T) {
	pool := fresh(t)
	var healthy atomic.Bool
	broken := newReceiver(t, func(int) int {
		if healthy.Load() {
			return http.StatusNoContent
		}
		return http.StatusInternalServerError
	})
	audit := newReceiver(t, nil)
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "broken", URL: broken.url}); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "audit", URL: audit.url,
		Events: []string{"webhook_endpoint_disabled"}}); err != nil {
		t.Fatal(err)
	}
	first := emit(t, pool, "cell_removed", map[string]any{"n": 1})
	run(t, pool, webhook.Config{RetryBase: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond, DisableAfter: 500 * time.Millisecond})
	eventually(t, 30*time.Second, "the audit endpoint hears of the disabling", func() bool { return len(audit.accepted()) >= 1 })
	g := audit.accepted()[0]
	if g.Type != "webhook_endpoint_disabled" || g.Data["endpoint_name"] != "broken" || !strings.Contains(g.Data["reason"].(string), "500") {
		t.Fatalf("audit got %s %v", g.Type, g.Data)
	}
	ws, err := controlplane.ListWebhooks(ctxT(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	if ws[1].Name != "broken" || ws[1].Status != "disabled" || ws[1].Pending != 1 {
		t.Fatalf("broken endpoint %+v", ws[1])
	}
	second := emit(t, pool, "cell_removed", map[string]any{"n": 2})
	n := len(broken.all())
	time.Sleep(300 * time.Millisecond)
	if len(broken.all()) != n {
		t.Fatal("a disabled endpoint was called")
	}
	for _, r := range broken.all() {
		if r.Type == "webhook_endpoint_disabled" {
			t.Fatal("an endpoint was sent its own disabling")
		}
	}
	healthy.Store(true)
	on := true
	if _, err := controlplane.UpdateWebhook(ctxT(t), pool, "broken", controlplane.WebhookUpdate{Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the queued events after re-enabling", func() bool { return len(broken.accepted()) >= 2 })
	if a := broken.accepted(); a[0].ID != first || a[1].ID != second {
		t.Fatalf("after re-enabling got %s, %s; want %s, %s", a[0].ID, a[1].ID, first, second)
	}
}

// Two gateways deliver to one endpoint: never two attempts at once, every
// event once (the receiver always answers), in the order recorded.
func TestOneGatewayAtATimePerEndpoint(t *testing.T) {
	pool := fresh(t)
	rcv := newReceiver(t, func(int) int { time.Sleep(5 * time.Millisecond); return http.StatusOK })
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "one", URL: rcv.url}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 40 {
		ids = append(ids, emit(t, pool, "cell_removed", map[string]any{"n": i}))
	}
	run(t, pool, webhook.Config{Gateway: "a", Workers: 4})
	run(t, pool, webhook.Config{Gateway: "b", Workers: 4})
	eventually(t, 60*time.Second, "forty deliveries", func() bool { return len(rcv.all()) >= 40 })
	time.Sleep(200 * time.Millisecond)
	got := rcv.all()
	if len(got) != 40 {
		t.Fatalf("%d requests for 40 events", len(got))
	}
	for i, g := range got {
		if g.ID != ids[i] {
			t.Fatalf("request %d is %s, want %s", i, g.ID, ids[i])
		}
	}
	if m := rcv.maxIn.Load(); m != 1 {
		t.Fatalf("%d attempts at once to one endpoint", m)
	}
	gateways := scalar[int](t, pool, `SELECT count(DISTINCT gateway)::int FROM queen_proxy.webhook_attempts`)
	t.Logf("40 events delivered by %d gateway(s), one attempt at a time", gateways)
}

// Replay queues recorded events again with their original ids; a filter
// takes only its kinds.
func TestReplayAndFilters(t *testing.T) {
	pool := fresh(t)
	rcv := newReceiver(t, nil)
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "keys", URL: rcv.url,
		Events: []string{"cluster_deleted"}}); err != nil {
		t.Fatal(err)
	}
	emit(t, pool, "cell_removed", map[string]any{})
	kept := emit(t, pool, "cluster_deleted", map[string]any{})
	run(t, pool, webhook.Config{})
	eventually(t, 30*time.Second, "the filtered delivery", func() bool { return len(rcv.accepted()) >= 1 })
	n, err := controlplane.ReplayWebhook(ctxT(t), pool, "keys", controlplane.WebhookReplay{EventID: kept})
	if err != nil || n != 1 {
		t.Fatalf("replay one: %d, %v", n, err)
	}
	since := time.Now().Add(-time.Hour)
	n, err = controlplane.ReplayWebhook(ctxT(t), pool, "keys", controlplane.WebhookReplay{Since: &since})
	if err != nil || n != 1 {
		t.Fatalf("replay since: %d, %v (want 1: the filter takes cluster_deleted only)", n, err)
	}
	eventually(t, 30*time.Second, "the replays", func() bool { return len(rcv.accepted()) >= 3 })
	for _, g := range rcv.all() {
		if g.ID != kept || g.Type != "cluster_deleted" {
			t.Fatalf("got %s %s, want only %s", g.ID, g.Type, kept)
		}
	}
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "bad", URL: rcv.url,
		Events: []string{"key_made"}}); controlplane.KindOf(err) != controlplane.Invalid {
		t.Fatalf("unknown event kind: %v", err)
	}
	if _, err := controlplane.AddWebhook(ctxT(t), pool, controlplane.NewWebhook{Name: "keys", URL: rcv.url}); controlplane.KindOf(err) != controlplane.Taken {
		t.Fatalf("name taken: %v", err)
	}
}
