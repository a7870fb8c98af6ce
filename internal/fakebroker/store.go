package fakebroker

import (
	"encoding/json"
	"sort"
	"time"
)

// tenant holds everything one tenant owns. All fields are guarded by Broker.mu.
type tenant struct {
	id      string
	queues  map[string]*queue       // by name
	parts   map[string]*partition   // by partition id
	leases  map[string]*lease       // by lease id, kept until they expire
	dlq     []*dlqEntry             // oldest first
	traces  []*traceEvent           // oldest first
	streams map[string]*streamQuery // by name

	kvBytes, timerBytes int64
	stored              int64 // messages ever stored (duplicates refused are not)

	// TenancyRust only: the tenant's grants by kind, KV entries, timer
	// count and ephemeral queues (rusttenancy.go).
	grants    map[string]bool
	kv        map[string]json.RawMessage
	timers    int
	ephemeral map[string][]json.RawMessage
}

// tenantLocked returns the tenant with id, creating it.
func (b *Broker) tenantLocked(id string) *tenant {
	t := b.tenants[id]
	if t == nil {
		t = &tenant{
			id:      id,
			queues:  make(map[string]*queue),
			parts:   make(map[string]*partition),
			leases:  make(map[string]*lease),
			streams: make(map[string]*streamQuery),

			grants:    make(map[string]bool),
			kv:        make(map[string]json.RawMessage),
			ephemeral: make(map[string][]json.RawMessage),
		}
		b.tenants[id] = t
	}
	return t
}

// queueOptions is a queue's configuration, with the broker's defaults.
type queueOptions struct {
	completedRetentionSeconds int
	deadLetterQueue           bool
	delayedProcessing         int
	dlqAfterMaxRetries        bool
	encryptionEnabled         bool
	leaseTime                 int
	maxSize                   int
	maxWaitTimeSeconds        int
	priority                  int
	retentionEnabled          bool
	retentionSeconds          int
	retryDelay                int
	retryLimit                int
	ttl                       int
	windowBuffer              int
}

func defaultOptions() queueOptions {
	return queueOptions{leaseTime: 300, retryDelay: 1000, retryLimit: 3, ttl: 3600}
}

// optionsFrom applies the recognised fields of a configure options object
// to the defaults.
func optionsFrom(m map[string]json.RawMessage) queueOptions {
	o := defaultOptions()
	o.completedRetentionSeconds = asInt(m["completedRetentionSeconds"], o.completedRetentionSeconds)
	o.deadLetterQueue = asBool(m["deadLetterQueue"], o.deadLetterQueue)
	o.delayedProcessing = asInt(m["delayedProcessing"], o.delayedProcessing)
	o.dlqAfterMaxRetries = asBool(m["dlqAfterMaxRetries"], o.dlqAfterMaxRetries)
	o.encryptionEnabled = asBool(m["encryptionEnabled"], o.encryptionEnabled)
	o.leaseTime = asInt(m["leaseTime"], o.leaseTime)
	o.maxSize = asInt(m["maxSize"], o.maxSize)
	o.maxWaitTimeSeconds = asInt(m["maxWaitTimeSeconds"], o.maxWaitTimeSeconds)
	o.priority = asInt(m["priority"], o.priority)
	o.retentionEnabled = asBool(m["retentionEnabled"], o.retentionEnabled)
	o.retentionSeconds = asInt(m["retentionSeconds"], o.retentionSeconds)
	o.retryDelay = asInt(m["retryDelay"], o.retryDelay)
	o.retryLimit = asInt(m["retryLimit"], o.retryLimit)
	o.ttl = asInt(m["ttl"], o.ttl)
	o.windowBuffer = asInt(m["windowBuffer"], o.windowBuffer)
	return o
}

func (o queueOptions) toJSON() obj {
	return obj{
		"completedRetentionSeconds": o.completedRetentionSeconds,
		"deadLetterQueue":           o.deadLetterQueue,
		"delayedProcessing":         o.delayedProcessing,
		"dlqAfterMaxRetries":        o.dlqAfterMaxRetries,
		"encryptionEnabled":         o.encryptionEnabled,
		"leaseTime":                 o.leaseTime,
		"maxSize":                   o.maxSize,
		"maxWaitTimeSeconds":        o.maxWaitTimeSeconds,
		"priority":                  o.priority,
		"retentionEnabled":          o.retentionEnabled,
		"retentionSeconds":          o.retentionSeconds,
		"retryDelay":                o.retryDelay,
		"retryLimit":                o.retryLimit,
		"ttl":                       o.ttl,
		"windowBuffer":              o.windowBuffer,
	}
}

// queue is one named queue of a tenant.
type queue struct {
	id        string
	name      string
	namespace string
	task      string
	createdAt time.Time
	opts      queueOptions
	parts     map[string]*partition // by name
	partList  []*partition          // creation order
	groups    map[string]*group     // consumer groups that popped from it

	// storedRetained is the retained bytes the TenancyRust slow lane last
	// stored for the queue (rusttenancy.go); 0 until the lane first runs.
	storedRetained int64
}

// group is a consumer group's subscription to one queue.
type group struct {
	name         string
	mode         string // "all" or "new"
	subscribedAt time.Time
	createdAt    time.Time
}

// partition is one FIFO lane of a queue.
type partition struct {
	q            *queue
	id           string
	name         string
	createdAt    time.Time
	msgs         []*message          // push order
	byTxn        map[string]*message // dedup by transaction id
	cursors      map[string]*cursor  // per consumer group
	lastActivity time.Time
}

// message is one stored message.
type message struct {
	id          string
	txn         string
	traceID     any // string or nil
	data        json.RawMessage
	createdAt   time.Time
	producerSub string // verified JWT sub of the pusher, "" without JWT auth
}

// cursor is a consumer group's progress on one partition.
type cursor struct {
	states       map[string]*msgState // by message id
	lease        *lease
	consumed     int
	batches      int
	lastConsumed time.Time
}

// doneKind tells whether a group has finished with a message, and how.
type doneKind int

const (
	notDone doneKind = iota
	doneCompleted
	doneDeadLettered
	doneFailed  // retries exhausted without a DLQ
	doneSkipped // before a subscriptionMode=new group's subscription
)

// msgState is a group's state for one message.
type msgState struct {
	done      doneKind
	retries   int
	retryAt   time.Time
	lastError string
}

// dlqEntry is a dead-lettered message.
type dlqEntry struct {
	group      string
	msg        *message
	p          *partition
	queueName  string
	errMessage string
	failedAt   time.Time
	retryCount int
}

// newQueueLocked creates queue name in t.
func (b *Broker) newQueueLocked(t *tenant, name string, now time.Time) *queue {
	q := &queue{
		id:        newUUIDv4(),
		name:      name,
		namespace: name,
		createdAt: now,
		opts:      defaultOptions(),
		parts:     make(map[string]*partition),
		groups:    make(map[string]*group),
	}
	t.queues[name] = q
	return q
}

// partitionLocked returns partition name of q, creating it.
func (t *tenant) partitionLocked(q *queue, name string, now time.Time) *partition {
	p := q.parts[name]
	if p == nil {
		p = &partition{
			q:         q,
			id:        newUUIDv4(),
			name:      name,
			createdAt: now,
			byTxn:     make(map[string]*message),
			cursors:   make(map[string]*cursor),
		}
		q.parts[name] = p
		q.partList = append(q.partList, p)
		t.parts[p.id] = p
	}
	return p
}

// deleteQueueLocked removes q and everything that refers to it.
func (t *tenant) deleteQueueLocked(q *queue) {
	delete(t.queues, q.name)
	for _, p := range q.partList {
		delete(t.parts, p.id)
	}
	for id, l := range t.leases {
		if l.q == q {
			delete(t.leases, id)
		}
	}
	kept := t.dlq[:0]
	for _, e := range t.dlq {
		if e.p.q != q {
			kept = append(kept, e)
		}
	}
	t.dlq = kept
}

// sortedQueues returns t's queues, newest first (the broker's listing order).
func (t *tenant) sortedQueues() []*queue {
	out := make([]*queue, 0, len(t.queues))
	for _, q := range t.queues {
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].createdAt.Equal(out[j].createdAt) {
			return out[i].createdAt.After(out[j].createdAt)
		}
		return out[i].name < out[j].name
	})
	return out
}

// cursor returns the cursor of group g on p, creating it.
func (p *partition) cursor(g string) *cursor {
	c := p.cursors[g]
	if c == nil {
		c = &cursor{states: make(map[string]*msgState)}
		p.cursors[g] = c
	}
	return c
}

// state returns the state of message id, creating it.
func (c *cursor) state(id string) *msgState {
	s := c.states[id]
	if s == nil {
		s = &msgState{}
		c.states[id] = s
	}
	return s
}

// doneWith reports how group g finished with m (notDone if it has not).
func (p *partition) doneWith(g string, m *message) doneKind {
	if c := p.cursors[g]; c != nil {
		if s := c.states[m.id]; s != nil {
			return s.done
		}
	}
	return notDone
}

// leasedBy reports whether m is in an active lease of group g.
func (p *partition) leasedBy(g string, m *message, now time.Time) bool {
	c := p.cursors[g]
	if c == nil || !c.lease.activeOn(p, now) {
		return false
	}
	return c.lease.part(p).msgIDs[m.id]
}

// removeMessage deletes m from p.
func (p *partition) removeMessage(m *message) {
	for i, x := range p.msgs {
		if x == m {
			p.msgs = append(p.msgs[:i], p.msgs[i+1:]...)
			break
		}
	}
	if p.byTxn[m.txn] == m {
		delete(p.byTxn, m.txn)
	}
	for _, c := range p.cursors {
		delete(c.states, m.id)
	}
}

// findMessage looks a message up by partition id and transaction id.
func (t *tenant) findMessage(partitionID, txn string) (*partition, *message) {
	p := t.parts[partitionID]
	if p == nil {
		return nil, nil
	}
	return p, p.byTxn[txn]
}
