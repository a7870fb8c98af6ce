package caddymodule

import (
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// admitBody applies the limits that depend on what a request adds: the
// produce routes (push, transaction, the streams cycle's sink items and
// ephemeral pushes), the values KV and timers store, queue configuration
// and DLQ replay. Bodies are parsed once and forwarded byte for byte. A
// body the gateway cannot read exactly as the broker will, or that holds
// what the broker's schema cannot store, is refused with 400, never
// forwarded unenforced; and every body, on any route, is buffered here so
// that one that is not UTF-8, or carries U+0000, never reaches the cell
// (bodycheck.go).
func (g *Gateway) admitBody(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	if st.route.Class == tenancy.ClassProduce {
		return g.admitProduce(r, st, c)
	}
	route := st.route
	gated := func(f tenancy.Feature, op tenancy.GatedOp) bool {
		return route == tenancy.Route{Class: tenancy.ClassGated, Feature: f, Op: op}
	}
	if planGatesReadBody(route) {
		// Read whole first: bufferBody then finds the body buffered, its
		// text refused already if the batch's reading refused it.
		if _, e := g.readBatch(r, st); e != nil {
			return e
		}
	}
	body, e := g.bufferBody(r, st)
	if e != nil {
		return e
	}
	if tenancy.BodyNamesReserved(body) {
		return errReservedName
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/configure":
		return g.admitConfigure(r, st, c)
	case tenancy.IsDLQReplay(r.Method, r.URL.EscapedPath()) && strings.HasPrefix(r.URL.Path, "/api/v1/dlq/"):
		return g.admitReplay(r, st, c)
	case gated(tenancy.FeatureStreams, tenancy.GatedMixed):
		return g.admitCycle(r, st, c, st.batch)
	case gated(tenancy.FeatureEphemeral, tenancy.GatedGrow):
		batch, err := limits.ParseEphemeral(body)
		return g.admitStored(st, c, batch, err, true)
	case gated(tenancy.FeatureKV, tenancy.GatedMixed), gated(tenancy.FeatureTimers, tenancy.GatedMixed):
		return g.admitStored(st, c, st.batch.Items, st.batch.Err, false)
	case gated(tenancy.FeatureKV, tenancy.GatedGrow):
		batch, err := limits.ParseStoredValue(body)
		return g.admitStored(st, c, batch, err, false)
	case gated(tenancy.FeatureTraces, tenancy.GatedOpen) && r.URL.Path == "/api/v1/traces":
		batch, err := limits.ParseTrace(body)
		return g.admitStored(st, c, batch, err, false)
	}
	// Bodies no walker reads are searched for U+0000, and an ack's consumer
	// group is measured.
	if err := limits.StoredTextError(body); err != nil {
		return badBody(err)
	}
	if route.Class == tenancy.ClassConsume && (r.URL.Path == "/api/v1/ack" || r.URL.Path == "/api/v1/ack/batch") {
		if err := limits.AckNamesError(body); err != nil {
			return badBody(err)
		}
	}
	return nil
}

// admitStored applies the plan's size caps to the items of an ephemeral
// push, a KV or timers batch, a KV value or a trace, as read (err is the
// reading's refusal: 400); an ephemeral push's messages are taken from
// the message bucket too.
func (g *Gateway) admitStored(st *requestState, c *tenancy.Cluster, batch limits.ProduceBatch, err error, messages bool) *apierror.Error {
	if err != nil {
		return badBody(err)
	}
	defer batch.Release() // only its counts are kept
	if refusal := limits.CheckProduce(batch, c.Limits, g.app.MaxBatchItems); refusal != nil {
		return payloadTooLarge(refusal.Message)
	}
	if !messages {
		return nil
	}
	// An ephemeral push is billed its admitted messages if the cell never
	// answers (hangup billing), so they are noted as a push's items are.
	st.produced = batch.Items
	st.msgChecked = true
	return g.admitMessages(st, c, int64(batch.Items))
}

// admitProduce reads a push or a transaction in one pass. Its reader
// checks the body's text as strictly as bufferBody does (a body it accepts
// is valid UTF-8 without a byte-order mark, as FuzzFastProduceAgrees holds it), so
// an accepted body is not swept for it again; a refused one gets its
// refusal in the order every other route gives it: the text first, then
// the reserved names, then the reader's own.
func (g *Gateway) admitProduce(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	body, e := g.bufferUnchecked(r, st)
	if e != nil {
		return e
	}
	batch, e := readProduce(r.URL.Path, body)
	if e != nil {
		return e
	}
	// Nothing keeps the batch's lists past its admission (the registry
	// copies the names it learns).
	defer batch.Release()
	st.produced = batch.Items
	// A push whose every item the broker deduplicates may be sent again
	// when the cell closed a reused connection under it (forward.go).
	st.resendable = r.URL.Path == "/api/v1/push" && batch.Items > 0 && batch.Identified == batch.Items
	if refusal := limits.CheckProduce(batch, c.Limits, g.app.MaxBatchItems); refusal != nil {
		return payloadTooLarge(refusal.Message)
	}
	return g.admitBatch(r, st, c, batch)
}

// readProduce is the reading of a push (or, at /api/v1/transaction, a
// transaction) body with every refusal a body can get before its limits:
// the text's (bodyTextRefusal), the reserved names', the reader's.
func readProduce(path string, body []byte) (limits.ProduceBatch, *apierror.Error) {
	parse := limits.ParsePush
	if path == "/api/v1/transaction" {
		parse = limits.ParseTransaction
	}
	batch, err := parse(body)
	if err != nil {
		batch.Release()
		if e := bodyTextRefusal(body); e != nil {
			return limits.ProduceBatch{}, e
		}
		if tenancy.BodyNamesReserved(body) {
			return limits.ProduceBatch{}, errReservedName
		}
		return limits.ProduceBatch{}, badBody(err)
	}
	if tenancy.BodyNamesReserved(body) {
		batch.Release()
		return limits.ProduceBatch{}, errReservedName
	}
	return batch, nil
}

// admitCycle applies the plan's caps to a streams cycle's sink items and
// state values, and admits the sink items as a push's.
func (g *Gateway) admitCycle(r *http.Request, st *requestState, c *tenancy.Cluster, cycle *tenancy.Batch) *apierror.Error {
	if cycle.Err != nil {
		return badBody(cycle.Err)
	}
	batch := cycle.Items
	if refusal := limits.CheckCycle(batch, c.Limits, g.app.MaxBatchItems); refusal != nil {
		return payloadTooLarge(refusal.Message)
	}
	if batch.Items == 0 {
		return nil
	}
	st.cycle = batch
	return g.admitBatch(r, st, c, batch)
}

// admitBatch admits every distinct (queue, partition) of a produce batch,
// takes its messages from the message bucket, and counts its bytes
// towards the storage estimate.
func (g *Gateway) admitBatch(r *http.Request, st *requestState, c *tenancy.Cluster, batch limits.ProduceBatch) *apierror.Error {
	if e := g.admitPairs(r, st, c, batch.Pairs); e != nil {
		return e
	}
	st.msgChecked = true
	if e := g.admitMessages(st, c, int64(batch.Items)); e != nil {
		return e
	}
	storage := g.app.backend.storage
	if storage.InFlightBlocked(c.ID, c.Limits.MaxRetainedBytes) {
		return errStorageQuota
	}
	storage.AddInFlight(c.ID, batch.PayloadBytes)
	return nil
}

// admitPairs checks the queue and partition caps for new pairs. The
// registry answers from memory after one load per cluster; if that load
// fails the request goes on, because the broker is the source of truth and
// the cap is caught up with at the next inventory.
func (g *Gateway) admitPairs(r *http.Request, st *requestState, c *tenancy.Cluster, pairs []limits.QueuePartition) *apierror.Error {
	if len(pairs) == 0 || (c.Limits.MaxQueues.IsUnlimited() && c.Limits.MaxPartitionsPerQueue.IsUnlimited()) {
		return nil
	}
	res, max, err := g.app.backend.admission.Admit(r.Context(), c.ID, pairs, c.Limits)
	switch res {
	case limits.OverQueues:
		return g.limitExceeded(st, c, quotaExceeded(fmt.Sprintf("queue limit reached (%d)", max)))
	case limits.OverPartitions:
		return g.limitExceeded(st, c, quotaExceeded(fmt.Sprintf("partition limit reached (%d)", max)))
	case limits.Unavailable:
		g.logger.Warn("queue registry unavailable; admitting without the queue and partition caps",
			zap.String("request_id", st.rid), zap.String("cluster", c.Slug), zap.Error(err))
	}
	return nil
}

// admitConfigure enforces the plan's retention ceiling (refused, never
// clamped) and admits the configured queue.
func (g *Gateway) admitConfigure(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	body, e := g.bufferBody(r, st)
	if e != nil {
		return e
	}
	queue, refusal, err := limits.CheckConfigure(body, c.Limits)
	if err != nil {
		return badBody(err)
	}
	if refusal != "" {
		if e := g.limitExceeded(st, c, quotaExceeded(refusal)); e != nil {
			return e
		}
	}
	return g.admitPairs(r, st, c, []limits.QueuePartition{{Queue: queue, Partition: "Default"}})
}

// admitReplay admits the destination a dead-letter row replay names, if
// it names one; half a destination is refused.
func (g *Gateway) admitReplay(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	body, e := g.bufferBody(r, st)
	if e != nil {
		return e
	}
	queue, partition, refusal, err := limits.ParseReplayDestination(body)
	switch {
	case err != nil:
		return badBody(err)
	case refusal != "":
		return g.limitExceeded(st, c, &apierror.Error{Status: http.StatusBadRequest, Code: apierror.InvalidRequest, Message: refusal})
	case queue == "":
		return nil
	}
	return g.admitPairs(r, st, c, []limits.QueuePartition{{Queue: queue, Partition: partition}})
}
