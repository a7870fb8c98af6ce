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
// cluster's message bucket: a message the broker hands out again (its lease
// expired, or it was nacked) was paid for when it was first delivered, and
// a consumer must not pay for it twice. A pop response carries no retry
// count, so it remembers, per cluster, the keys of recently delivered
// messages (a transactionId, or partitionId+transactionId: any string that
// names one message) and reports how many of a response's keys are new.
//
// Memory is bounded three ways: at most perCluster keys per cluster (least
// recently delivered evicted first), at most maxClusters clusters and at
// most maxIDs keys in all (least recently active cluster's oldest keys
// evicted first). A key costs 37 to 107 bytes whatever its length (its
// entries in a ring kept a quarter to all full, and its slot in a table
// kept 3/8 to 3/4 full; about 85 at the 50,000 bound), because only a
// 64-bit fingerprint of it is kept, so the defaults (50,000 per cluster,
// 4,096 clusters, 2,000,000 in all) hold about 170 MB, at most about
// 210 MB. The work per key is O(1), amortized. Clusters and the global budgets are split over 16
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
	return r.firstDeliveries(clusterID, len(ids), func(_ *redeliveryShard, fps []uint64, from int) {
		for k := range fps {
			if id := ids[from+k]; id != "" {
				fps[k] = fingerprint(r.seed, id)
			} else {
				fps[k] = 0
			}
		}
	})
}

// DeliveryKeys is the redelivery keys of one pop answer, spelled one at a
// time into a buffer: a pop's reading hands them over without a string
// per key (meter.PopAnswer).
type DeliveryKeys interface {
	Keys() int
	AppendKey(dst []byte, i int) []byte
}

// FirstDeliveriesOf is FirstDeliveries of the keys keys spells, exactly:
// a key's fingerprint is the same spelled into bytes as held in a string.
func (r *Redeliveries) FirstDeliveriesOf(clusterID string, keys DeliveryKeys) int {
	return r.firstDeliveries(clusterID, keys.Keys(), func(s *redeliveryShard, fps []uint64, from int) {
		for k := range fps {
			s.scratch = keys.AppendKey(s.scratch[:0], from+k)
			if len(s.scratch) > 0 {
				fps[k] = fingerprintBytes(r.seed, s.scratch)
			} else {
				fps[k] = 0
			}
		}
		if cap(s.scratch) > maxKeyScratch {
			s.scratch = nil
		}
	})
}

// maxKeyScratch bounds the key buffer a shard keeps.
const maxKeyScratch = 4 << 10

// firstDeliveries is FirstDeliveries of n keys, whose fingerprints
// fingerprints writes into fps from the from-th key on (0 for an empty
// key), under the shard's lock.
func (r *Redeliveries) firstDeliveries(clusterID string, n int, fingerprints func(s *redeliveryShard, fps []uint64, from int)) int {
	if n == 0 {
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
	for from := 0; from < n; {
		fps := s.fps[:min(n-from, len(s.fps))]
		// Fingerprint the keys first, touching their slots: the loads do
		// not wait on one another, so the processor has them in flight
		// at once and the loop below finds the slots in cache.
		fingerprints(s, fps, from)
		from += len(fps)
		set.index.touch(fps)
		if set.len+len(fps) > set.max {
			// New keys evict the oldest, whose slots are known already:
			// the next entries from the tail.
			set.touchTail(len(fps))
		}
		for _, fp := range fps {
			if fp == 0 {
				first++ // an empty key
				continue
			}
			if slot := set.index.find(fp); slot != nil {
				set.deliverAgain(slot, fp, now)
				continue
			}
			first++
			for set.len >= set.max || s.ids >= s.maxIDs {
				if !s.evictOne(set) {
					break
				}
			}
			set.add(fp, now)
			s.ids++
		}
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
	scratch     []byte // a key being fingerprinted (FirstDeliveriesOf)
	// fps is the fingerprints of the keys being recorded, 64 at a time:
	// held here, not on the stack, because a callback writes them.
	fps [64]uint64
}

// add creates the set of a new cluster, evicting the least recently used
// cluster when the shard is full. The shard must be locked.
func (s *redeliveryShard) add(clusterID string, perCluster int) *seenSet {
	for len(s.clusters) >= s.maxClusters && s.tail != nil {
		s.remove(s.tail)
	}
	set := &seenSet{id: strings.Clone(clusterID), max: perCluster}
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
	s.ids -= set.expire(cutoff)
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

// seenSet is one cluster's remembered keys: a ring of deliveries in time
// order (the oldest at its tail) and a table from a key's fingerprint to
// its entry in the ring. A key delivered again gets a new entry at the
// head and its old one is marked dead, so a redelivery touches the key's
// slot, its old entry and the head, where a linked list of nodes touched
// four places in memory; a new key evicts from the tail, which is read in
// order. Dead entries are passed over at the tail, and when the ring is
// full they are squeezed out in place (or the ring doubles, when more
// than half of it is live), so steady state allocates nothing and each
// delivery moves at most one entry on average.
type seenSet struct {
	id         string
	index      fpTable     // fingerprint → ring index of its live entry
	ring       []seenEntry // length a power of two (or nil)
	tail       int         // ring index of the oldest entry
	used       int         // entries from the tail on, live or dead
	len, max   int         // live entries
	lastUsed   int64
	prev, next *seenSet // the shard's cluster list
}

// seenEntry is one delivery; fp 0 marks it dead (delivered again since,
// or dropped).
type seenEntry struct {
	fp uint64
	at int64
}

// fingerprint is a key's 64-bit hash, never 0 (the dead mark).
func fingerprint(seed maphash.Seed, key string) uint64 {
	return max(maphash.String(seed, key), 1)
}

// fingerprintBytes is fingerprint of a key spelled in bytes: maphash
// hashes the same bytes alike, in a string or a slice.
func fingerprintBytes(seed maphash.Seed, key []byte) uint64 {
	return max(maphash.Bytes(seed, key), 1)
}

// add records a new key, delivered at at.
func (c *seenSet) add(fp uint64, at int64) {
	c.index.put(fp, int32(c.append(fp, at)))
	c.len++
}

// deliverAgain moves the key of slot to the head, delivered at at.
func (c *seenSet) deliverAgain(slot *fpSlot, fp uint64, at int64) {
	c.ring[slot.node-1].fp = 0
	// append may squeeze the ring, which rewrites the slots of the live
	// entries (not this one, dead now) in place: slot stays valid.
	slot.node = int32(c.append(fp, at)) + 1
}

// append writes an entry at the head and returns its ring index.
func (c *seenSet) append(fp uint64, at int64) int {
	if c.used == len(c.ring) {
		c.makeRoom()
	}
	i := (c.tail + c.used) & (len(c.ring) - 1)
	c.ring[i] = seenEntry{fp: fp, at: at}
	c.used++
	return i
}

// makeRoom squeezes the dead entries out of a full ring, in place, or
// moves the live ones to a ring twice as long when more than half of it
// is live; the table follows the entries that moved.
func (c *seenSet) makeRoom() {
	mask := len(c.ring) - 1
	if 2*c.len >= len(c.ring) {
		ring := make([]seenEntry, max(16, 2*len(c.ring)))
		n := 0
		for k := range c.used {
			if e := c.ring[(c.tail+k)&mask]; e.fp != 0 {
				ring[n] = e
				c.index.set(e.fp, int32(n)+1)
				n++
			}
		}
		c.ring, c.tail, c.used = ring, 0, n
		return
	}
	// Writing at tail+n never passes the entry read at tail+k (n ≤ k).
	n := 0
	for k := range c.used {
		e := c.ring[(c.tail+k)&mask]
		if e.fp == 0 {
			continue
		}
		if n != k {
			to := (c.tail + n) & mask
			c.ring[to] = e
			c.index.set(e.fp, int32(to)+1)
		}
		n++
	}
	c.used = n
}

// touchTail loads the slots of the n oldest entries, ahead of their
// eviction (see fpTable.touch).
func (c *seenSet) touchTail(n int) {
	if c.index.n == 0 {
		return
	}
	var sum uint64
	mask := len(c.ring) - 1
	for k := range min(n, c.used) {
		if fp := c.ring[(c.tail+k)&mask].fp; fp != 0 {
			sum += c.index.slots[c.index.home(fp)].fp
		}
	}
	c.index.touched += sum
}

// dropTail forgets the oldest live key; the set holds one.
func (c *seenSet) dropTail() {
	for {
		e := c.ring[c.tail]
		c.tail = (c.tail + 1) & (len(c.ring) - 1)
		c.used--
		if e.fp != 0 {
			c.index.remove(e.fp)
			c.len--
			break
		}
	}
	c.releaseIfEmpty()
}

// expire forgets the keys last delivered at or before cutoff and returns
// how many it forgot.
func (c *seenSet) expire(cutoff int64) int {
	n := 0
	for c.used > 0 {
		e := c.ring[c.tail]
		if e.fp != 0 && e.at > cutoff {
			break
		}
		c.tail = (c.tail + 1) & (len(c.ring) - 1)
		c.used--
		if e.fp != 0 {
			c.index.remove(e.fp)
			c.len--
			n++
		}
	}
	c.releaseIfEmpty()
	return n
}

// releaseIfEmpty lets the ring go once no key is left (its entries are
// all dead then).
func (c *seenSet) releaseIfEmpty() {
	if c.len == 0 {
		c.ring, c.tail, c.used = nil, 0, 0
	}
}
