package limits

import (
	"strconv"
	"sync"
)

// This file holds what the gateway learns from a produce body (push,
// transaction, the streams cycle's sink items) and the hard size caps it
// applies to it. producebody.go reads the bodies.

// QueuePartition is one (queue, partition) pair a produce body writes to.
type QueuePartition struct{ Queue, Partition string }

// DefaultPartition is the partition of an item that names none.
const DefaultPartition = "Default"

// ProduceItem is one counted item of a produce body: where it goes and the
// length of its payload's raw JSON text as sent.
type ProduceItem struct {
	Queue, Partition string
	PayloadBytes     int
}

// ProduceBatch is what the gateway needs to know about a produce body.
type ProduceBatch struct {
	// Items is the number of counted items.
	Items int
	// Pairs are the distinct (queue, partition) pairs, in first-seen order.
	Pairs []QueuePartition
	// PairItems[i] is how many items went to Pairs[i] (metering bills a
	// streams cycle per group).
	PairItems []int
	// PayloadBytes is the sum of the items' payload sizes.
	PayloadBytes int64
	// Identified is how many push items carry a transactionId that is a
	// non-empty string: those the broker deduplicates, so that sending
	// them again stores nothing twice.
	Identified int
	// Heaviest is the first item with the largest payload: its index (among
	// counted items; for a streams cycle, its position in push_items) and its
	// payload size. Index is -1 when there are no items.
	Heaviest struct{ Index, Bytes int }

	// records are the items that set a new largest payload, in order. The
	// first item over any payload cap is one of them (every earlier item is
	// smaller), so CheckProduce can name it without a per-item list.
	records []sizeRecord
	// stateHeaviest is a streams cycle's largest state_ops value (index -1
	// when there is none), which CheckCycle caps like a payload.
	stateHeaviest sizeRecord
	// pairIdx indexes Pairs once there are too many to scan.
	pairIdx map[string]int
	keyBuf  []byte
	// room is the pooled storage the lists start in (batchRoom), handed
	// back by Release.
	room *batchRoom
}

type sizeRecord struct{ index, bytes int }

// The first capacities of a batch's lists (batchRoom).
const (
	initialRecords = 8
	initialPairs   = 4
)

// produceLinearPairs is how many pairs are searched linearly before an index
// map is built: most bodies write to one or a few pairs.
const produceLinearPairs = 8

func (b *ProduceBatch) reset() {
	b.Items, b.PayloadBytes, b.Identified = 0, 0, 0
	b.Pairs = b.Pairs[:0]
	b.PairItems = b.PairItems[:0]
	b.Heaviest.Index, b.Heaviest.Bytes = -1, 0
	b.records = b.records[:0]
	b.pairIdx = nil
	b.stateHeaviest = sizeRecord{-1, 0}
}

// add counts one item at position index (the index reported for it).
func (b *ProduceBatch) add(queue, partition []byte, payloadBytes, index int) {
	b.count(payloadBytes, index)
	b.addPair(queue, partition)
}

// count counts one item without a (queue, partition) pair: an ephemeral
// message or a KV or timers operation, which no queue admission applies to.
func (b *ProduceBatch) count(payloadBytes, index int) {
	b.Items++
	b.PayloadBytes += int64(payloadBytes)
	if b.Heaviest.Index < 0 || payloadBytes > b.Heaviest.Bytes {
		b.Heaviest.Index, b.Heaviest.Bytes = index, payloadBytes
		if b.records == nil {
			b.makeRoom()
		}
		b.records = append(b.records, sizeRecord{index, payloadBytes})
	}
}

func (b *ProduceBatch) addPair(queue, partition []byte) {
	if b.pairIdx == nil {
		for i, p := range b.Pairs {
			if sameName(p.Partition, partition) && p.Queue == string(queue) {
				b.PairItems[i]++
				return
			}
		}
		if b.Pairs == nil {
			b.makeRoom()
		}
		b.Pairs = append(b.Pairs, b.newPair(queue, partition))
		b.PairItems = append(b.PairItems, 1)
		if len(b.Pairs) > produceLinearPairs {
			b.pairIdx = make(map[string]int, 2*len(b.Pairs))
			for i, p := range b.Pairs {
				b.pairIdx[string(b.pairKey([]byte(p.Queue), []byte(p.Partition)))] = i
			}
		}
		return
	}
	key := b.pairKey(queue, partition)
	if i, seen := b.pairIdx[string(key)]; seen {
		b.PairItems[i]++
		return
	}
	b.Pairs = append(b.Pairs, b.newPair(queue, partition))
	b.PairItems = append(b.PairItems, 1)
	b.pairIdx[string(key)] = len(b.Pairs) - 1
}

// sameName is name == string(raw), looking at the last byte first: the
// partitions of one body often differ only there (customer-1, customer-2).
func sameName(name string, raw []byte) bool {
	return len(name) == len(raw) && (len(raw) == 0 || name[len(name)-1] == raw[len(raw)-1]) && name == string(raw)
}

// newPair is the pair's names as strings, in one allocation at most: the
// queue is the last pair's when it names the same one (a batch's pairs are
// mostly partitions of one queue), the default partition is the constant,
// and otherwise both names share one string.
func (b *ProduceBatch) newPair(queue, partition []byte) QueuePartition {
	if r := b.room; r != nil {
		// The names of the room's last batch: a producer mostly writes to
		// the pairs it wrote to before.
		for _, p := range r.prev[:r.nPrev] {
			if sameName(p.Partition, partition) && p.Queue == string(queue) {
				return p
			}
		}
	}
	if n := len(b.Pairs); n > 0 && b.Pairs[n-1].Queue == string(queue) {
		return QueuePartition{b.Pairs[n-1].Queue, partitionName(partition)}
	}
	if string(partition) == DefaultPartition {
		return QueuePartition{string(queue), DefaultPartition}
	}
	var room [64]byte
	both := string(append(append(room[:0], queue...), partition...))
	return QueuePartition{both[:len(queue)], both[len(queue):]}
}

// batchRoom is a batch's first room for its pairs, their counts and its
// size records, in one piece: a usual batch needs no more, whatever its
// length (its items go to a few pairs, and their payload sizes set few new
// records). Rooms are pooled: a batch's owner hands its room back with
// Release once the batch is read, so a reading allocates nothing.
type batchRoom struct {
	pairs   [initialPairs]QueuePartition
	counts  [initialPairs]int
	records [initialRecords]sizeRecord
	// prev are the first pairs of the batch that held the room last: a
	// batch naming one of them again takes its strings instead of copying
	// the names once more.
	prev  [initialPairs]QueuePartition
	nPrev int
}

var batchRooms = sync.Pool{New: func() any { return new(batchRoom) }}

func (b *ProduceBatch) makeRoom() {
	r := batchRooms.Get().(*batchRoom)
	b.room = r
	b.Pairs, b.PairItems, b.records = r.pairs[:0], r.counts[:0], r.records[:0]
}

// Release hands the batch's pooled storage back, for the next batch read to
// use. After it, b holds no pairs, and Pairs and PairItems of any copy of b
// taken before must not be read (the pair names themselves are strings,
// which stay valid). Releasing a batch twice, or one of no room, does
// nothing; a batch never released is collected as any value is.
func (b *ProduceBatch) Release() {
	r := b.room
	if r == nil {
		return
	}
	b.room = nil
	r.nPrev = copy(r.prev[:], b.Pairs)
	b.Pairs, b.PairItems, b.records = nil, nil, nil
	batchRooms.Put(r)
}

// partitionName is string(partition), without a copy for the partition
// nearly every item names (or gets by naming none).
func partitionName(partition []byte) string {
	if string(partition) == DefaultPartition {
		return DefaultPartition
	}
	return string(partition)
}

// pairKey is an unambiguous map key for a pair: the queue's length, then both
// names (names may hold any character, NUL included).
func (b *ProduceBatch) pairKey(queue, partition []byte) []byte {
	k := strconv.AppendInt(b.keyBuf[:0], int64(len(queue)), 10)
	k = append(k, ':')
	k = append(k, queue...)
	k = append(k, partition...)
	b.keyBuf = k
	return k
}

// SizeRefusal is a produce body over a hard size cap: always 413
// payload_too_large, in shadow mode too.
type SizeRefusal struct{ Message string }

// DefaultMaxBatchItems is the batch cap of a plan without max_batch_items,
// when the gateway is not configured with another.
const DefaultMaxBatchItems = 10000

// CheckProduce applies the hard size caps to a parsed push or transaction
// (and to an ephemeral push and a KV or timers batch, whose items are its
// messages and operations):
// first the per-item payload cap (naming the first item over it), then the
// batch cap (max_batch_items, else defaultMaxBatch, else
// DefaultMaxBatchItems when defaultMaxBatch is not positive). It returns nil
// when the body is within both.
func CheckProduce(b ProduceBatch, lim Effective, defaultMaxBatch int) *SizeRefusal {
	if c := lim.MaxPayloadBytes; !c.IsUnlimited() {
		for _, r := range b.records {
			if int64(r.bytes) > int64(c) {
				return &SizeRefusal{Message: "item " + strconv.Itoa(r.index) + ": payload " +
					strconv.Itoa(r.bytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
			}
		}
	}
	return batchCapRefusal(b.Items, lim, defaultMaxBatch)
}

// batchCapRefusal applies the batch cap (max_batch_items, else
// defaultMaxBatch, else DefaultMaxBatchItems) to a body of items items.
func batchCapRefusal(items int, lim Effective, defaultMaxBatch int) *SizeRefusal {
	maxItems := int64(lim.MaxBatchItems)
	if lim.MaxBatchItems.IsUnlimited() {
		maxItems = int64(defaultMaxBatch)
		if maxItems <= 0 {
			maxItems = DefaultMaxBatchItems
		}
	}
	if int64(items) > maxItems {
		return &SizeRefusal{Message: "batch of " + strconv.Itoa(items) + " items exceeds max_batch_items (" +
			strconv.FormatInt(maxItems, 10) + ")"}
	}
	return nil
}

// CheckCycle applies the hard size caps to a parsed streams cycle: the
// per-item payload cap against the heaviest sink item, named by its
// position in push_items, and against the largest state_ops value, then
// the batch cap to the sink items, as for a push.
func CheckCycle(b ProduceBatch, lim Effective, defaultMaxBatch int) *SizeRefusal {
	c := lim.MaxPayloadBytes
	if !c.IsUnlimited() && b.Heaviest.Index >= 0 && int64(b.Heaviest.Bytes) > int64(c) {
		return &SizeRefusal{Message: "push_items[" + strconv.Itoa(b.Heaviest.Index) + "]: payload " +
			strconv.Itoa(b.Heaviest.Bytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
	}
	if s := b.stateHeaviest; !c.IsUnlimited() && s.index >= 0 && int64(s.bytes) > int64(c) {
		return &SizeRefusal{Message: "state_ops[" + strconv.Itoa(s.index) + "]: value " +
			strconv.Itoa(s.bytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
	}
	return batchCapRefusal(b.Items, lim, defaultMaxBatch)
}
