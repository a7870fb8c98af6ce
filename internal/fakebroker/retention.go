package fakebroker

import "time"

// retainedBytes is the payload bytes q still stores.
func (q *queue) retainedBytes() int64 {
	var n int64
	for _, p := range q.partList {
		for _, m := range p.msgs {
			n += int64(len(m.data))
		}
	}
	return n
}

// sweepRetention evicts messages the queue's retention options expire:
// with retentionEnabled, every message older than retentionSeconds; with
// completedRetentionSeconds, messages queue mode completed that long ago.
func (q *queue) sweepRetention(now time.Time) {
	o := q.opts
	byAge := o.retentionEnabled && o.retentionSeconds > 0
	byCompletion := o.completedRetentionSeconds > 0
	if !byAge && !byCompletion {
		return
	}
	for _, p := range q.partList {
		for _, m := range append([]*message(nil), p.msgs...) {
			age := now.Sub(m.createdAt)
			evict := byAge && age >= time.Duration(o.retentionSeconds)*time.Second
			if !evict && byCompletion && p.doneWith(QueueMode, m) == doneCompleted &&
				age >= time.Duration(o.completedRetentionSeconds)*time.Second {
				evict = true
			}
			if evict {
				p.removeMessage(m)
			}
		}
	}
}
