package meter

import (
	"hash/maphash"
	"time"
)

// Unflushed is a cluster's usage of one minute and operation class that is
// not in usage_minutes yet: recorded in memory, or journaled and waiting for
// the flush of its minute.
type Unflushed struct {
	Minute                        time.Time // UTC, the start of the minute
	Op                            Op
	Reqs, Msgs, BytesIn, BytesOut int64
	Unanswered                    int64 // of Msgs: billed without the broker's answer
}

// Unflushed returns the cluster's usage not yet written to usage_minutes,
// so that a reader can add it to what the table holds and see usage up to
// now: the shards' counts plus the journaled batches the meter holds (usage
// handed to the spool after a failed write is not included). It takes the
// journal lock and the cluster's shard lock, so a checkpoint never shows a
// count twice. Rows being written at that very moment are in neither place
// for an instant; nothing is ever in both.
func (m *Meter) Unflushed(clusterID string) []Unflushed {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	sums := make(map[minuteOp]counters)
	for k, t := range m.heldIndex[clusterID] {
		sums[k] = t.counters
	}
	sh := &m.shards[maphash.String(m.seed, clusterID)%numShards]
	sh.mu.Lock()
	for k, c := range sh.m {
		if k.cluster != clusterID || !c.dirty {
			continue
		}
		mo := minuteOp{k.minute, k.op}
		s := sums[mo]
		s.reqs += c.reqs
		s.msgs += c.msgs
		s.bytesIn += c.bytesIn
		s.bytesOut += c.bytesOut
		s.unanswered += c.unanswered
		sums[mo] = s
	}
	sh.mu.Unlock()
	out := make([]Unflushed, 0, len(sums))
	for k, c := range sums {
		out = append(out, Unflushed{
			Minute: time.Unix(k.minute*60, 0).UTC(), Op: k.op,
			Reqs: c.reqs, Msgs: c.msgs, BytesIn: c.bytesIn, BytesOut: c.bytesOut, Unanswered: c.unanswered,
		})
	}
	return out
}
