package limits

// The redelivery memory as it was before its ring (a linked list of nodes
// over the same table), kept as the baseline of BenchmarkFirstDeliveries
// and the oracle of TestRedeliveriesMatchTheLinkedList. Comments trimmed.

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

type oldRedeliveries struct {
	perCluster int
	ttl        int64 // nanoseconds
	clock      epoch
	seed       maphash.Seed
	shards     [redeliveryShardCount]oldRedeliveryShard
}

func oldNewRedeliveriesBounded(perCluster int, ttl time.Duration, maxClusters, maxIDs int, now Clock) *oldRedeliveries {
	if perCluster <= 0 {
		perCluster = DefaultRedeliveryIDsPerCluster
	}
	if ttl <= 0 {
		ttl = DefaultRedeliveryTTL
	}
	if maxClusters <= 0 {
		maxClusters = DefaultRedeliveryMaxClusters
	}
	if maxIDs <= 0 {
		maxIDs = DefaultRedeliveryMaxIDs
	}
	r := &oldRedeliveries{perCluster: perCluster, ttl: int64(ttl), clock: newEpoch(now), seed: maphash.MakeSeed()}
	shardClusters := max(1, (maxClusters+redeliveryShardCount-1)/redeliveryShardCount)
	shardIDs := max(perCluster, (maxIDs+redeliveryShardCount-1)/redeliveryShardCount)
	for i := range r.shards {
		r.shards[i] = oldRedeliveryShard{
			clusters:    make(map[string]*oldSeenSet),
			maxClusters: shardClusters,
			maxIDs:      shardIDs,
		}
	}
	return r
}

func (r *oldRedeliveries) FirstDeliveries(clusterID string, ids []string) int {
	if len(ids) == 0 {
		return 0
	}
	now := r.clock.nanos()
	s := &r.shards[maphash.String(r.seed, clusterID)%redeliveryShardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.clusters[clusterID]
	if set == nil {
		set = s.add(clusterID, r.perCluster)
	}
	set.lastUsed = now
	s.touch(set)
	s.expire(set, now-r.ttl)
	first := 0
	for _, id := range ids {
		if id == "" {
			first++
			continue
		}
		fp := maphash.String(r.seed, id)
		if i, ok := set.index.get(fp); ok {
			set.nodes[i].at = now
			set.moveToFront(i)
			continue
		}
		first++
		for set.len >= set.max || s.ids >= s.maxIDs {
			if !s.evictOne(set) {
				break
			}
		}
		set.push(fp, now)
		s.ids++
	}
	return first
}

func (r *oldRedeliveries) Forget(clusterID string) {
	s := &r.shards[maphash.String(r.seed, clusterID)%redeliveryShardCount]
	s.mu.Lock()
	if set := s.clusters[clusterID]; set != nil {
		s.remove(set)
	}
	s.mu.Unlock()
}

func (r *oldRedeliveries) Collect() int {
	cutoff := r.clock.nanos() - r.ttl
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for s.tail != nil && s.tail.lastUsed <= cutoff {
			s.remove(s.tail)
			n++
		}
		s.mu.Unlock()
	}
	return n
}

func (r *oldRedeliveries) Clusters() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += len(s.clusters)
		s.mu.Unlock()
	}
	return n
}

func (r *oldRedeliveries) IDs() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += s.ids
		s.mu.Unlock()
	}
	return n
}

type oldRedeliveryShard struct {
	mu          sync.Mutex
	clusters    map[string]*oldSeenSet
	head, tail  *oldSeenSet
	ids         int
	maxClusters int
	maxIDs      int
}

func (s *oldRedeliveryShard) add(clusterID string, perCluster int) *oldSeenSet {
	for len(s.clusters) >= s.maxClusters && s.tail != nil {
		s.remove(s.tail)
	}
	set := &oldSeenSet{
		id:   strings.Clone(clusterID),
		max:  perCluster,
		head: -1,
		tail: -1,
		free: -1,
	}
	s.clusters[set.id] = set
	s.pushFront(set)
	return set
}

func (s *oldRedeliveryShard) remove(set *oldSeenSet) {
	s.unlink(set)
	delete(s.clusters, set.id)
	s.ids -= set.len
}

func (s *oldRedeliveryShard) touch(set *oldSeenSet) {
	if s.head == set {
		return
	}
	s.unlink(set)
	s.pushFront(set)
}

func (s *oldRedeliveryShard) pushFront(set *oldSeenSet) {
	set.prev, set.next = nil, s.head
	if s.head != nil {
		s.head.prev = set
	}
	s.head = set
	if s.tail == nil {
		s.tail = set
	}
}

func (s *oldRedeliveryShard) unlink(set *oldSeenSet) {
	if set.prev != nil {
		set.prev.next = set.next
	} else if s.head == set {
		s.head = set.next
	}
	if set.next != nil {
		set.next.prev = set.prev
	} else if s.tail == set {
		s.tail = set.prev
	}
	set.prev, set.next = nil, nil
}

func (s *oldRedeliveryShard) expire(set *oldSeenSet, cutoff int64) {
	for set.tail >= 0 && set.nodes[set.tail].at <= cutoff {
		set.dropTail()
		s.ids--
	}
}

func (s *oldRedeliveryShard) evictOne(current *oldSeenSet) bool {
	victim := current
	if current.len < current.max {
		victim = s.tail
		for victim != nil && victim.len == 0 && victim != current {
			next := victim.prev
			s.remove(victim)
			victim = next
		}
	}
	if victim == nil || victim.len == 0 {
		return false
	}
	victim.dropTail()
	s.ids--
	if victim.len == 0 && victim != current {
		s.remove(victim)
	}
	return true
}

type oldSeenSet struct {
	id         string
	index      oldFPTable
	nodes      []oldSeenNode
	head, tail int32 // -1 when empty
	free       int32 // first free node, -1 when none
	len, max   int
	lastUsed   int64
	prev, next *oldSeenSet // the shard's cluster list
}

type oldSeenNode struct {
	fp         uint64
	at         int64
	prev, next int32
}

func (c *oldSeenSet) push(fp uint64, at int64) {
	var i int32
	if c.free >= 0 {
		i = c.free
		c.free = c.nodes[i].next
	} else {
		i = int32(len(c.nodes))
		c.nodes = append(c.nodes, oldSeenNode{})
	}
	c.nodes[i] = oldSeenNode{fp: fp, at: at, prev: -1, next: c.head}
	if c.head >= 0 {
		c.nodes[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
	c.index.put(fp, i)
	c.len++
}

func (c *oldSeenSet) moveToFront(i int32) {
	if c.head == i {
		return
	}
	n := &c.nodes[i]
	c.nodes[n.prev].next = n.next
	if n.next >= 0 {
		c.nodes[n.next].prev = n.prev
	} else {
		c.tail = n.prev
	}
	n.prev, n.next = -1, c.head
	c.nodes[c.head].prev = i
	c.head = i
}

func (c *oldSeenSet) dropTail() {
	i := c.tail
	n := &c.nodes[i]
	c.index.remove(n.fp)
	c.tail = n.prev
	if c.tail >= 0 {
		c.nodes[c.tail].next = -1
	} else {
		c.head = -1
	}
	n.prev, n.next = -1, c.free
	c.free = i
	c.len--
}

type oldFPTable struct {
	slots []oldFPSlot
	n     int
}

type oldFPSlot struct {
	fp   uint64
	node int32
}

const oldFPTableMin = 16

func (t *oldFPTable) home(fp uint64) int { return int(fp>>32^fp) & (len(t.slots) - 1) }

func (t *oldFPTable) get(fp uint64) (int32, bool) {
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

func (t *oldFPTable) put(fp uint64, node int32) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(max(oldFPTableMin, 2*len(t.slots)))
	}
	mask := len(t.slots) - 1
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			*s = oldFPSlot{fp: fp, node: node + 1}
			t.n++
			return
		}
		if s.fp == fp {
			s.node = node + 1
			return
		}
	}
}

func (t *oldFPTable) remove(fp uint64) {
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
	hole := i
	for j := (i + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].fp)
		if (j-h)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = oldFPSlot{}
	t.n--
	if t.n == 0 && len(t.slots) > oldFPTableMin {
		t.slots = nil
	}
}

func (t *oldFPTable) resize(size int) {
	old := t.slots
	t.slots, t.n = make([]oldFPSlot, size), 0
	for _, s := range old {
		if s.node != 0 {
			t.put(s.fp, s.node-1)
		}
	}
}
