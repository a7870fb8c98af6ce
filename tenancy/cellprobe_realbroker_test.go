//go:build realbroker

package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queengate/queengate/internal/realbroker"
)

// TestProbeRealBrokerIsUnscoped: the public broker 0.15.1 has no tenancy,
// and the probe says so, leaving no queue behind.
func TestProbeRealBrokerIsUnscoped(t *testing.T) {
	b := realbroker.Start(t)
	for i := 0; i < 3; i++ {
		got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{ID: "c", Slug: "real", BaseURL: b.URL}, "")
		if err != nil || got != ScopingUnscoped {
			t.Fatalf("probe %d of the real broker: %q (%v), want unscoped", i, got, err)
		}
	}
	pool := b.Pool(t)
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.queues WHERE name LIKE $1`, strings.ReplaceAll(ProbeQueuePrefix, "-", "_")+"%").Scan(&left); err != nil {
		t.Fatalf("read the broker's queues: %v", err)
	}
	if left != 0 {
		t.Fatalf("%d probe queues left on the real broker", left)
	}
}

// TestProbeRealBrokerDeletionAtTheWorstMoment is the attack on the probe,
// against the real broker: right after the writer's first read, someone sharing the
// namespace deletes the probe queue. The reader is then told "Queue not
// found", and the old probe said scoped; now the writer's second read
// shows the queue gone, and the probe is undecided.
func TestProbeRealBrokerDeletionAtTheWorstMoment(t *testing.T) {
	b := realbroker.Start(t)
	target, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(w, r)
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/resources/queues/"+ProbeQueuePrefix) && reads.Add(1) == 1 {
			req, _ := http.NewRequest(http.MethodDelete, b.URL+r.URL.Path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("strike: %v", err)
				return
			}
			resp.Body.Close()
		}
	}))
	defer srv.Close()
	got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{ID: "c", Slug: "real", BaseURL: srv.URL}, "")
	if got == ScopingScoped {
		t.Fatal("a deletion at the worst moment made the real, unscoped broker look scoped")
	}
	if got != ScopingUnknown || err == nil || !strings.Contains(err.Error(), "changed between") {
		t.Fatalf("verdict %q (%v), want unknown: the queue changed between the reads", got, err)
	}
	if reads.Load() < 3 {
		t.Fatalf("the probe read its queue %d times, want 3", reads.Load())
	}
}
