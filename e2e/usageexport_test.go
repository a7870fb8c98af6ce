package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/usageexport"
)

// billingReceiver deduplicates CloudEvents by id, as OpenMeter does.
type billingReceiver struct {
	mu       sync.Mutex
	byID     map[string]int64 // id -> msgs
	repeats  int
	requests int
	outage   atomic.Bool
	loseAck  atomic.Bool // take the next batch but answer 502
}

func (b *billingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if b.outage.Load() || r.Header.Get("Content-Type") != usageexport.ContentType {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var events []usageexport.Event
	if err := json.Unmarshal(body, &events); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.requests++
	for _, e := range events {
		if _, seen := b.byID[e.ID]; seen {
			b.repeats++
			continue
		}
		b.byID[e.ID] = e.Data.Msgs
	}
	b.mu.Unlock()
	if b.loseAck.CompareAndSwap(true, false) {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (b *billingReceiver) msgs() (sum int64, events int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.byID {
		sum += m
	}
	return sum, len(b.byID)
}

// Usage pushed through a gateway that is SIGKILLed mid-load, to a billing
// receiver that is down meanwhile and then loses one acknowledgement: the
// events it took, deduplicated by id and summed, equal usage_minutes.
func TestUsageExportSurvivesSIGKILLAndReceiverOutage(t *testing.T) {
	bin := caddyBinary(t)
	var stored atomic.Int64
	broker := startBroker(t, fakebroker.Options{Name: "export-cell"})
	broker.SetPushHook(func(fakebroker.PushItem) fakebroker.PushOutcome {
		stored.Add(1)
		return fakebroker.PushQueued
	})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("export-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("bill"), "bill-a", cell)
	_, key := cp.key(cl.id)
	// The receiver was configured an hour ago: all of this test's usage is
	// after its start.
	cp.exec(`INSERT INTO queen_proxy.usage_export_sinks (sink, start_at) VALUES ('billing', now() - interval '1 hour')`)

	rcv := &billingReceiver{byID: map[string]int64{}}
	rcv.outage.Store(true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	port := freePort(t)
	home := t.TempDir()
	config := filepath.Join(home, "Caddyfile")
	app := "spool_dir " + filepath.Join(home, "spool") + "\n\t\tmeter_flush_interval 1s\n\t\tusage_export {\n\t\t\turl http://" +
		l.Addr().String() + "/api/v1/events\n\t\t\tsink billing\n\t\t\tinterval 500ms\n\t\t\tsettle 1s\n\t\t\tbatch 5\n\t\t\tallow_loopback\n\t\t}"
	if err := os.WriteFile(config, []byte(gatewayCaddyfile(port, pgtest.URL(t), app, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", cl.slug, port)
	c := client(port)
	serving := func() {
		t.Helper()
		eventually(t, 60*time.Second, func() error {
			r, err := c.Get(url)
			if err != nil {
				return err
			}
			r.Body.Close()
			if r.StatusCode == http.StatusMisdirectedRequest || r.StatusCode >= 500 {
				return fmt.Errorf("status %d", r.StatusCode)
			}
			return nil
		})
	}
	booked := func() int64 {
		n, _ := strconv.ParseInt(cp.scalar(`SELECT coalesce(sum(msgs), 0)::text FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid`, cl.id), 10, 64)
		return n
	}

	first := startGatewayProcess(t, bin, config, home)
	serving()
	load := startPushLoad(c, []string{url}, []string{key}, 2, 20*time.Millisecond)
	// Long enough for a flush or two into minutes that may close before
	// the kill, while the receiver is down.
	time.Sleep(4 * time.Second)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil

	second := startGatewayProcess(t, bin, config, home)
	serving()
	time.Sleep(2 * time.Second)
	rcv.loseAck.Store(true)
	rcv.outage.Store(false)
	time.Sleep(2 * time.Second)
	load.halt()
	stopped := time.Now()

	// Every minute of usage closes, is written by the meter (every second)
	// and exported (settle 1s): a minute after the load stopped at most.
	closedAt := stopped.Truncate(time.Minute).Add(time.Minute + 4*time.Second)
	time.Sleep(time.Until(closedAt))
	eventually(t, 90*time.Second, func() error {
		got, events := rcv.msgs()
		want := booked()
		open := cp.scalar(`SELECT count(*)::text FROM queen_proxy.usage_minutes
			WHERE cluster_id = $1::uuid AND minute >= date_trunc('minute', now() - interval '1 second')`, cl.id)
		if got != want || open != "0" || want == 0 {
			return fmt.Errorf("receiver has %d msgs in %d events, usage_minutes %d (%s rows in open minutes)", got, events, want, open)
		}
		return nil
	})
	second.signal(t, syscall.SIGTERM)
	got, events := rcv.msgs()
	if rcv.repeats == 0 {
		t.Fatal("the batch whose acknowledgement was lost was not sent again")
	}
	if got != booked() {
		t.Fatalf("after the stop: receiver %d msgs, usage_minutes %d", got, booked())
	}
	t.Logf("exported %d msgs in %d events (%d requests, %d repeated events dropped by id); usage_minutes %d; broker stored %d",
		got, events, rcv.requests, rcv.repeats, booked(), stored.Load())
}
