package limits

// fpTable maps a key's 64-bit fingerprint to its node in a seenSet. It is
// an open-addressing table with linear probing: a lookup touches one slot
// (the fingerprint is in it), where a Go map with tens of thousands of
// entries cost the redelivery filter several cache misses per key, most of
// its time on a pop of 100 messages. Deletion shifts the following
// entries back, so there are no tombstones and lookups stay short. It
// stays at most three quarters full, growing by doubling (and let go when
// a set empties).
type fpTable struct {
	slots   []fpSlot
	n       int
	touched uint64 // what touch loaded, kept so that its loads are not dropped
}

// fpSlot is one entry; node is the node index plus one (0: empty).
type fpSlot struct {
	fp   uint64
	node int32
}

const fpTableMin = 16

func (t *fpTable) home(fp uint64) int { return int(fp>>32^fp) & (len(t.slots) - 1) }

// get returns fp's node.
func (t *fpTable) get(fp uint64) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := len(t.slots) - 1
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return 0, false
		}
		if s.fp == fp {
			return s.node - 1, true
		}
	}
}

// find returns fp's slot, nil when it is not there. The slot is valid
// until the next put or remove.
func (t *fpTable) find(fp uint64) *fpSlot {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return nil
		}
		if s.fp == fp {
			return s
		}
	}
}

// set changes the stored node (index plus one) of fp, which is there,
// without growing the table (so slots found before stay valid).
func (t *fpTable) set(fp uint64, node int32) {
	if s := t.find(fp); s != nil {
		s.node = node
	}
}

// touch loads the home slot of every fingerprint: independent loads, which
// the processor overlaps, ahead of the lookups that need them.
func (t *fpTable) touch(fps []uint64) {
	if t.n == 0 {
		return
	}
	var sum uint64
	for _, fp := range fps {
		sum += t.slots[t.home(fp)].fp
	}
	t.touched = sum
}

// put sets fp's node, adding it if it is not there.
func (t *fpTable) put(fp uint64, node int32) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(max(fpTableMin, 2*len(t.slots)))
	}
	mask := len(t.slots) - 1
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			*s = fpSlot{fp: fp, node: node + 1}
			t.n++
			return
		}
		if s.fp == fp {
			s.node = node + 1
			return
		}
	}
}

// remove deletes fp, if it is there.
func (t *fpTable) remove(fp uint64) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(fp)
	for {
		s := &t.slots[i]
		if s.node == 0 {
			return
		}
		if s.fp == fp {
			break
		}
		i = (i + 1) & mask
	}
	// Shift back every following entry that may move into the hole: one
	// whose home is not cyclically within (hole, its slot].
	hole := i
	for j := (i + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].fp)
		if (j-h)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = fpSlot{}
	t.n--
	if t.n == 0 && len(t.slots) > fpTableMin {
		t.slots = nil
	}
}

func (t *fpTable) resize(size int) {
	old := t.slots
	t.slots, t.n = make([]fpSlot, size), 0
	for _, s := range old {
		if s.node != 0 {
			t.put(s.fp, s.node-1)
		}
	}
}
