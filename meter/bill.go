package meter

import (
	"strconv"
	"sync"

	"github.com/queengate/queengate/wire"
)

// The billing rules read what the broker answered, never the status alone:
// the broker answers 200 with an error body for most failures. Each function
// takes the upstream status and the buffered response body and returns the
// billable message count (M1–M6 of the reference); a body that cannot be read
// bills nothing.

// MaxBilledBody is the largest response the gateway buffers for a Bill*
// function that reads a whole body (the reference's cap): a pop's or an
// ephemeral push's. Push, transaction, cycle and replay answers are never
// buffered: their tallies read them as they stream, at any size.
const MaxBilledBody = 64 << 20

// is2xx reports a successful upstream status.
func is2xx(status int) bool { return status >= 200 && status <= 299 }

// PushOutcome is what a push response says about its items.
type PushOutcome struct {
	Items    int64 // elements in the response array
	Accepted int64 // "queued" or "buffered": billable
	Buffered int64 // "buffered": the cell is spooling pushes to its disk
}

// MostlyBuffered reports the maintenance signal: more than half of the items
// were buffered by the broker rather than stored in its database.
func (o PushOutcome) MostlyBuffered() bool { return o.Buffered*2 > o.Items }

// BillPushDetail reads a POST /api/v1/push response: a JSON array with one
// object per item, each with a status. Only a 2xx answer (the broker sends
// 200, and 201 in maintenance mode) that is a well-formed array is
// counted. It is PushTally over a whole body; the gateway itself tallies
// answers as they stream.
func BillPushDetail(status int, body []byte) PushOutcome {
	if !is2xx(status) {
		return PushOutcome{}
	}
	t := NewPushTally()
	_, _ = t.Write(body)
	return t.Outcome(status)
}

// BillPush is M1: the items of a push response whose status is "queued" or
// "buffered". "duplicate", "error", "failed" and anything else are not
// billed; a non-2xx status or an unreadable body bills 0.
func BillPush(status int, body []byte) int64 { return BillPushDetail(status, body).Accepted }

// BillEphemeralPush is M2: {"pushed": N} from POST /api/v1/ephemeral/push
// bills N; anything else bills 0.
func BillEphemeralPush(status int, body []byte) int64 {
	if !is2xx(status) {
		return 0
	}
	var pushed [1][]byte
	if !wire.TopMembers(body, []string{"pushed"}, pushed[:]) {
		return 0
	}
	n, err := strconv.ParseInt(string(pushed[0]), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// BillTransaction is M3: a committed transaction (2xx and a top-level
// boolean "success": true) bills the push items the gateway counted in the
// request (countedItems) minus the results[] entries with type "push" and
// duplicate true. "success": false (a rollback, still HTTP 200), a missing
// or non-boolean success, or an unreadable body bill 0. It is TxnTally over
// a whole body; the gateway itself tallies answers as they stream.
func BillTransaction(status int, body []byte, countedItems int) int64 {
	t := NewTxnTally()
	_, _ = t.Write(body)
	return t.Billed(status, countedItems)
}

// BillPop is M4: a 2xx pop answer (durable or ephemeral) bills the elements
// of its top-level "messages" array; an error body ({"error": ..., "messages":
// []}), a 204, another status or an unreadable body bill 0.
//
// ids holds one redelivery key per identifiable message, for the gateway's
// redelivery filter (a message is debited from the bucket once, however
// often it is delivered again): partitionId + "/" + transactionId + "/" +
// consumerGroup (the message's own group, else the answer's top-level one,
// "__QUEUE_MODE__" in queue mode), so the same message popped again by the
// same consumer group gives the same key, and a second consumer group
// reading it does not. A message without partitionId or transactionId is
// keyed "id/" + its id; one with neither gets no key, nor does one whose
// key is built from a member that is neither a plain string nor null (the
// rules of answers, doc.go), so len(ids) can be smaller than messages.
func BillPop(status int, body []byte) (messages int64, ids []string) {
	if !is2xx(status) {
		return 0, nil
	}
	b := popBillers.Get().(*popBiller)
	defer func() {
		b.clear()
		popBillers.Put(b)
	}()
	if ok, _ := b.read(body); ok {
		return int64(len(b.watch.msgs)), popKeys(body, b.watch.msgs, b.watch.group, b.watch.groupBad)
	}
	return 0, nil
}

// popBillers keep BillPop's reading state, so that a pop allocates its
// result only, whatever it delivered.
var popBillers = sync.Pool{New: func() any { return new(popBiller) }}

// CycleGroup is one (queue, partition) group of a streams cycle's push_items,
// as the gateway counted them from the request (partition "Default" when the
// item named none).
type CycleGroup struct {
	Queue, Partition string
	Items            int
}

// BillCycle is M5: the sink items of a 2xx POST /streams/v1/cycle whose
// answer has "success": true. A request group is billed in full when a
// push_results[] element confirms it: status "queued" (or "buffered", the
// broker's maintenance buffer, billed like M1) with exactly its queue and
// partition. The recorded broker (0.15.1) names only the queue
// ("queueName") and the partition's id in each element, one element per
// item; elements without a partition name confirm items of their queue one
// by one, up to the count the request sent to that queue. "duplicate",
// other statuses, "success": false and unreadable bodies bill 0. It is
// CycleTally over a whole body; the gateway tallies answers as they
// stream.
func BillCycle(status int, body []byte, groups []CycleGroup) int64 {
	if !is2xx(status) || len(groups) == 0 {
		return 0
	}
	t := NewCycleTally(groups)
	_, _ = t.Write(body)
	return t.Billed(status)
}

// BillReplay is M6, for POST /api/v1/messages/{pid}/{txid}/retry and POST
// /api/v1/dlq/{id}/replay: stored reports that the dead letter was moved
// back (bill one push message): a 2xx JSON object with "success": true and
// "result" either absent (older brokers) or "moved". "duplicate", any other
// result, "success": false or a non-boolean success are not stored.
//
// readable is false only for a 2xx answer whose body is not a JSON object:
// the move may have committed, so the gateway books the request and answers
// 502 telling the client to re-read the dead-letter row. Non-2xx answers are
// readable and not stored. It is ReplayTally over a whole body.
func BillReplay(status int, body []byte) (stored, readable bool) {
	t := NewReplayTally()
	_, _ = t.Write(body)
	return t.Stored(status)
}
