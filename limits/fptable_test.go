package limits

import (
	"math/rand/v2"
	"testing"
)

// The table agrees with a map through random puts and removes: with few
// distinct fingerprints (a small table, many collisions, removals that
// shift probed entries back) and with many (growth).
func TestFPTableMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []uint64{1 << 6, 1 << 40} {
		var tab fpTable
		want := map[uint64]int32{}
		for step := range 200_000 {
			fp := rng.Uint64N(spread) * 0x9E3779B97F4A7C15
			if fp == 0 {
				continue
			}
			switch rng.IntN(3) {
			case 0, 1:
				tab.put(fp, int32(step))
				want[fp] = int32(step)
			case 2:
				tab.remove(fp)
				delete(want, fp)
			}
			if tab.n != len(want) {
				t.Fatalf("spread %d step %d: %d entries, want %d", spread, step, tab.n, len(want))
			}
			if step%1000 == 0 {
				for k, v := range want {
					if got, ok := tab.get(k); !ok || got != v {
						t.Fatalf("spread %d step %d: get(%x) = %d %v, want %d", spread, step, k, got, ok, v)
					}
				}
			}
			if got, ok := tab.get(fp); ok != (want[fp] != 0 || func() bool { _, in := want[fp]; return in }()) || (ok && got != want[fp]) {
				t.Fatalf("spread %d step %d: get(%x) = %d %v", spread, step, fp, got, ok)
			}
		}
		for k := range want {
			tab.remove(k)
		}
		if tab.n != 0 || tab.slots != nil {
			t.Fatalf("emptied: %d entries, %d slots", tab.n, len(tab.slots))
		}
	}
}
