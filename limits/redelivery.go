package limits

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// Defaults of the redelivery memory.
const (
	DefaultRedeliveryIDsPerCluster = 50_000
	DefaultRedeliveryTTL           = 15 * time.Minute
	DefaultRedeliveryMaxClusters   = 4096
	DefaultRedeliveryMaxIDs        = 2_000_000
)

// redeliveryShardCount is the number of independently locked shards.
const redeliveryShardCount = 16

// Redeliveries recognises redelivered messages so that they do not drain a
// cluster's message bucket (SPEC fix 7). A pop response carries no retry
// count, so it remembers, per cluster, the keys of recently delivered
// messages (a transactionId, or partitionId+transactionId: any string that
// names one message) and reports how many of a response's keys are new.
//
// Memory is bounded three ways: at most perCluster keys per cluster (least
// recently delivered evicted first), at most maxClusters clusters and at
// most maxIDs keys in all (least recently active cluster's oldest keys
// evicted first). A key costs 45 to 70 bytes whatever its length (its
// node, and its slot in a table kept 3/8 to 3/4 full), because only a
// 64-bit fingerprint of it is kept, so the defaults (50,000 per cluster,
// 4,096 clusters, 2,000,000 in all) hold at most about 140 MB. The work per
// key is O(1). Clusters and the global budgets are split over 16
// shards by cluster id (each shard gets 1/16 of maxClusters and maxIDs, at
// least one cluster and perCluster keys).
//
// Which way errors go. Almost all of them go against the tenant and only
// fall back to the reference behaviour of charging every delivery: a key
// evicted early (by a bound) or older than the TTL is charged again when
// redelivered, and so is every delivery of a cluster after Forget or a
// restart. The one error in the tenant's favour is a fingerprint collision
// (two different keys with the same 64-bit hash in one cluster's window),
// with a probability around 10⁻¹⁰ per full window: a new message would go
// unbilled by the bucket. Note also the fix's own trade-off: a consumer
// that never acks can have the same messages redelivered without draining
// the message bucket; each of its pops still costs a request token.
type Redeliveries struct {
	perCluster int
	ttl        int64 // nanoseconds
	clock      epoch
	seed       maphash.Seed
	shards     [redeliveryShardCount]redeliveryShard
}

// NewRedeliveries returns an empty memory keeping up to perCluster keys per
// cluster (DefaultRedeliveryIDsPerCluster when ≤ 0) for ttl
// (DefaultRedeliveryTTL when ≤ 0), with the default global bounds.
func NewRedeliveries(perCluster int, ttl time.Duration, now Clock) *Redeliveries {
	return NewRedeliveriesBounded(perCluster, ttl, DefaultRedeliveryMaxClusters, DefaultRedeliveryMaxIDs, now)
}

// NewRedeliveriesBounded is NewRedeliveries with explicit global bounds:
// at most maxClusters clusters (DefaultRedeliveryMaxClusters when ≤ 0) and
// maxIDs keys in all (DefaultRedeliveryMaxIDs when ≤ 0).
func NewRedeliveriesBounded(perCluster int, ttl time.Duration, maxClusters, maxIDs int, now Clock) *Redeliveries {
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
	r := &Redeliveries{perCluster: perCluster, ttl: int64(ttl), clock: newEpoch(now), seed: maphash.MakeSeed()}
	shardClusters := max(1, (maxClusters+redeliveryShardCount-1)/redeliveryShardCount)
	shardIDs := max(perCluster, (maxIDs+redeliveryShardCount-1)/redeliveryShardCount)
	for i := range r.shards {
		r.shards[i] = redeliveryShard{
			clusters:    make(map[string]*seenSet),
			maxClusters: shardClusters,
			maxIDs:      shardIDs,
		}
	}
	return r
}

// FirstDeliveries records the keys of one pop response of clusterID and
// returns how many of them had not been delivered within the TTL: the
// number of messages to debit. A key seen again has its time refreshed, so
// a message redelivered every few minutes stays recognised. An empty key
// cannot be recognised and always counts (and is not recorded); a key
// repeated within ids counts once.
func (r *Redeliveries) FirstDeliveries(clusterID string, ids []string) int {
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

// Forget drops everything remembered for clusterID (its next deliveries are
// all charged).
func (r *Redeliveries) Forget(clusterID string) {
	s := &r.shards[maphash.String(r.seed, clusterID)%redeliveryShardCount]
	s.mu.Lock()
	if set := s.clusters[clusterID]; set != nil {
		s.remove(set)
	}
	s.mu.Unlock()
}

// Collect drops the clusters whose every key has outlived the TTL and
// returns how many it dropped. Run it with the bucket sweep; it is only
// about memory, since expired keys are ignored anyway.
func (r *Redeliveries) Collect() int {
	cutoff := r.clock.nanos() - r.ttl
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		// The cluster list is ordered by last use, least recent at the tail.
		for s.tail != nil && s.tail.lastUsed <= cutoff {
			s.remove(s.tail)
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// Clusters returns the number of clusters with remembered keys.
func (r *Redeliveries) Clusters() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += len(s.clusters)
		s.mu.Unlock()
	}
	return n
}

// IDs returns the number of keys remembered in all.
func (r *Redeliveries) IDs() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += s.ids
		s.mu.Unlock()
	}
	return n
}

// redeliveryShard holds the clusters of one shard in a list ordered by last
// use (head most recent), with its share of the global bounds.
type redeliveryShard struct {
	mu          sync.Mutex
	clusters    map[string]*seenSet
	head, tail  *seenSet
	ids         int
	maxClusters int
	maxIDs      int
}

// add creates the set of a new cluster, evicting the least recently used
// cluster when the shard is full. The shard must be locked.
func (s *redeliveryShard) add(clusterID string, perCluster int) *seenSet {
	for len(s.clusters) >= s.maxClusters && s.tail != nil {
		s.remove(s.tail)
	}
	set := &seenSet{
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

// remove drops a cluster's set.
func (s *redeliveryShard) remove(set *seenSet) {
	s.unlink(set)
	delete(s.clusters, set.id)
	s.ids -= set.len
}

// touch makes set the most recently used cluster.
func (s *redeliveryShard) touch(set *seenSet) {
	if s.head == set {
		return
	}
	s.unlink(set)
	s.pushFront(set)
}

func (s *redeliveryShard) pushFront(set *seenSet) {
	set.prev, set.next = nil, s.head
	if s.head != nil {
		s.head.prev = set
	}
	s.head = set
	if s.tail == nil {
		s.tail = set
	}
}

func (s *redeliveryShard) unlink(set *seenSet) {
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

// expire drops set's keys last delivered at or before cutoff.
func (s *redeliveryShard) expire(set *seenSet, cutoff int64) {
	for set.tail >= 0 && set.nodes[set.tail].at <= cutoff {
		set.dropTail()
		s.ids--
	}
}

// evictOne makes room for one key in current: its own oldest key when it
// is at its own bound, else the oldest key of the least recently used
// cluster that has one (a cluster left empty is dropped, unless it is
// current). It reports false when nothing could be evicted.
func (s *redeliveryShard) evictOne(current *seenSet) bool {
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

// seenSet is one cluster's remembered keys: a table from fingerprint to a
// node index, and the nodes in a doubly linked list ordered by delivery
// time (head newest), kept in one slice with a free list so that steady
// state allocates nothing.
type seenSet struct {
	id         string
	index      fpTable
	nodes      []seenNode
	head, tail int32 // -1 when empty
	free       int32 // first free node, -1 when none
	len, max   int
	lastUsed   int64
	prev, next *seenSet // the shard's cluster list
}

type seenNode struct {
	fp         uint64
	at         int64
	prev, next int32
}

// push adds a new key at the head.
func (c *seenSet) push(fp uint64, at int64) {
	var i int32
	if c.free >= 0 {
		i = c.free
		c.free = c.nodes[i].next
	} else {
		i = int32(len(c.nodes))
		c.nodes = append(c.nodes, seenNode{})
	}
	c.nodes[i] = seenNode{fp: fp, at: at, prev: -1, next: c.head}
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

// moveToFront makes node i the newest.
func (c *seenSet) moveToFront(i int32) {
	if c.head == i {
		return
	}
	n := &c.nodes[i]
	// i is not the head, so it has a predecessor.
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

// dropTail forgets the oldest key.
func (c *seenSet) dropTail() {
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
