//go:build !race

// The race detector drops sync.Pool's items at random, which the pooled
// batch storage relies on; CI runs the core packages once without -race.

package limits_test

import (
	"runtime"
	"testing"

	"github.com/queengate/queengate/limits"
)

// The request side's allocations do not grow with a batch's items (issue
// 26, goal 2): reading, capping and admitting a push or a transaction of
// 1,000 items allocates no more, in count and in bytes, than one of 10
// (the body itself is the caller's buffer and is not copied). With the
// batch's storage handed back (ProduceBatch.Release) and the names of
// pairs seen before taken again, a warm reading of 1, 10 or 1,000 items
// allocates nothing at all.
func TestReadingAllocationsDoNotGrowWithItems(t *testing.T) {
	for _, kind := range []struct {
		name  string
		body  func(int, bool) []byte
		parse func([]byte) (limits.ProduceBatch, error)
	}{{"push", sdkPush, limits.ParsePush}, {"transaction", sdkTransaction, limits.ParseTransaction}} {
		for _, large := range []bool{false, true} {
			allocs := map[int]float64{}
			bytes := map[int]uint64{}
			for _, n := range []int{1, 10, 1000} {
				body := kind.body(n, large)
				r := newRequestReader(kind.parse, n)
				read := func() {
					if err := r.read(body); err != nil {
						t.Fatal(err)
					}
				}
				read() // the pairs are admitted once; later pushes find them known
				allocs[n] = testing.AllocsPerRun(50, read)
				bytes[n] = bytesPerRun(50, read)
				if allocs[n] != 0 || bytes[n] != 0 {
					t.Errorf("%s of %d items (large payloads %v): %.0f allocations, %d bytes; want none",
						kind.name, n, large, allocs[n], bytes[n])
				}
			}
			t.Logf("%s (large payloads %v): 1 item %.0f allocations, %d bytes; 10 items %.0f, %d; 1,000 items %.0f, %d",
				kind.name, large, allocs[1], bytes[1], allocs[10], bytes[10], allocs[1000], bytes[1000])
			if allocs[1000] > allocs[10] || bytes[1000] > bytes[10] {
				t.Errorf("%s (large payloads %v): 1,000 items allocate %.0f times, %d bytes; 10 items %.0f times, %d bytes",
					kind.name, large, allocs[1000], bytes[1000], allocs[10], bytes[10])
			}
			// The measure measures: a reading whose batch is not handed
			// back allocates its storage every time.
			body := kind.body(10, large)
			kept := func() {
				if _, err := kind.parse(body); err != nil {
					t.Fatal(err)
				}
			}
			if a, by := testing.AllocsPerRun(50, kept), bytesPerRun(50, kept); a == 0 || by == 0 {
				t.Errorf("%s: a batch never released measured %.0f allocations, %d bytes; the measure is broken", kind.name, a, by)
			}
		}
	}
}

// bytesPerRun is the average number of bytes f allocates, as
// testing.AllocsPerRun counts allocations (one processor, after a warm-up).
func bytesPerRun(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}
