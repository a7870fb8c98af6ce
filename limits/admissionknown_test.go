package limits

import (
	"strconv"
	"testing"
)

// The published set of admitted pairs answers known pairs without a lock,
// and never keeps a pair the registry forgot: after an invalidation or a
// reconciler pass that drops a queue, its pairs count against the caps
// again.
func TestAdmissionKnownSetForgets(t *testing.T) {
	a := NewAdmission(newMemStore())
	lim := capsQP(1, 2)
	// Enough requests for the set to be republished with both pairs.
	for range 8 {
		wantAdmit(t, a, clA, lim, Admitted, "q", "p1", "q", "p2")
	}
	c := a.cluster(clA)
	if !c.knownAdmitted(pairs("q", "p1", "q", "p2")) {
		t.Fatal("the admitted pairs were never published")
	}
	wantAdmit(t, a, clA, lim, OverPartitions, "q", "p3")
	wantAdmit(t, a, clA, lim, OverQueues, "r", "Default")

	// Two passes without q forget it (the first keeps a queue admitted
	// since the last pass): its slot and its pairs are gone.
	a.Reconcile(clA, nil)
	if n := a.Reconcile(clA, nil); n != 1 {
		t.Fatalf("forgotten = %d, want 1", n)
	}
	if c.knownAdmitted(pairs("q", "p1")) {
		t.Fatal("a forgotten queue's pair is still published")
	}
	wantAdmit(t, a, clA, lim, Admitted, "r", "Default")
	wantAdmit(t, a, clA, lim, OverQueues, "q", "p1")

	a.Invalidate(clA)
	if c.knownAdmitted(pairs("r", "Default")) {
		t.Fatal("an invalidated cluster still publishes its pairs")
	}
}

// Pairs admitted one at a time are published within a constant factor of
// copying: the set catches up with the registry.
func TestAdmissionKnownSetCatchesUp(t *testing.T) {
	a := NewAdmission(newMemStore())
	lim := capsQP(Unlimited, Unlimited)
	var all []string
	for i := range 300 {
		all = append(all, "q", "p"+strconv.Itoa(i))
		wantAdmit(t, a, clA, lim, Admitted, "q", "p"+strconv.Itoa(i))
	}
	// Known pairs found on the locked path count towards a republish.
	for range 400 {
		wantAdmit(t, a, clA, lim, Admitted, all...)
	}
	if !a.cluster(clA).knownAdmitted(pairs(all...)) {
		t.Fatal("the set did not catch up with the admitted pairs")
	}
}
