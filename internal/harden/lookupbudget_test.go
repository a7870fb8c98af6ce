package harden

import (
	"testing"
	"time"
)

func TestUnguessableLookupBudget(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	g := NewFailureGuard(FailureGuardConfig{UnguessableLookups: 2, Now: func() time.Time { return now }})
	for i := range 4 {
		if !g.AllowUnguessableLookup() {
			t.Fatalf("lookup %d of the burst of 4 refused", i)
		}
	}
	if g.AllowUnguessableLookup() {
		t.Fatal("a lookup past the burst was allowed")
	}
	now = now.Add(500 * time.Millisecond) // one lookup earned back at 2/s
	if !g.AllowUnguessableLookup() {
		t.Fatal("the lookup earned back was refused")
	}
	if g.AllowUnguessableLookup() {
		t.Fatal("more than earned back was allowed")
	}
	now = now.Add(time.Hour) // refills to the burst, not beyond
	n := 0
	for g.AllowUnguessableLookup() {
		n++
	}
	if n != 4 {
		t.Fatalf("after a long pause %d lookups, want the burst of 4", n)
	}
}
