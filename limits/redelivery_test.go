package limits

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestRedeliveries(perCluster int, ttl time.Duration, maxClusters, maxIDs int) (*Redeliveries, *ManualClock) {
	c := NewManualClock(testStart)
	return NewRedeliveriesBounded(perCluster, ttl, maxClusters, maxIDs, c.Now), c
}

func keys(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func TestRedeliveriesCountsOnlyFirstDeliveries(t *testing.T) {
	r, _ := newTestRedeliveries(0, 0, 0, 0)
	if n := r.FirstDeliveries("c", []string{"a", "b", "c"}); n != 3 {
		t.Fatalf("first response = %d, want 3", n)
	}
	if n := r.FirstDeliveries("c", []string{"a", "b", "c"}); n != 0 {
		t.Fatalf("redelivery = %d, want 0", n)
	}
	if n := r.FirstDeliveries("c", []string{"b", "d", "e"}); n != 2 {
		t.Fatalf("mixed = %d, want 2", n)
	}
	// Per cluster: the same key on another cluster is a first delivery.
	if n := r.FirstDeliveries("other", []string{"a"}); n != 1 {
		t.Fatalf("other cluster = %d, want 1", n)
	}
	// An empty key always counts and is not recorded; a key repeated in
	// one response counts once.
	if n := r.FirstDeliveries("c", []string{"", "", "x", "x"}); n != 3 {
		t.Fatalf("empty and repeated keys = %d, want 3", n)
	}
	if n := r.FirstDeliveries("c", nil); n != 0 {
		t.Fatalf("no keys = %d", n)
	}
	if r.IDs() != 7 || r.Clusters() != 2 {
		t.Fatalf("IDs %d Clusters %d, want 7 and 2", r.IDs(), r.Clusters())
	}
}

func TestRedeliveriesTTL(t *testing.T) {
	r, clk := newTestRedeliveries(0, 15*time.Minute, 0, 0)
	r.FirstDeliveries("c", []string{"a", "b"})
	// A redelivery refreshes the key: 10 + 10 minutes is still within
	// 15 minutes of the last delivery.
	clk.Advance(10 * time.Minute)
	if n := r.FirstDeliveries("c", []string{"a"}); n != 0 {
		t.Fatalf("a at 10 min = %d", n)
	}
	clk.Advance(10 * time.Minute)
	if n := r.FirstDeliveries("c", []string{"a"}); n != 0 {
		t.Fatalf("a at 20 min = %d, want 0 (refreshed at 10)", n)
	}
	// b was last delivered 20 minutes ago: charged again.
	if n := r.FirstDeliveries("c", []string{"b"}); n != 1 {
		t.Fatalf("b at 20 min = %d, want 1 (expired)", n)
	}
	// Exactly at the TTL a key has expired.
	clk.Advance(15 * time.Minute)
	if n := r.FirstDeliveries("c", []string{"a", "b"}); n != 2 {
		t.Fatalf("at exactly the TTL = %d, want 2", n)
	}
	clk.Advance(15*time.Minute - time.Nanosecond)
	if n := r.FirstDeliveries("c", []string{"a", "b"}); n != 0 {
		t.Fatalf("just inside the TTL = %d, want 0", n)
	}
	// Expired keys are dropped from memory.
	clk.Advance(time.Hour)
	r.FirstDeliveries("c", []string{"z"})
	if r.IDs() != 1 {
		t.Fatalf("IDs = %d after expiry, want 1", r.IDs())
	}
}

func TestRedeliveriesPerClusterBoundIsLRU(t *testing.T) {
	r, _ := newTestRedeliveries(3, 0, 0, 0)
	r.FirstDeliveries("c", []string{"a", "b", "c"})
	r.FirstDeliveries("c", []string{"a"}) // a is now the newest
	if n := r.FirstDeliveries("c", []string{"d"}); n != 1 {
		t.Fatalf("d = %d", n)
	}
	// b was the least recently delivered and was evicted: charged again
	// (the error goes against the tenant, as without the fix).
	if n := r.FirstDeliveries("c", []string{"a"}); n != 0 {
		t.Fatalf("a = %d, want 0 (kept)", n)
	}
	if n := r.FirstDeliveries("c", []string{"b"}); n != 1 {
		t.Fatalf("b = %d, want 1 (evicted)", n)
	}
	if r.IDs() != 3 {
		t.Fatalf("IDs = %d, want the bound 3", r.IDs())
	}
	// A response larger than the bound keeps only its newest keys.
	if n := r.FirstDeliveries("c", keys("k", 0, 10)); n != 10 {
		t.Fatalf("10 new keys = %d", n)
	}
	if n := r.FirstDeliveries("c", keys("k", 7, 10)); n != 0 {
		t.Fatalf("the newest 3 = %d, want 0", n)
	}
	if r.IDs() != 3 {
		t.Fatalf("IDs = %d, want 3", r.IDs())
	}
}

// sameShardIDs returns n cluster ids that fall in one redelivery shard.
func sameShardIDs(seed maphash.Seed, n int) []string {
	var out []string
	want := maphash.String(seed, "cluster-0") % redeliveryShardCount
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprint("cluster-", i)
		if maphash.String(seed, id)%redeliveryShardCount == want {
			out = append(out, id)
		}
	}
	return out
}

func TestRedeliveriesClusterCap(t *testing.T) {
	// maxClusters 32 gives each of the 16 shards 2 clusters.
	r, _ := newTestRedeliveries(10, 0, 32, 0)
	ids := sameShardIDs(r.seed, 3)
	r.FirstDeliveries(ids[0], []string{"a"})
	r.FirstDeliveries(ids[1], []string{"a"})
	r.FirstDeliveries(ids[0], []string{"b"}) // ids[1] is now least recent
	r.FirstDeliveries(ids[2], []string{"a"})
	if r.Clusters() != 2 {
		t.Fatalf("Clusters = %d, want 2", r.Clusters())
	}
	if n := r.FirstDeliveries(ids[0], []string{"a", "b"}); n != 0 {
		t.Fatalf("kept cluster = %d, want 0", n)
	}
	if n := r.FirstDeliveries(ids[1], []string{"a"}); n != 1 {
		t.Fatalf("evicted cluster = %d, want 1", n)
	}
	// Many clusters over all shards never exceed the global cap.
	for i := 0; i < 1000; i++ {
		r.FirstDeliveries(fmt.Sprint("x", i), []string{"a"})
	}
	if r.Clusters() > 32 {
		t.Fatalf("Clusters = %d over the cap 32", r.Clusters())
	}
}

func TestRedeliveriesGlobalIDBudget(t *testing.T) {
	// perCluster 4, maxIDs 64: 4 keys per shard in all.
	r, _ := newTestRedeliveries(4, 0, 0, 64)
	ids := sameShardIDs(r.seed, 2)
	a, b := ids[0], ids[1]
	r.FirstDeliveries(a, []string{"a1", "a2", "a3"})
	r.FirstDeliveries(b, []string{"b1", "b2"}) // evicts a's oldest
	if r.IDs() != 4 {
		t.Fatalf("IDs = %d, want 4", r.IDs())
	}
	if n := r.FirstDeliveries(b, []string{"b1", "b2"}); n != 0 {
		t.Fatalf("b = %d, want 0", n)
	}
	// a1 was evicted; re-adding it evicts the oldest key of the least
	// recently used cluster, now b (b1).
	if n := r.FirstDeliveries(a, []string{"a1"}); n != 1 {
		t.Fatalf("a1 = %d, want 1", n)
	}
	if n := r.FirstDeliveries(a, []string{"a3", "a2"}); n != 0 {
		t.Fatalf("a3 a2 = %d, want 0", n)
	}
	if n := r.FirstDeliveries(b, []string{"b2"}); n != 0 {
		t.Fatalf("b2 = %d, want 0", n)
	}
	if n := r.FirstDeliveries(b, []string{"b1"}); n != 1 { // evicts a's oldest, a1
		t.Fatalf("b1 = %d, want 1", n)
	}
	// Filling b drains a entirely; a then disappears.
	r.FirstDeliveries(b, []string{"b3", "b4"})
	if r.IDs() != 4 {
		t.Fatalf("IDs = %d, want 4", r.IDs())
	}
	r.FirstDeliveries(b, []string{"b5", "b6", "b7"})
	if r.Clusters() != 1 {
		t.Fatalf("Clusters = %d, want 1 (a drained and dropped)", r.Clusters())
	}
	// Global bound across shards.
	for i := 0; i < 200; i++ {
		r.FirstDeliveries(fmt.Sprint("x", i), keys("k", 0, 4))
	}
	if r.IDs() > 64 {
		t.Fatalf("IDs = %d over the budget 64", r.IDs())
	}
}

func TestRedeliveriesForgetAndCollect(t *testing.T) {
	r, clk := newTestRedeliveries(0, 15*time.Minute, 0, 0)
	r.FirstDeliveries("a", []string{"1", "2"})
	r.Forget("a")
	r.Forget("never-seen")
	if n := r.FirstDeliveries("a", []string{"1", "2"}); n != 2 {
		t.Fatalf("after Forget = %d, want 2", n)
	}
	clk.Advance(10 * time.Minute)
	r.FirstDeliveries("b", []string{"1"})
	clk.Advance(5 * time.Minute)
	if n := r.Collect(); n != 1 {
		t.Fatalf("Collect = %d, want 1 (a idle for the TTL)", n)
	}
	if r.Clusters() != 1 || r.IDs() != 1 {
		t.Fatalf("after Collect: %d clusters %d ids", r.Clusters(), r.IDs())
	}
	clk.Advance(15 * time.Minute)
	if n := r.Collect(); n != 1 || r.IDs() != 0 {
		t.Fatalf("second Collect = %d, %d ids left", n, r.IDs())
	}
}

func TestRedeliveriesDefaults(t *testing.T) {
	r := NewRedeliveries(0, 0, nil)
	if r.perCluster != DefaultRedeliveryIDsPerCluster || r.ttl != int64(DefaultRedeliveryTTL) {
		t.Fatalf("defaults = %d %v", r.perCluster, time.Duration(r.ttl))
	}
	if r.shards[0].maxClusters != DefaultRedeliveryMaxClusters/16 || r.shards[0].maxIDs != DefaultRedeliveryMaxIDs/16 {
		t.Fatalf("shard bounds = %d %d", r.shards[0].maxClusters, r.shards[0].maxIDs)
	}
	if n := r.FirstDeliveries("c", []string{"a"}); n != 1 {
		t.Fatalf("real clock = %d", n)
	}
}

func TestRedeliveriesConcurrent(t *testing.T) {
	// Four consumers of each cluster see the same 1,000 messages; every
	// message is a first delivery exactly once.
	r := NewRedeliveriesBounded(5000, time.Hour, 0, 0, nil)
	var first atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			id := fmt.Sprint("c", g%3)
			all := keys("m", 0, 1000)
			for i := 0; i < len(all); i += 50 {
				first.Add(int64(r.FirstDeliveries(id, all[i:i+50])))
			}
			if g == 0 {
				r.Collect()
				r.IDs()
			}
		}(g)
	}
	wg.Wait()
	if got := first.Load(); got != 3000 {
		t.Fatalf("first deliveries = %d, want 3000", got)
	}
}

func BenchmarkFirstDeliveries(b *testing.B) {
	// A 100-message pop response of which half are redeliveries, on a
	// cluster at its 50,000-key bound.
	r := NewRedeliveries(0, 0, nil)
	all := keys("0b4a2f5e-6c1d-4e8a-9f3b-", 0, 100_000)
	r.FirstDeliveries("c", all[:50_000])
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := (i * 50) % 99_900
		r.FirstDeliveries("c", all[off:off+100])
	}
}

func TestRedeliveriesBudgetSkipsEmptyClusters(t *testing.T) {
	// perCluster 2, maxIDs 32: 2 keys per shard in all.
	r, clk := newTestRedeliveries(2, time.Minute, 0, 32)
	ids := sameShardIDs(r.seed, 3)
	a, b, c := ids[0], ids[1], ids[2]
	r.FirstDeliveries(a, []string{"k"})
	clk.Advance(time.Minute)
	// a's key expires and is trimmed; a stays, empty, least recently used
	// once b and c are active.
	if n := r.FirstDeliveries(a, []string{""}); n != 1 || r.IDs() != 0 {
		t.Fatalf("a = %d with %d ids", n, r.IDs())
	}
	r.FirstDeliveries(b, []string{"b1", "b2"})
	if n := r.FirstDeliveries(c, []string{"c1"}); n != 1 {
		t.Fatalf("c1 = %d", n)
	}
	if r.Clusters() != 2 || r.IDs() != 2 {
		t.Fatalf("Clusters %d IDs %d, want the empty a dropped and 2 ids", r.Clusters(), r.IDs())
	}
	if n := r.FirstDeliveries(b, []string{"b2"}); n != 0 {
		t.Fatalf("b2 = %d, want 0", n)
	}
}
