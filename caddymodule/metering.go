package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// billing is what metering needs to know about one forwarded request: its
// op class and, for routes billed from the response body, which rule.
type billing uint8

const (
	billPlain billing = iota // reqs only
	billPush
	billEphemeralPush
	billTransaction
	billPop
	billCycle
	billReplay
)

// billingOf classifies a forwarded request for metering.
func billingOf(r *http.Request, st *requestState) (meter.Op, billing) {
	path := r.URL.Path
	switch st.route.Class {
	case tenancy.ClassProduce:
		if path == "/api/v1/transaction" {
			return meter.OpTxn, billTransaction
		}
		return meter.OpPush, billPush
	case tenancy.ClassConsume:
		if strings.HasPrefix(path, "/api/v1/pop/queue/") {
			return meter.OpDelivery, billPop
		}
		return meter.OpRead, billPlain
	case tenancy.ClassQueueAdmin:
		if tenancy.IsDLQReplay(r.Method, r.URL.EscapedPath()) {
			return meter.OpConfigure, billReplay
		}
		return meter.OpConfigure, billPlain
	case tenancy.ClassGated:
		switch {
		case st.route.Feature == tenancy.FeatureEphemeral && path == "/api/v1/ephemeral/push":
			return meter.OpPush, billEphemeralPush
		case st.route.Feature == tenancy.FeatureEphemeral && path == "/api/v1/ephemeral/pop":
			return meter.OpDelivery, billPop
		case st.route.Feature == tenancy.FeatureStreams && st.route.Op == tenancy.GatedMixed && st.cycle.Items > 0:
			return meter.OpRead, billCycle
		}
	}
	return meter.OpRead, billPlain
}

// exchangeFate is how a forwarded request's exchange with the cell ended,
// as billing sees it.
type exchangeFate uint8

const (
	exchangeAnswered   exchangeFate = iota // the cell's answer came (the client may not have taken it)
	exchangeFailed                         // no answer, and the request never reached the cell
	exchangeUnanswered                     // no whole answer, though the request may have reached the cell
	exchangeCut                            // a pop's answer broke off after it began: billed what it had begun
)

// meteredResponse passes the cell's response to the client as it comes,
// counts its bytes, and reads what billing needs: push, transaction,
// cycle and replay answers are tallied as they stream (at any size, never
// copied); for pops and ephemeral pushes it keeps a copy (up to
// meter.MaxBilledBody). It also notes when the response head arrives,
// which is when a parked long-poll stops waiting.
//
// On a detached route (detaches) a client that stops taking the answer
// does not stop it: the write error is noted, not returned, and the rest
// of the answer is read for billing only, so reverse_proxy reads it to its
// end (bounded by the upstream timeout).
type meteredResponse struct {
	caddyhttp.ResponseWriterWrapper
	started    bool
	keep       bool
	detached   bool
	clientGone bool // a write to the client failed: the rest is only read
	status     int
	written    int64        // bytes the client was sent
	body       []byte       // the kept copy: *kept, while there is one
	kept       *[]byte      // the pooled buffer holding it
	tally      *answerTally // pushes and transactions only: every request's state stays small
	// rule is the route's billing. A pop answer too large to keep is
	// read as it streams on, from the copy's overflow on: its count and
	// redelivery keys (pops).
	rule billing
	// pop is the reading of a pop answer kept whole, once made (for the
	// error scrub, before billing), and popRead the length it read.
	pop     *meter.PopAnswer
	popRead int
	pops    *meter.PopKeys
	cycle   *meter.CycleTally  // a cycle's answer, read as it streams
	replay  *meter.ReplayTally // a replay's answer, read as it streams
	onHead  func()
}

// answerTally reads a push or a transaction answer as it streams; pooled
// (answerTallies), of which the route uses one half.
type answerTally struct {
	rule billing
	push meter.PushTally
	txn  meter.TxnTally
}

// answerTallies keeps the tallies (720 bytes each) from being allocated
// on every push: one is taken when the answer is to be tallied and given
// back with the request's other buffers.
var answerTallies = sync.Pool{New: func() any { return new(answerTally) }}

func (t *answerTally) Write(p []byte) {
	if t.rule == billPush {
		_, _ = t.push.Write(p)
	} else {
		_, _ = t.txn.Write(p)
	}
}

// tallyAnswers makes the answer of a push, a transaction, a cycle or a
// replay tallied as it streams instead of kept: no request may escape
// billing by the size of its answer.
func (w *meteredResponse) tallyAnswers(rule billing, st *requestState) {
	switch rule {
	case billCycle:
		w.keep, w.cycle = false, meter.NewCycleTally(cycleGroups(st))
	case billReplay:
		w.keep, w.replay = false, meter.NewReplayTally()
	case billPush, billTransaction:
		w.keep = false
		if w.tally == nil {
			w.tally = answerTallies.Get().(*answerTally)
		}
		w.tally.rule = rule
		w.tally.push.Reset()
		w.tally.txn.Reset()
	}
}

func (w *meteredResponse) start(status int) {
	if !w.started {
		w.started, w.status = true, status
		if w.onHead != nil {
			w.onHead()
		}
	}
}

func (w *meteredResponse) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		w.ResponseWriterWrapper.WriteHeader(status)
		return
	}
	w.start(status)
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *meteredResponse) Write(b []byte) (int, error) {
	w.start(http.StatusOK)
	if w.clientGone {
		w.read(b)
		return len(b), nil
	}
	n, err := w.ResponseWriterWrapper.Write(b)
	w.written += int64(n)
	if err != nil && w.detached {
		w.clientGone = true
		w.read(b)
		return len(b), nil
	}
	w.read(b[:n])
	return n, err
}

// read takes a piece of the answer for billing.
func (w *meteredResponse) read(b []byte) {
	n := len(b)
	if w.tally != nil {
		w.tally.Write(b[:n])
	}
	if s := w.streamed(); s != nil {
		_, _ = s.Write(b[:n])
	}
	if w.keep {
		if len(w.body)+n > meter.MaxBilledBody {
			if w.rule == billPop {
				w.pops = meter.NewPopKeys()
			}
			if s := w.streamed(); s != nil {
				_, _ = s.Write(w.body)
				_, _ = s.Write(b[:n])
			}
			w.keep = false
			w.releaseKept()
		} else {
			w.keepAnswer(b[:n])
		}
	}
}

// streamed is the reader of an answer read as it streams, not kept (a
// cycle's, a replay's, a pop's too large to keep), or nil.
func (w *meteredResponse) streamed() interface{ Write([]byte) (int, error) } {
	switch {
	case w.pops != nil:
		return w.pops
	case w.cycle != nil:
		return w.cycle
	case w.replay != nil:
		return w.replay
	}
	return nil
}

// keepAnswer appends to the copy billing reads, in a pooled buffer sized
// from the answer's Content-Length when it has one, so that a pop's copy
// is allocated once (and reused), not grown and copied as it streams.
func (w *meteredResponse) keepAnswer(b []byte) {
	if w.kept == nil {
		hint := minPooledBody
		if v := w.Header()["Content-Length"]; len(v) == 1 {
			if n, err := strconv.Atoi(v[0]); err == nil && n > 0 && n <= meter.MaxBilledBody {
				hint = n
			}
		}
		w.kept = getBodyBuffer(max(hint, len(b)))
	}
	if len(w.body)+len(b) > cap(*w.kept) {
		grown := getBodyBuffer(max(2*cap(*w.kept), len(w.body)+len(b)))
		*grown = append(*grown, w.body...)
		putBodyBuffer(w.kept)
		w.kept = grown
	}
	*w.kept = append((*w.kept)[:len(w.body)], b...)
	w.body = *w.kept
}

// releaseTally gives the answer's tally back to its pool: billing has
// read it.
func (w *meteredResponse) releaseTally() {
	if w.tally != nil {
		answerTallies.Put(w.tally)
		w.tally = nil
	}
}

// releaseKept gives the kept copy back to the pool: billing is done with
// it (what it takes from it, the redelivery keys among them, are copies).
func (w *meteredResponse) releaseKept() {
	w.releasePop()
	if w.kept != nil {
		putBodyBuffer(w.kept)
		w.kept = nil
	}
	w.body = nil
}

// errorFree reads a 2xx pop answer kept whole for its billing, ahead of
// it, and reports whether it is the broker's pop envelope, which has no
// top-level error member (meter.PopAnswer.BrokerShaped): the error scrub
// then need not search it. The reading is kept for recordUsage.
func (w *meteredResponse) errorFree(status int, body []byte) bool {
	if w.rule != billPop || status < 200 || status > 299 || !w.keep || w.streamed() != nil {
		return false
	}
	w.releasePop()
	w.pop, w.popRead = meter.ReadPopAnswer(status, body), len(body)
	return w.pop.BrokerShaped()
}

// popAnswer is the reading of the kept pop answer billing takes: the one
// made for the error scrub when it read this very copy, else a new one.
func (w *meteredResponse) popAnswer(status int) *meter.PopAnswer {
	if w.pop != nil && w.popRead == len(w.body) && status >= 200 && status <= 299 {
		return w.pop
	}
	w.releasePop()
	w.pop, w.popRead = meter.ReadPopAnswer(status, w.body), len(w.body)
	return w.pop
}

// begunMessages is how many messages a pop answer cut short had begun,
// from the reader that read it: the streamed one past the copy's bound,
// else the kept copy, read as it stands.
func (w *meteredResponse) begunMessages() int64 {
	if w.pops != nil {
		return w.pops.Begun(w.status)
	}
	if !w.keep {
		return 0
	}
	begun := meter.NewPopKeys()
	_, _ = begun.Write(w.body)
	return begun.Begun(w.status)
}

// releasePop gives the pop answer's reading back to its pool.
func (w *meteredResponse) releasePop() {
	if w.pop != nil {
		w.pop.Release()
		w.pop = nil
	}
}

// recordUsage books one forwarded request from what the cell answered.
// Upstream failures (the gateway answered 502/504) and 5xx are billed as a
// request with no messages, except that a produce request that may have
// reached the cell and got no whole answer is billed its admitted items,
// as unanswered.
func (g *Gateway) recordUsage(r *http.Request, st *requestState, c *tenancy.Cluster, rw *meteredResponse, fate exchangeFate) {
	record := g.app.backend.record
	op, rule := billingOf(r, st)
	s := meter.Sample{ClusterID: c.ID, Op: op, Reqs: 1}
	if st.buffered {
		s.BytesIn = int64(len(st.body))
	} else if r.ContentLength > 0 {
		s.BytesIn = r.ContentLength
	}
	switch fate {
	case exchangeFailed:
		record(s)
		return
	case exchangeUnanswered:
		s.BytesOut = rw.written
		g.recordUnanswered(st, c, rule, s)
		return
	case exchangeCut:
		// The broker delivered at least the messages its answer had
		// begun; none is keyed, so each is a first delivery.
		s.BytesOut = rw.written
		s.Msgs = rw.begunMessages()
		g.debitDeliveries(c, s.Msgs, nil)
		record(s)
		g.logger.Warn("pop answer broke off; billed the messages it had begun",
			zap.String("request_id", st.rid), zap.String("cluster", c.Slug), zap.Int64("messages", s.Msgs),
			zap.Bool("client_gone", st.clientGone()))
		return
	}
	s.BytesOut = rw.written
	status := rw.status
	if rule == billPop && rw.pops != nil && status < 500 {
		// Too large to keep: counted and keyed as it streamed, so the
		// redelivery filter sees it as any other pop.
		g.logger.Warn("pop answer too large to keep; billed from its streamed messages and keys",
			zap.String("request_id", st.rid), zap.String("cluster", c.Slug), zap.Int64("bytes", rw.written))
		n, keys := rw.pops.Result(status)
		s.Msgs = n
		g.debitDeliveries(c, n, keys)
		record(s)
		return
	}
	copyLost := rule != billPlain && rw.tally == nil && !rw.keep && rw.streamed() == nil
	if status >= 500 || copyLost {
		if copyLost && status < 500 {
			g.logger.Warn("response too large to bill; recorded as a request only",
				zap.String("request_id", st.rid), zap.String("cluster", c.Slug), zap.Int64("bytes", rw.written))
		}
		record(s)
		return
	}
	body := rw.body
	switch rule {
	case billPlain:
		s.Msgs = carveOutMsgs(st, status)
	case billPush:
		out := rw.tally.push.Outcome(status)
		s.Msgs = out.Accepted
		if out.MostlyBuffered() {
			g.warnCellSpooling(c)
		}
	case billEphemeralPush:
		s.Msgs = meter.BillEphemeralPush(status, body)
	case billTransaction:
		s.Msgs = rw.tally.txn.Billed(status, st.produced)
	case billPop:
		a := rw.popAnswer(status)
		s.Msgs = a.Messages()
		g.debitDeliveriesOf(c, a.Messages(), a)
		rw.releasePop()
	case billCycle:
		if n := rw.cycle.Billed(status); n > 0 {
			record(meter.Sample{ClusterID: c.ID, Op: meter.OpPush, Msgs: n})
		}
	case billReplay:
		stored, readable := rw.replay.Stored(status)
		if stored {
			record(meter.Sample{ClusterID: c.ID, Op: meter.OpPush, Msgs: 1})
		} else if !readable && status < 300 {
			g.logger.Warn("replay response could not be read; the move may have committed",
				zap.String("request_id", st.rid), zap.String("cluster", c.Slug))
		}
	}
	record(s)
}

// debitDeliveries takes a pop's first deliveries from the message bucket:
// those of its keys the redelivery filter has not seen, and every message
// it could not key (nothing recognises those as redelivered, so they are
// charged: the filter fails closed).
func (g *Gateway) debitDeliveries(c *tenancy.Cluster, messages int64, keys []string) {
	if messages <= 0 {
		return
	}
	ls := g.app.limits
	first := int64(ls.redeliveries.FirstDeliveries(c.ID, keys)) + messages - int64(len(keys))
	if first > 0 {
		ls.buckets.DebitDeliveries(c.ID, c.Limits, first)
	}
}

// debitDeliveriesOf is debitDeliveries of keys spelled one at a time (a
// pop answer's reading).
func (g *Gateway) debitDeliveriesOf(c *tenancy.Cluster, messages int64, keys limits.DeliveryKeys) {
	if messages <= 0 {
		return
	}
	ls := g.app.limits
	first := int64(ls.redeliveries.FirstDeliveriesOf(c.ID, keys)) + messages - int64(keys.Keys())
	if first > 0 {
		ls.buckets.DebitDeliveries(c.ID, c.Limits, first)
	}
}

// recordUnanswered bills a produce request whose answer never came whole:
// the broker may have committed it, so its admitted items are billed and
// counted as unanswered (meter.Sample.Unanswered), never dropped.
func (g *Gateway) recordUnanswered(st *requestState, c *tenancy.Cluster, rule billing, s meter.Sample) {
	record := g.app.backend.record
	var items int64
	switch rule {
	case billPush, billTransaction, billEphemeralPush:
		items = int64(st.produced)
		s.Msgs, s.Unanswered = items, items
	case billCycle:
		items = int64(st.cycle.Items)
		record(meter.Sample{ClusterID: c.ID, Op: meter.OpPush, Msgs: items, Unanswered: items})
	case billReplay:
		items = 1
		record(meter.Sample{ClusterID: c.ID, Op: meter.OpPush, Msgs: 1, Unanswered: 1})
	}
	record(s)
	g.logger.Warn("produce request got no whole answer from the cell; its admitted items are billed as unanswered",
		zap.String("request_id", st.rid), zap.String("cluster", c.Slug), zap.Int64("items", items),
		zap.Bool("client_gone", st.clientGone()))
}

// record books a sample; handler tests run without a meter.
func (b *backend) record(s meter.Sample) {
	if b.meter != nil {
		b.meter.Record(s)
	}
}

func cycleGroups(st *requestState) []meter.CycleGroup {
	groups := make([]meter.CycleGroup, len(st.cycle.Pairs))
	for i, p := range st.cycle.Pairs {
		groups[i] = meter.CycleGroup{Queue: p.Queue, Partition: p.Partition, Items: st.cycle.PairItems[i]}
	}
	return groups
}

// carveOutMsgs bills a reserved key space batch (served as a consume, op
// class read) one message per operation, when the broker took it.
func carveOutMsgs(st *requestState, status int) int64 {
	if st.carveOutOps > 0 && status >= 200 && status < 300 {
		return int64(st.carveOutOps)
	}
	return 0
}

// lastSpoolWarn keeps "the cell is spooling" to one line per 30 s.
var lastSpoolWarn atomic.Int64

func (g *Gateway) warnCellSpooling(c *tenancy.Cluster) {
	now := time.Now().UnixNano()
	last := lastSpoolWarn.Load()
	if now-last < int64(30*time.Second) || !lastSpoolWarn.CompareAndSwap(last, now) {
		return
	}
	g.logger.Warn("cell is buffering most pushes to disk; its database may be struggling",
		zap.String("cell", c.CellSlug), zap.String("cluster", c.Slug))
}
