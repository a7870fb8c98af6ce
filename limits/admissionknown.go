package limits

// The lock-free answer to the commonest Admit: every pair of the request
// was admitted before. A loaded cluster publishes the pairs it has
// admitted as an immutable set behind an atomic pointer, so such a request
// reads one pointer and looks its pairs up, taking no lock (admission of a
// one-item push was a tenth of its reading under the read locks).
//
// The set may lag the registry (it holds a subset of the admitted pairs,
// never a pair the registry forgot): a pair missing from it takes the
// locked path, which decides from the registry itself. Copying the set on
// every new pair would cost O(pairs) each time, so it is republished only
// once the pairs it lacks (admitted since, or found admitted on the locked
// path since) reach half its size: each republish copies N pairs after N/2
// arrivals, a constant amount of copying per new pair or slow hit.
// Forgetting (Invalidate, a reconciler pass that drops queues) republishes
// or clears it at once, under the cluster's lock.

// knownPairs is a published, never modified, set of admitted pairs: a
// few in a list (most clusters write to a handful, and comparing names is
// cheaper than hashing them), more in a map.
type knownPairs struct {
	few []QueuePartition
	set map[QueuePartition]struct{}
}

// knownListPairs is the most pairs a published set keeps in its list.
const knownListPairs = 8

// hasAll reports whether every pair is in the set.
func (k *knownPairs) hasAll(pairs []QueuePartition) bool {
	if k.set != nil {
		for _, p := range pairs {
			if _, ok := k.set[p]; !ok {
				return false
			}
		}
		return true
	}
next:
	for _, p := range pairs {
		for _, f := range k.few {
			// The partition first, from its last byte: the pairs of one
			// queue mostly differ there (customer-1, customer-2).
			if len(f.Partition) == len(p.Partition) && (len(f.Partition) == 0 || f.Partition[len(f.Partition)-1] == p.Partition[len(p.Partition)-1]) &&
				f.Partition == p.Partition && f.Queue == p.Queue {
				continue next
			}
		}
		return false
	}
	return true
}

// knownAdmitted is the fast path of Admit: true when the cluster is
// loaded and its published set holds every pair.
func (c *admCluster) knownAdmitted(pairs []QueuePartition) bool {
	k := c.known.Load()
	return k != nil && k.hasAll(pairs)
}

// publishKnownLocked republishes the set from the registry. c.mu is held
// for writing and the cluster is loaded.
func (c *admCluster) publishKnownLocked() {
	n := 0
	for _, q := range c.queues {
		n += len(q.names)
	}
	k := &knownPairs{}
	if n <= knownListPairs {
		k.few = make([]QueuePartition, 0, n)
		for name, q := range c.queues {
			for p := range q.names {
				k.few = append(k.few, QueuePartition{Queue: name, Partition: p})
			}
		}
	} else {
		k.set = make(map[QueuePartition]struct{}, n)
		for name, q := range c.queues {
			for p := range q.names {
				k.set[QueuePartition{Queue: name, Partition: p}] = struct{}{}
			}
		}
	}
	c.known.Store(k)
	c.published = n
	c.lagging.Store(0)
}

// noteUnpublishedLocked counts n pairs the set lacks (just admitted) and
// republishes once they are many. c.mu is held for writing.
func (c *admCluster) noteUnpublishedLocked(n int) {
	if c.lagging.Add(int64(n)) >= int64(c.published/2+1) {
		c.publishKnownLocked()
	}
}

// noteSlowHit counts a request whose pairs were all admitted but not all
// published (published is the set's size, read under the lock that found
// them), and republishes once there were many. c.mu is not held.
func (c *admCluster) noteSlowHit(published int) {
	if c.lagging.Add(1) < int64(published/2+1) {
		return
	}
	c.mu.Lock()
	if c.state == admLoaded && c.lagging.Load() >= int64(c.published/2+1) {
		c.publishKnownLocked()
	}
	c.mu.Unlock()
}

// forgetKnownLocked withdraws the set (the registry is being dropped).
// c.mu is held for writing.
func (c *admCluster) forgetKnownLocked() {
	c.known.Store(nil)
	c.published = 0
	c.lagging.Store(0)
}
