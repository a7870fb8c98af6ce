package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// popHangUpMessages and popHangUpPayload make the red team's pop: 200
// messages of about 50 KB, a 10 MB answer.
const (
	popHangUpMessages = 200
	popHangUpPayload  = 50 << 10
)

// popHangUpPush is a push of n messages of size bytes of text each.
func popHangUpPush(queue string, n, size int) string {
	text := strings.Repeat("x", size)
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":%q,"payload":{"n":%d,"text":%q}}`, queue, i, text)
	}
	b.WriteString(`]}`)
	return b.String()
}

// h1PopHangUp pops over a fresh HTTP/1.1 connection and leaves: once the
// answer's status line came (after "head"), or once half of its body did
// ("mid"); with a TCP reset, or a plain close when reset is false.
func h1PopHangUp(t *testing.T, port int, host, path, key, after string, reset bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if reset {
			_ = conn.(*net.TCPConn).SetLinger(0)
		}
		_ = conn.Close()
	}()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", path, host, key); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReaderSize(conn, 4096)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("answer's first line %q, %v", line, err)
	}
	if after == "mid" {
		if _, err := io.CopyN(io.Discard, rd, popHangUpMessages*popHangUpPayload/2); err != nil {
			t.Fatalf("half of the answer: %v", err)
		}
	}
}

// h2PopHangUp pops over HTTP/2 and cancels the stream (RST_STREAM) once
// the answer's head came ("head") or half of its body ("mid").
func h2PopHangUp(t *testing.T, c *http.Client, url, key, after string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	if after == "mid" {
		if _, err := io.CopyN(io.Discard, resp.Body, popHangUpMessages*popHangUpPayload/2); err != nil {
			t.Fatalf("half of the answer: %v", err)
		}
	}
	cancel()
}

// TestPopHangUpIsBilledWhatTheBrokerDelivered: a consumer that cuts its
// pop's answer short (HTTP/1.1 close or reset, HTTP/2 RST_STREAM, right
// after the head or halfway through 10 MB), with autoAck or a lease, is
// billed every message the broker delivered, and its request is counted
// in usage_minutes and request_minutes; a pop whose answer the broker
// itself breaks off is billed the messages it had begun.
func TestPopHangUpIsBilledWhatTheBrokerDelivered(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "pophangup-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("pophangup-cell", broker.URL(), "")
	tenant := cp.tenant("pophangup")

	httpPort, httpsPort := freePort(t), freePort(t)
	storage := t.TempDir()
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(
		[]byte(hangupCaddyfile(httpPort, httpsPort, storage, dbURL, t.TempDir())), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = caddy.Stop()
		}
	})
	h2 := httpsClient(httpsPort, localCARoot(t, storage))
	pushBody := popHangUpPush("work", popHangUpMessages, popHangUpPayload)

	type scenario struct {
		name    string
		proto   string // h1 (reset), h1-close, h2
		after   string // head, mid; "" = the client stays (the broker cuts)
		autoAck bool
		cut     bool
	}
	var scenarios []scenario
	for _, autoAck := range []bool{true, false} {
		for _, proto := range []string{"h1", "h1-close", "h2"} {
			for _, after := range []string{"head", "mid"} {
				scenarios = append(scenarios, scenario{name: fmt.Sprintf("%s-%s-autoack-%v", proto, after, autoAck),
					proto: proto, after: after, autoAck: autoAck})
			}
		}
		scenarios = append(scenarios, scenario{name: fmt.Sprintf("broker-cuts-autoack-%v", autoAck), proto: "h1", autoAck: autoAck, cut: true})
	}
	want := map[string]int64{}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			cl := cp.cluster(tenant, sc.name, cellID)
			cp.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"max_msgs_per_sec": null, "msgs_burst": null}'
				WHERE id = $1::uuid`, cl.id)
			_, key := cp.key(cl.id)
			host := fmt.Sprintf("%s.eu1.example.test", cl.slug)
			// The messages go to the broker straight: only the pop is the
			// gateway's.
			req, _ := http.NewRequest("POST", broker.URL()+"/api/v1/push", strings.NewReader(pushBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Queen-Tenant", cl.brokerTenant)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := broker.StoredMessages(cl.brokerTenant); got != popHangUpMessages {
				t.Fatalf("the broker stored %d messages, want %d", got, popHangUpMessages)
			}
			path := fmt.Sprintf("/api/v1/pop/queue/work?batch=%d&autoAck=%v", popHangUpMessages, sc.autoAck)
			if sc.cut {
				broker.SetAnswerFault(fakebroker.AnswerFault{Path: "/api/v1/pop/queue/work", CutBody: true})
				defer broker.SetAnswerFault(fakebroker.AnswerFault{})
			}
			switch {
			case sc.cut:
				// The client stays: it gets what the gateway relayed, the
				// messages begun in the half the broker sent.
				r, err := client(httpPort).Do(mustRequest(t, "GET", fmt.Sprintf("http://%s:%d%s", host, httpPort, path), key))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(r.Body)
				_ = r.Body.Close()
				begun := int64(strings.Count(string(got), `"text":"`))
				if begun == 0 || begun >= popHangUpMessages {
					t.Fatalf("the client got %d bytes with %d messages: not an answer cut halfway", len(got), begun)
				}
				// The cut may fall in a message before its text began.
				want[sc.name] = begun
				want[sc.name+"+1"] = begun + 1
			case sc.proto == "h2":
				h2PopHangUp(t, h2, fmt.Sprintf("https://%s%s", host, path), key, sc.after)
				want[sc.name] = popHangUpMessages
			default:
				h1PopHangUp(t, httpPort, fmt.Sprintf("%s:%d", host, httpPort), path, key, sc.after, sc.proto == "h1")
				want[sc.name] = popHangUpMessages
			}
			// The gateway reads the answer to its end without its client.
			time.Sleep(300 * time.Millisecond)
		})
	}
	time.Sleep(time.Second)
	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}
	stopped = true
	for _, sc := range scenarios {
		id := cp.scalar(`SELECT id::text FROM queen_proxy.clusters WHERE slug = $1`, sc.name)
		reqs, msgs, _ := cp.usageDetail(id, "delivery")
		if w := want[sc.name]; reqs != 1 || (msgs != w && (!sc.cut || msgs != want[sc.name+"+1"])) {
			t.Errorf("%s: usage_minutes bills %d pop requests and %d deliveries, want 1 and %d", sc.name, reqs, msgs, w)
		}
		if n := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, id); n != "1" {
			t.Errorf("%s: request_minutes counts %s requests, want the pop's 1", sc.name, n)
		}
	}
}

func mustRequest(t *testing.T, method, url, key string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return req
}
