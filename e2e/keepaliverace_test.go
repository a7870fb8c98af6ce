package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// connServed counts the requests one cell connection has served.
type connServed struct{}

// TestKeepAliveRaceResendsIdentifiedPushes: a cell that closes a reused
// connection as a push arrives on it, before reading it (what a broker
// closing an idle connection does to a request that went out at that
// moment). A push whose every item carries a transactionId is sent again
// on a fresh connection: answered 200, stored once, billed once, nothing
// unanswered. A push without them cannot be sent again safely: it is
// answered 502 and stored nowhere, and reaches the cell once.
func TestKeepAliveRaceResendsIdentifiedPushes(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "race-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	var closedUnread atomic.Int64
	cell := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served := r.Context().Value(connServed{}).(*atomic.Int64)
		if served.Add(1) > 1 && r.URL.Path == "/api/v1/push" {
			// The request is taken off the wire (so that the gateway's
			// write of it completes, as it does into the kernel's buffers
			// when a broker closes an idle connection), never handled.
			_, _ = io.Copy(io.Discard, r.Body)
			closedUnread.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
			return
		}
		broker.ServeHTTP(w, r)
	}))
	cell.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connServed{}, new(atomic.Int64))
	}
	cell.Start()
	t.Cleanup(cell.Close)

	dbURL := pgtest.NewDatabase(t)
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("race-cell", cell.URL, "")
	tenant := cp.tenant("race")
	port := freePort(t)
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(
		[]byte(gatewayCaddyfile(port, dbURL, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), "")), nil)
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

	push := func(n int, identified bool) string {
		var b strings.Builder
		b.WriteString(`{"items":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			txn := ""
			if identified || i > 0 {
				txn = fmt.Sprintf(`,"transactionId":"race-%d-%d"`, time.Now().UnixNano(), i)
			}
			fmt.Fprintf(&b, `{"queue":"orders","payload":{"n":%d}%s}`, i, txn)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	type want struct {
		slug         string
		msgs, unansw int64
	}
	var wants []want
	for _, identified := range []bool{true, false} {
		slug := fmt.Sprintf("race-%v", identified)
		cl := cp.cluster(tenant, slug, cellID)
		_, key := cp.key(cl.id)
		host := fmt.Sprintf("http://%s.eu1.example.test:%d", slug, port)
		c := client(port)
		eventually(t, 30*time.Second, func() error {
			if r := do(t, c, "GET", host+"/api/v1/resources/queues", key, ""); r.status != 200 {
				return fmt.Errorf("queues: %d %s", r.status, r.body)
			}
			return nil
		})
		const pushes, items = 5, 3
		closedBefore := closedUnread.Load()
		answered := 0
		for i := range pushes {
			r := do(t, c, "POST", host+"/api/v1/push", key, push(items, identified))
			switch {
			case identified && (r.status != 200 || acceptedItems(r) != items):
				t.Fatalf("identified push %d: %d %s, want 200 with %d queued", i, r.status, r.body, items)
			case !identified && r.status == 200:
				answered++
			case !identified && r.status != 502:
				t.Fatalf("unidentified push %d: %d %s, want 200 or 502", i, r.status, r.body)
			}
			if identified {
				answered++
			}
		}
		closed := closedUnread.Load() - closedBefore
		stored := broker.StoredMessages(cl.brokerTenant)
		t.Logf("identified %v: the cell closed %d reused connections under a push; %d of %d pushes answered; it stored %d messages", identified, closed, answered, pushes, stored)
		if closed == 0 {
			t.Fatal("the cell closed no connection under a push: the test shows nothing")
		}
		if stored != int64(answered*items) {
			t.Fatalf("the cell stored %d messages, want %d (each answered push once)", stored, answered*items)
		}
		if identified {
			wants = append(wants, want{slug, int64(pushes * items), 0})
		} else {
			unanswered := int64((pushes - answered) * items)
			wants = append(wants, want{slug, int64(answered*items) + unanswered, unanswered})
		}
	}
	time.Sleep(time.Second)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, w := range wants {
		id := cp.scalar(`SELECT id::text FROM queen_proxy.clusters WHERE slug = $1`, w.slug)
		if _, msgs, unanswered := cp.usageDetail(id, "push"); msgs != w.msgs || unanswered != w.unansw {
			t.Errorf("%s: usage_minutes bills %d pushed messages (%d unanswered), want %d (%d)", w.slug, msgs, unanswered, w.msgs, w.unansw)
		}
	}
}
