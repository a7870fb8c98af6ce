package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestRateLimitsAcrossClustersAndReload is limits-meter.md §7.1 item 15 and
// the §7.2 ratelimit phase: a throttled cluster gets 429 rate_limited with
// Retry-After while another cluster on the same cell never sees one, the
// RateLimit headers tell clients where they stand, and a reload during a
// burst does not refill the bucket.
func TestRateLimitsAcrossClustersAndReload(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "rl-cell", Tenancy: fakebroker.TenancyRust})
	db := pgtest.NewDatabase(t) // its own: the slugs are fixed, and -count=N runs it again
	cp := newControlPlane(t, db)
	cell := cp.cell("rl-cell", broker.URL(), "")
	tn := cp.tenant("rl")
	narrow := cp.cluster(tn, "rl-narrow", cell)
	calm := cp.cluster(tn, "rl-calm", cell)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 1, "req_burst": 3}')`, narrow.id)
	_, narrowKey := cp.key(narrow.id)
	_, calmKey := cp.key(calm.id)

	port := freePort(t)
	cfg := gatewayCaddyfile(port, db, "", "")
	startGateway(t, cfg)
	c := client(port)
	get := func(slug, key string) response {
		return do(t, c, "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port), key, "")
	}

	var limited, passed int
	for range 12 {
		r := get(narrow.slug, narrowKey)
		switch r.status {
		case 200:
			passed++
			if r.header.Get("RateLimit-Policy") == "" || !strings.Contains(r.header.Get("RateLimit"), `"req";r=`) {
				t.Fatalf("no RateLimit headers: %v", r.header)
			}
		case 429:
			limited++
			assertRefusal(t, r, 429, "rate_limited")
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
			}
		default:
			t.Fatalf("narrow cluster: %d %s", r.status, r.body)
		}
		if r := get(calm.slug, calmKey); r.status != 200 {
			t.Fatalf("the calm cluster saw %d while its neighbour was throttled: %s", r.status, r.body)
		}
	}
	if limited == 0 || passed < 3 {
		t.Fatalf("narrow cluster: %d passed, %d limited; want the burst of 3 to pass and the rest limited", passed, limited)
	}

	// Reload (a changed configuration) in the middle of the burst: the
	// bucket stays empty.
	reloaded, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayCaddyfile(port, db, "", "upstream_timeout 30s")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(reloaded, false); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitServing(t, port)
	c.CloseIdleConnections() // the old server closes them; see TestReloadKeepsTheBackend
	assertRefusal(t, get(narrow.slug, narrowKey), 429, "rate_limited")

	// Raising the limit reaches the gateway at once.
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 1000, "req_burst": 1000}')`, narrow.id)
	eventually(t, 2*time.Second, func() error {
		if r := get(narrow.slug, narrowKey); r.status != 200 {
			return fmt.Errorf("after raising the limit: %d", r.status)
		}
		return nil
	})
}

// TestStorageQuotaBlocksAndReleases is §7.1 item 16 and the §7.2 blocked and
// unblocked phases: with a tiny max_retained_bytes, pushes are refused with
// storage_quota_exceeded once the cell's inventory shows the cluster over
// it, pops go on, and clearing the override lets pushes through again.
func TestStorageQuotaBlocksAndReleases(t *testing.T) {
	// The raft-storage line's retainedBytes is a live counter: the lane
	// runs at every listing (the 1.x lag is TestStorageQuotaWithALaggingBroker's).
	broker := startBroker(t, fakebroker.Options{Name: "storage-cell", Tenancy: fakebroker.TenancyRust, RetainedBytesInterval: time.Nanosecond})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("storage-cell", broker.URL(), "")
	tn := cp.tenant("storage")
	full := cp.cluster(tn, "st-full", cell)
	other := cp.cluster(tn, "st-other", cell)
	_, fullKey := cp.key(full.id)
	_, otherKey := cp.key(other.id)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "reconcile_interval 300ms", ""))
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}
	payload := strings.Repeat("x", 100)
	push := func(slug, key string) response {
		return do(t, c, "POST", url(slug, "/api/v1/push"), key, fmt.Sprintf(`{"items":[{"queue":"big","payload":%q}]}`, payload))
	}
	for range 3 {
		if r := push(full.slug, fullKey); r.status != 201 {
			t.Fatalf("push before the cap: %d %s", r.status, r.body)
		}
	}
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_retained_bytes": 64}')`, full.id)
	took := eventually(t, 10*time.Second, func() error {
		r := push(full.slug, fullKey)
		if r.status != 403 {
			return fmt.Errorf("push over the storage cap: %d", r.status)
		}
		assertRefusal(t, r, 403, "storage_quota_exceeded")
		return nil
	})
	t.Logf("storage block applied %v after the cap was set", took)
	if r := do(t, c, "GET", url(full.slug, "/api/v1/pop/queue/big?batch=1"), fullKey, ""); r.status != 200 {
		t.Fatalf("pop on a storage-blocked cluster: %d %s", r.status, r.body)
	}
	if r := push(other.slug, otherKey); r.status != 201 {
		t.Fatalf("a neighbour of the blocked cluster: %d %s", r.status, r.body)
	}
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{}')`, full.id)
	eventually(t, 10*time.Second, func() error {
		if r := push(full.slug, fullKey); r.status != 201 {
			return fmt.Errorf("push after clearing the cap: %d %s", r.status, r.body)
		}
		return nil
	})
}

// TestQueueAdmissionExactAtCapAcrossRestart admits exactly max_queues
// queues and max_partitions_per_queue partitions, refuses one more, and
// keeps doing so after the gateway restarts (the registry reloads from the
// database).
func TestQueueAdmissionExactAtCapAcrossRestart(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "adm-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("adm-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("adm"), "adm", cell)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_queues": 2, "max_partitions_per_queue": 2}')`, cl.id)
	_, key := cp.key(cl.id)

	port := freePort(t)
	cfg := gatewayCaddyfile(port, pgtest.URL(t), "", "")
	c := client(port)
	push := func(queue, partition string) response {
		return do(t, c, "POST", fmt.Sprintf("http://adm.eu1.example.test:%d/api/v1/push", port), key,
			fmt.Sprintf(`{"items":[{"queue":%q,"partition":%q,"payload":1}]}`, queue, partition))
	}
	load := func() {
		adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Load(adapted, true); err != nil {
			t.Fatal(err)
		}
	}
	load()
	t.Cleanup(func() { _ = caddy.Stop() })
	for _, p := range [][2]string{{"q1", "p1"}, {"q1", "p2"}, {"q2", "p1"}} {
		if r := push(p[0], p[1]); r.status != 201 {
			t.Fatalf("push %v within the caps: %d %s", p, r.status, r.body)
		}
	}
	assertRefusal(t, push("q3", "p1"), 403, "quota_exceeded")
	assertRefusal(t, push("q1", "p3"), 403, "quota_exceeded")
	// The registry's writer runs every second; wait for the rows.
	eventually(t, 5*time.Second, func() error {
		if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.queues WHERE cluster_id = $1::uuid AND deleted_at IS NULL`, cl.id); n != "2" {
			return fmt.Errorf("%s queue rows", n)
		}
		return nil
	})

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	load()
	// The registry reloads queue names and partition counts (the table
	// holds no partition names): the queues at their cap keep working and
	// a new queue is refused at once. Partitions are known by count, so
	// the existing ones are recognised as they are used.
	assertRefusal(t, push("q3", "p1"), 403, "quota_exceeded")
	for _, p := range [][2]string{{"q1", "p1"}, {"q1", "p2"}, {"q2", "p1"}} {
		if r := push(p[0], p[1]); r.status != 201 {
			t.Fatalf("after a restart, push %v within the caps: %d %s", p, r.status, r.body)
		}
	}
	assertRefusal(t, push("q1", "p3"), 403, "quota_exceeded")
}
