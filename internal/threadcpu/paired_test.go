//go:build linux

package threadcpu

import (
	"runtime"
	"testing"
)

var sink uint64

// work does n rounds of arithmetic the compiler cannot drop.
func work(n int) {
	x := sink | 1
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink = x
}

// A subject that does a third of the baseline's work is about three times
// faster, whichever goes first in a block.
func TestPairedRatio(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var p Paired
	for range 6 {
		p.Block(func() { work(3_000_000) }, func() { work(1_000_000) })
	}
	if r := p.Ratio(); r < 2 || r > 4.5 {
		t.Fatalf("ratio %.2f, want about 3 (base %v, subject %v)", r, p.Base, p.Subject)
	}
	if p.WallRatio() <= 0 || p.BaseWall < p.Base/2 {
		t.Fatalf("wall ratio %.2f, base's wall time %v against its CPU time %v", p.WallRatio(), p.BaseWall, p.Base)
	}
	if p.Base < 5*p.Subject/2 {
		t.Fatalf("base %v, subject %v", p.Base, p.Subject)
	}
}

func TestPairedWithoutBlocks(t *testing.T) {
	var p Paired
	if p.Ratio() != 0 || p.WallRatio() != 0 {
		t.Fatal("no blocks, yet a ratio")
	}
}
