//go:build !race

package meter

import "testing"

// The race detector makes sync.Pool drop a share of what is put back, so
// a pooled reader allocates at random under -race; this test is built only
// without it (.ci/run runs these packages both ways).

// TestBillPopAllocationsDoNotGrowWithItems: BillPop's result (the keys the
// redelivery filter takes) is the one thing that grows with a pop's
// messages; it is allocated in two pieces whatever the count, and past the
// keys' bytes nothing grows.
func TestBillPopAllocationsDoNotGrowWithItems(t *testing.T) {
	keyBytes := func(ids []string) (n float64) {
		for _, id := range ids {
			n += float64(len(id))
		}
		return n + float64(len(ids))*16 // the list's string headers
	}
	var overhead [2]float64
	for i, n := range []int{10, 1000} {
		body := popAnswerBody(n, 100)
		_, ids := BillPop(200, body)
		count, bytes := allocsOf(func() {
			if got, _ := BillPop(200, body); got != int64(n) {
				t.Fatal("miscounted")
			}
		})
		overhead[i] = bytes - keyBytes(ids)
		t.Logf("BillPop of %d messages: %v allocations, %.0f B, of which the keys %.0f B", n, count, bytes, keyBytes(ids))
		if count > 2 {
			t.Errorf("BillPop of %d messages: %v allocations, want the keys' two", n, count)
		}
	}
	// Past the keys, what is left is rounding up to size classes.
	if overhead[1] > overhead[0]+float64(16<<10) {
		t.Errorf("BillPop allocates %.0f B past its keys for 1,000 messages, %.0f B for 10", overhead[1], overhead[0])
	}
}
