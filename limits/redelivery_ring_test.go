package limits

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/threadcpu"
)

// TestRedeliveriesMatchTheLinkedList: the ring answers every pop as the
// linked list of nodes it replaced (redelivery_old_test.go), and holds the
// same number of keys and clusters, through random pops with repeats,
// redeliveries of old and recent keys, the per-cluster, cluster and global
// bounds, the TTL, Forget and Collect.
func TestRedeliveriesMatchTheLinkedList(t *testing.T) {
	for _, bounds := range []struct{ perCluster, maxClusters, maxIDs int }{
		{40, 0, 0}, {7, 0, 0}, {100, 32, 320}, {16, 16, 64}, {1000, 0, 0},
	} {
		t.Run(fmt.Sprintf("%+v", bounds), func(t *testing.T) {
			clk := NewManualClock(testStart)
			ring := NewRedeliveriesBounded(bounds.perCluster, time.Minute, bounds.maxClusters, bounds.maxIDs, clk.Now)
			list := oldNewRedeliveriesBounded(bounds.perCluster, time.Minute, bounds.maxClusters, bounds.maxIDs, clk.Now)
			list.seed = ring.seed // the same shards, and the same fingerprints
			rng := rand.New(rand.NewPCG(3, uint64(bounds.perCluster)))
			clusters := []string{"a", "b", "c", "d", "e"}
			steps := 30_000
			if underRace {
				steps = 3_000 // single-threaded: the detector has nothing to find in it
			}
			for step := range steps {
				cluster := clusters[rng.IntN(len(clusters))]
				var ids []string
				for range rng.IntN(130) {
					switch rng.IntN(10) {
					case 0:
						ids = append(ids, "")
					case 1, 2, 3:
						ids = append(ids, fmt.Sprint(rng.IntN(20))) // recent and often
					default:
						ids = append(ids, fmt.Sprint(rng.IntN(3*bounds.perCluster+50)))
					}
				}
				firstOf := ring.FirstDeliveries
				if step%2 == 1 {
					// Half of the pops hand their keys over spelled one
					// at a time, as the gateway's pop reading does.
					firstOf = func(c string, ids []string) int { return ring.FirstDeliveriesOf(c, spelledKeys(ids)) }
				}
				if got, want := firstOf(cluster, ids), list.FirstDeliveries(cluster, ids); got != want {
					t.Fatalf("step %d: %s %q: %d first deliveries, the linked list %d", step, cluster, ids, got, want)
				}
				switch rng.IntN(200) {
				case 0:
					ring.Forget(cluster)
					list.Forget(cluster)
				case 1:
					clk.Advance(time.Duration(rng.IntN(90)) * time.Second)
					if got, want := ring.Collect(), list.Collect(); got != want {
						t.Fatalf("step %d: Collect %d, the linked list %d", step, got, want)
					}
				}
				if rng.IntN(4) == 0 {
					clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
				if ring.IDs() != list.IDs() || ring.Clusters() != list.Clusters() {
					t.Fatalf("step %d: %d keys in %d clusters, the linked list %d in %d", step, ring.IDs(), ring.Clusters(), list.IDs(), list.Clusters())
				}
			}
		})
	}
}

// BenchmarkFirstDeliveriesAgainstTheLinkedList is BenchmarkFirstDeliveries
// on the ring and on the linked list it replaced, in alternating blocks of
// one run timed in the thread's CPU time (neighbours on a shared machine
// do not inflate it): ring-ns and list-ns per pop of 100 keys, and
// x-faster, the median of the blocks' ratios list/ring.
func BenchmarkFirstDeliveriesAgainstTheLinkedList(b *testing.B) {
	all := keys("0b4a2f5e-6c1d-4e8a-9f3b-", 0, 100_000)
	ring := NewRedeliveries(0, 0, nil)
	list := oldNewRedeliveriesBounded(0, 0, 0, 0, nil)
	ring.FirstDeliveries("c", all[:50_000])
	list.FirstDeliveries("c", all[:50_000])
	b.ReportAllocs()
	timeAgainstList(b, 200, func(i int) {
		off := (i * 50) % 99_900
		list.FirstDeliveries("c", all[off:off+100])
	}, func(i int) {
		off := (i * 50) % 99_900
		ring.FirstDeliveries("c", all[off:off+100])
	})
}

// BenchmarkFirstDeliveriesManyClusters is the same pops spread over 24
// clusters at their 50,000-key bound (1.2 million keys, far past the
// processor's caches, as a gateway serving many clusters holds them), in
// turn, against the linked list likewise.
func BenchmarkFirstDeliveriesManyClusters(b *testing.B) {
	const clusters = 24
	var all [clusters][]string
	ring := NewRedeliveries(0, 0, nil)
	list := oldNewRedeliveriesBounded(0, 0, 0, 0, nil)
	for c := range all {
		all[c] = keys(fmt.Sprintf("%02d4a2f5e-6c1d-4e8a-9f3b-", c), 0, 100_000)
		ring.FirstDeliveries(fmt.Sprint(c), all[c][:50_000])
		list.FirstDeliveries(fmt.Sprint(c), all[c][:50_000])
	}
	names := make([]string, clusters)
	for c := range names {
		names[c] = fmt.Sprint(c)
	}
	timeAgainstList(b, 96, func(i int) {
		off := (i / clusters * 50) % 99_900
		list.FirstDeliveries(names[i%clusters], all[i%clusters][off:off+100])
	}, func(i int) {
		off := (i / clusters * 50) % 99_900
		ring.FirstDeliveries(names[i%clusters], all[i%clusters][off:off+100])
	})
}

// timeAgainstList runs pops i of b.N on the linked list and on the ring in
// alternating blocks of block pops, timed in the thread's CPU time, and
// reports ring-ns and list-ns per pop and x-faster, the median of the
// blocks' ratios list/ring.
func timeAgainstList(b *testing.B, block int, list, ring func(i int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var p threadcpu.Paired
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		p.Block(func() {
			for i := done; i < done+block; i++ {
				list(i)
			}
		}, func() {
			for i := done; i < done+block; i++ {
				ring(i)
			}
		})
	}
	b.StopTimer()
	rounds := float64(b.N + block - 1 - (b.N+block-1)%block)
	b.ReportMetric(float64(p.Subject.Nanoseconds())/rounds, "ring-ns")
	b.ReportMetric(float64(p.Base.Nanoseconds())/rounds, "list-ns")
	b.ReportMetric(p.Ratio(), "x-faster")
}

// spelledKeys hands keys over as DeliveryKeys.
type spelledKeys []string

func (k spelledKeys) Keys() int                          { return len(k) }
func (k spelledKeys) AppendKey(dst []byte, i int) []byte { return append(dst, k[i]...) }
