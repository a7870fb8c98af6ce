package fakebroker

import (
	"sort"
	"time"
)

// counts are the message statistics of a partition or queue for queue mode.
type counts struct {
	pending, processing, completed, failed, deadLetter, total int
}

func (c *counts) add(o counts) {
	c.pending += o.pending
	c.processing += o.processing
	c.completed += o.completed
	c.failed += o.failed
	c.deadLetter += o.deadLetter
	c.total += o.total
}

func (c counts) toJSON() obj {
	return obj{
		"completed": c.completed, "deadLetter": c.deadLetter, "failed": c.failed,
		"pending": c.pending, "processing": c.processing, "total": c.total,
	}
}

// stats counts p's messages from queue mode's point of view.
func (p *partition) stats(now time.Time) counts {
	var c counts
	for _, m := range p.msgs {
		c.total++
		switch p.doneWith(QueueMode, m) {
		case doneCompleted, doneSkipped:
			c.completed++
		case doneDeadLettered:
			c.deadLetter++
		case doneFailed:
			c.failed++
		default:
			if p.leasedBy(QueueMode, m, now) {
				c.processing++
			} else {
				c.pending++
			}
		}
	}
	return c
}

// stats sums the statistics of q's partitions.
func (q *queue) stats(now time.Time) counts {
	var c counts
	for _, p := range q.partList {
		c.add(p.stats(now))
	}
	return c
}

// statusOf names m's state for group g as the message listings do.
func (p *partition) statusOf(g string, m *message, now time.Time) string {
	switch p.doneWith(g, m) {
	case doneCompleted, doneSkipped:
		return "completed"
	case doneDeadLettered:
		return "dead_letter"
	case doneFailed:
		return "failed"
	}
	if p.leasedBy(g, m, now) {
		return "processing"
	}
	return "pending"
}

// groupNames returns the names of q's consumer groups, sorted.
func (q *queue) groupNames() []string {
	names := make([]string, 0, len(q.groups))
	for n := range q.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// busGroups counts q's consumer groups other than queue mode.
func (q *queue) busGroups() int {
	n := 0
	for name := range q.groups {
		if name != QueueMode {
			n++
		}
	}
	return n
}

// modeJSON describes how a queue is consumed, as message listings report it:
// "none" before anyone consumed it (measured on 0.15.1).
func modeJSON(bus int, hasQueueMode bool) obj {
	typ := "none"
	switch {
	case bus > 0 && hasQueueMode:
		typ = "hybrid"
	case bus > 0:
		typ = "bus"
	case hasQueueMode:
		typ = "queue"
	}
	return obj{"busGroupsCount": bus, "hasQueueMode": hasQueueMode, "type": typ}
}
