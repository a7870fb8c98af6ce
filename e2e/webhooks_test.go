package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/pgtest"
)

// webhookRequest is one request the receiver took.
type webhookRequest struct {
	id, body string
	verified bool
}

// A gateway killed while the receiver holds its attempt open: no event is
// lost, and the only duplicate is that event again, with the same
// webhook-id and the same body, delivered by the next gateway.
func TestWebhookGatewayKilledMidDelivery(t *testing.T) {
	bin := caddyBinary(t)
	cp := newControlPlane(t, pgtest.URL(t))

	var (
		mu       sync.Mutex
		requests []webhookRequest
		held     = make(chan struct{}, 1)
		release  = make(chan struct{})
		holdOnce sync.Once
	)
	var secret string
	recv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests = append(requests, webhookRequest{id: r.Header.Get("webhook-id"), body: string(body),
			verified: standardWebhookVerifies(secret, r.Header, body)})
		mu.Unlock()
		hold := false
		holdOnce.Do(func() { hold = true })
		if hold {
			held <- struct{}{}
			<-release // the gateway dies meanwhile
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = recv.Serve(l) }()
	t.Cleanup(func() { _ = recv.Close() })
	defer close(release)

	ep, err := controlplane.AddWebhook(context.Background(), cp.pool, controlplane.NewWebhook{Name: "signup", URL: "http://" + l.Addr().String() + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()
	var events []string
	for i := range 5 {
		events = append(events, cp.scalar(`SELECT queen_proxy.emit_outbox('cell_removed', jsonb_build_object('n', $1::int))::text`, i))
	}

	home := t.TempDir()
	config := filepath.Join(home, "Caddyfile")
	webhooks := "webhooks {\n\t\t\tallow_loopback\n\t\t\tpoll_interval 100ms\n\t\t\tretry_base 200ms\n\t\t}\n\t\tspool_dir " + filepath.Join(home, "spool")
	if err := os.WriteFile(config, []byte(gatewayCaddyfile(freePort(t), pgtest.URL(t), webhooks, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	first := startGatewayProcess(t, bin, config, home)
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the first gateway made no attempt within 60s")
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.webhook_attempts`); n != "0" {
		t.Fatalf("%s attempts recorded before the kill, want 0 (the attempt died with its transaction)", n)
	}

	second := startGatewayProcess(t, bin, config, home)
	eventually(t, 60*time.Second, func() error {
		if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.webhook_deliveries WHERE delivered_at IS NULL`); n != "0" {
			return fmt.Errorf("%s deliveries pending", n)
		}
		return nil
	})
	second.signal(t, syscall.SIGTERM)

	mu.Lock()
	got := append([]webhookRequest(nil), requests...)
	mu.Unlock()
	var ids []string
	bodies := map[string]string{}
	for _, r := range got {
		ids = append(ids, r.id)
		if !r.verified {
			t.Errorf("request for %s does not verify", r.id)
		}
		if b, seen := bodies[r.id]; seen && b != r.body {
			t.Errorf("event %s sent twice with different bodies:\n%s\n%s", r.id, b, r.body)
		}
		bodies[r.id] = r.body
	}
	want := append([]string{events[0]}, events...)
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("the receiver saw %v, want the first event twice (the killed attempt and its retry), then the rest in order: %v", ids, want)
	}
	t.Logf("killed mid-delivery: %d events, %d requests, one duplicate with the same webhook-id", len(events), len(got))
}

// standardWebhookVerifies checks a delivery from the specification's text:
// HMAC-SHA256 under the base64-decoded secret after "whsec_", over
// "<id>.<timestamp>.<body>", base64, equal to one "v1," entry.
func standardWebhookVerifies(secret string, h http.Header, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || secret == "" {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(body)))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}
