package limits

import (
	"testing"
)

// A released batch holds nothing, a second Release does nothing, and a
// batch read after it names its pairs right, taking the strings of the
// room's last batch only for the same names.
func TestReleasedBatchRoomsAreReusedRight(t *testing.T) {
	first, err := ParsePush([]byte(`{"items":[{"queue":"a","partition":"p1"},{"queue":"a","partition":"p2"},{"queue":"b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	first.Release()
	if first.Pairs != nil || first.PairItems != nil || first.records != nil || first.room != nil {
		t.Fatalf("a released batch still holds %+v", first)
	}
	first.Release()
	var none ProduceBatch
	none.Release()
	for range 3 {
		b, err := ParsePush([]byte(`{"items":[{"queue":"a","partition":"p2"},{"queue":"a","partition":"p3"},{"queue":"ab","partition":"p1"},{"queue":"b"},{"queue":"b","partition":"p1"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		want := []QueuePartition{{"a", "p2"}, {"a", "p3"}, {"ab", "p1"}, {"b", DefaultPartition}, {"b", "p1"}}
		if len(b.Pairs) != len(want) {
			t.Fatalf("pairs %q, want %q", b.Pairs, want)
		}
		for i := range want {
			if b.Pairs[i] != want[i] || b.PairItems[i] != 1 {
				t.Fatalf("pairs %q (counts %v), want %q", b.Pairs, b.PairItems, want)
			}
		}
		b.Release()
	}
}
