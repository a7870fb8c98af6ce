package meter

import (
	"hash/maphash"
	"time"
)

// Unflushed is a cluster's usage of one minute and operation class that is
// still in memory: the open minute, and closed minutes not written yet.
type Unflushed struct {
	Minute                        time.Time // UTC, the start of the minute
	Op                            Op
	Reqs, Msgs, BytesIn, BytesOut int64
}

// Unflushed returns the cluster's usage not yet written to usage_minutes,
// so that a reader can add it to what the table holds and see usage up to
// now. It takes only the cluster's shard lock. Rows being written at that
// very moment are in neither place for an instant; nothing is ever in
// both.
func (m *Meter) Unflushed(clusterID string) []Unflushed {
	sh := &m.shards[maphash.String(m.seed, clusterID)%numShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []Unflushed
	for k, c := range sh.m {
		if k.cluster != clusterID {
			continue
		}
		out = append(out, Unflushed{
			Minute: time.Unix(k.minute*60, 0).UTC(), Op: k.op,
			Reqs: c.reqs, Msgs: c.msgs, BytesIn: c.bytesIn, BytesOut: c.bytesOut,
		})
	}
	return out
}
