package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// hangupCaddyfile serves the gateway over plain HTTP/1.1 and over HTTPS
// (h2, certificates from Caddy's local CA on demand), with a short
// upstream timeout and a fast meter.
func hangupCaddyfile(httpPort, httpsPort int, storage, databaseURL, spool string) string {
	return fmt.Sprintf(`{
	admin off
	persist_config off
	skip_install_trust
	http_port %d
	https_port %d
	default_bind 127.0.0.1
	storage file_system %s
	log {
		level ERROR
	}
	on_demand_tls {
		permission queen
	}
	queen {
		database_url %s
		base_domain eu1.example.test
		meter_flush_interval 1s
		spool_dir %s
	}
}
http:// {
	queen_gateway {
		upstream_timeout 2s
	}
}
https:// {
	tls internal {
		on_demand
	}
	queen_gateway {
		upstream_timeout 2s
	}
}
`, httpPort, httpsPort, storage, databaseURL, spool)
}

// hangupPushBody is a push of n items to queue.
func hangupPushBody(queue string, n int) string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":%q,"payload":{"n":%d,"note":"an item with some text to make the answer long"}}`, queue, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// hangupTxnBody is a transaction pushing n items to queue.
func hangupTxnBody(queue string, n int) string {
	var b strings.Builder
	b.WriteString(`{"operations":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"push","items":[{"queue":%q,"payload":{"n":%d}}]}`, queue, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// h1Request is an HTTP/1.1 request as bytes.
func h1Request(host, path, key, body string) (head, payload string) {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, host, key, len(body)), body
}

// h1HangUp sends a request over a fresh TCP connection and closes it with
// a reset: after half the body (when), once the request reached the cell
// (forwarded returns), or once the first bytes of the answer came.
func h1HangUp(t *testing.T, port int, host, path, key, body, when string, forwarded func()) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	}()
	head, payload := h1Request(host, path, key, body)
	switch when {
	case "mid-body":
		if _, err := io.WriteString(conn, head+payload[:len(payload)/2]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	case "before-answer":
		if _, err := io.WriteString(conn, head+payload); err != nil {
			t.Fatal(err)
		}
		// A reset before the gateway read the body would discard it
		// unread (nothing forwarded, rightly): wait until it is at the cell.
		forwarded()
	case "mid-answer":
		if _, err := io.WriteString(conn, head+payload); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("answer's first line %q, %v", line, err)
		}
	default:
		t.Fatalf("unknown moment %q", when)
	}
}

// h2HangUp sends a request over HTTP/2 and cancels it, which sends
// RST_STREAM: after half the body, once the request reached the cell, or
// once the answer's head and some of its body came.
func h2HangUp(t *testing.T, c *http.Client, url, key, body, when string, forwarded func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	wrote := make(chan struct{})
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "POST", url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	got := make(chan *http.Response, 1)
	failed := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			failed <- err
			return
		}
		got <- resp
	}()
	if when == "mid-body" {
		if _, err := io.WriteString(pw, body[:len(body)/2]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
		return
	}
	go func() {
		_, _ = io.WriteString(pw, body)
		_ = pw.Close()
	}()
	switch when {
	case "before-answer":
		select {
		case <-wrote:
		case err := <-failed:
			t.Fatalf("h2 request failed before it was written: %v", err)
		}
		forwarded()
		cancel()
	case "mid-answer":
		select {
		case resp := <-got:
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
				t.Fatalf("answer %s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
			}
			if _, err := resp.Body.Read(make([]byte, 512)); err != nil {
				t.Fatalf("first bytes of the answer: %v", err)
			}
			cancel()
			resp.Body.Close()
		case err := <-failed:
			t.Fatalf("h2 request: %v", err)
		}
	default:
		t.Fatalf("unknown moment %q", when)
	}
}

// usageDetail is a cluster's usage_minutes for one op class.
func (cp *controlPlane) usageDetail(clusterID, op string) (reqs, msgs, unanswered int64) {
	cp.t.Helper()
	row := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text || ' ' || coalesce(sum(msgs), 0)::text || ' ' ||
		coalesce(sum(unanswered_msgs), 0)::text
		FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid AND op_class = $2`, clusterID, op)
	if _, err := fmt.Sscan(row, &reqs, &msgs, &unanswered); err != nil {
		cp.t.Fatal(err)
	}
	return reqs, msgs, unanswered
}

// TestHangUpIsBilledFromWhatTheBrokerStored: a client that leaves (HTTP/1.1 connection reset, HTTP/2 RST_STREAM) at
// several moments, against a broker whose answer is slow, cut short or
// never comes. For every case usage_minutes bills exactly what the broker
// stored (and says which messages it billed without an answer), and the
// monthly quota counts them; a request whose body never arrived reached
// nothing and is billed nothing.
func TestHangUpIsBilledFromWhatTheBrokerStored(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "hangup-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("hangup-cell", broker.URL(), "")
	// A cell nobody listens on: the dial fails, nothing reaches a broker.
	deadCell := cp.cell("hangup-dead", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), "")
	tenant := cp.tenant("hangup")

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

	type scenario struct {
		name      string
		proto     string // "h1" or "h2"
		path      string
		items     int
		when      string // when the client leaves; "" = it waits for the answer
		fault     fakebroker.AnswerFault
		dead      bool  // the cluster's cell cannot be reached
		billed    int64 // msgs expected
		unanswerd int64 // of which unanswered
		op        string
	}
	slow := fakebroker.AnswerFault{HeadDelay: 500 * time.Millisecond}
	stall := fakebroker.AnswerFault{BodyDelay: 500 * time.Millisecond}
	const n = 1000
	scenarios := []scenario{
		{name: "h1-mid-body", proto: "h1", path: "/api/v1/push", items: n, when: "mid-body", fault: slow},
		{name: "h1-before-answer", proto: "h1", path: "/api/v1/push", items: n, when: "before-answer", fault: slow, billed: n},
		{name: "h1-mid-answer", proto: "h1", path: "/api/v1/push", items: n, when: "mid-answer", fault: stall, billed: n},
		{name: "h1-txn-before-answer", proto: "h1", path: "/api/v1/transaction", items: 20, when: "before-answer", fault: slow, billed: 20, op: "txn"},
		{name: "h2-mid-body", proto: "h2", path: "/api/v1/push", items: n, when: "mid-body", fault: slow},
		{name: "h2-before-answer", proto: "h2", path: "/api/v1/push", items: n, when: "before-answer", fault: slow, billed: n},
		{name: "h2-mid-answer", proto: "h2", path: "/api/v1/push", items: n, when: "mid-answer", fault: stall, billed: n},
		// No whole answer at all: billed as unanswered whether or not the
		// client stayed.
		{name: "h1-reset", proto: "h1", path: "/api/v1/push", items: 10, fault: fakebroker.AnswerFault{Reset: true}, billed: 10, unanswerd: 10},
		{name: "h1-cut-answer", proto: "h1", path: "/api/v1/push", items: n, fault: fakebroker.AnswerFault{CutBody: true}, billed: n, unanswerd: n},
		{name: "h2-reset-gone", proto: "h2", path: "/api/v1/push", items: 10, when: "before-answer",
			fault: fakebroker.AnswerFault{HeadDelay: 300 * time.Millisecond, Reset: true}, billed: 10, unanswerd: 10},
		{name: "h1-timeout", proto: "h1", path: "/api/v1/push", items: 10, fault: fakebroker.AnswerFault{HeadDelay: 3 * time.Second}, billed: 10, unanswerd: 10},
		{name: "h1-dial-fails", proto: "h1", path: "/api/v1/push", items: 10, dead: true},
	}
	h2 := httpsClient(httpsPort, localCARoot(t, storage))
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			cell := cellID
			if sc.dead {
				cell = deadCell
			}
			cl := cp.cluster(tenant, sc.name, cell)
			// Pushes of 1,000 items, one after the other: no message bucket.
			cp.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"max_msgs_per_sec": null, "msgs_burst": null}'
				WHERE id = $1::uuid`, cl.id)
			_, key := cp.key(cl.id)
			host := fmt.Sprintf("%s.eu1.example.test", cl.slug)
			body := hangupPushBody("orders", sc.items)
			if sc.path == "/api/v1/transaction" {
				body = hangupTxnBody("orders", sc.items)
			}
			// The fault applies to the scenario's route only: the cell's
			// isolation probes (three in a row for each new cluster on it)
			// must not wait on it.
			fault := sc.fault
			if fault != (fakebroker.AnswerFault{}) {
				fault.Path = sc.path
			}
			broker.SetAnswerFault(fault)
			defer broker.SetAnswerFault(fakebroker.AnswerFault{})
			before := len(forwarded(broker))
			reachedCell := func() {
				t.Helper()
				eventually(t, 10*time.Second, func() error {
					if len(forwarded(broker)) == before {
						return errors.New("the request has not reached the cell")
					}
					return nil
				})
			}
			switch {
			case sc.proto == "h1" && sc.when != "":
				h1HangUp(t, httpPort, fmt.Sprintf("%s:%d", host, httpPort), sc.path, key, body, sc.when, reachedCell)
			case sc.proto == "h1":
				req, err := http.NewRequest("POST", fmt.Sprintf("http://%s:%d%s", host, httpPort, sc.path), strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client(httpPort).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				r := readResponse(resp)
				if r.status < 500 && !sc.fault.CutBody {
					t.Fatalf("answer %d %s, want the gateway's 5xx", r.status, r.body)
				}
			default:
				h2HangUp(t, h2, fmt.Sprintf("https://%s%s", host, sc.path), key, body, sc.when, reachedCell)
			}
			// The gateway carries on without the client: wait for the
			// broker's side of the exchange to end.
			wait := sc.fault.HeadDelay + sc.fault.BodyDelay + 500*time.Millisecond
			time.Sleep(wait)
			if got := broker.StoredMessages(cl.brokerTenant); got != sc.billed {
				t.Fatalf("the broker stored %d messages, want %d", got, sc.billed)
			}
			if sc.when == "mid-body" {
				if reached := len(forwarded(broker)) - before; reached != 0 {
					t.Fatalf("a body that never arrived reached the cell (%d requests)", reached)
				}
			}
		})
	}
	time.Sleep(time.Second)              // the timeout case's answer, still on its way
	if err := caddy.Stop(); err != nil { // drains the open minute
		t.Fatal(err)
	}
	stopped = true

	monthStart := time.Now().UTC().Format("2006-01") + "-01"
	for _, sc := range scenarios {
		id := cp.scalar(`SELECT id::text FROM queen_proxy.clusters WHERE slug = $1`, sc.name)
		op := sc.op
		if op == "" {
			op = "push"
		}
		_, msgs, unanswered := cp.usageDetail(id, op)
		if msgs != sc.billed || unanswered != sc.unanswerd {
			t.Errorf("%s: billed %d messages (%d unanswered), want %d (%d unanswered)", sc.name, msgs, unanswered, sc.billed, sc.unanswerd)
		}
		if q := cp.scalar(`SELECT queen_proxy.cluster_month_billable_msgs($1::uuid, $2::date)::text`, id, monthStart); q != fmt.Sprint(sc.billed) {
			t.Errorf("%s: the monthly quota counts %s messages, want %d", sc.name, q, sc.billed)
		}
	}
}
