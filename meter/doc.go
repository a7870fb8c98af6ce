// Package meter counts usage per cluster, operation class and UTC minute,
// writes it to queen_proxy.usage_minutes without losing or doubling a row,
// and runs the daily roll-up and the monthly message quota chain. It does
// not import Caddy.
//
// # Recording
//
// The gateway calls Meter.Record once per proxied request (twice for a
// streams cycle or a DLQ replay that stored messages), after the upstream
// answered. The Bill* functions decide the billable message count from the
// response body, because the broker answers 200 with an error body for most
// failures. Push, transaction, streams cycle and replay answers are read as
// they stream, at any size (PushTally, TxnTally, CycleTally, ReplayTally:
// the Bill* functions of those routes are the same readers over a whole
// body); pop and ephemeral push answers are buffered (with a cap); every
// other response streams through unread. BytesIn is the request body's
// length (as buffered, else its Content-Length); BytesOut is what the
// client was sent of the answer.
//
//	situation                                         Sample(s) to Record
//	------------------------------------------------  ---------------------------------------------------------------
//	refused by the gateway before forwarding          nothing (401/403 incl. scope and push-block 403s, 400
//	(any 4xx it generates itself)                     bad_request, 404, 413, 421, 429)
//	upstream timeout (gateway answers 504)            {op, Reqs:1, BytesIn}; not billed
//	upstream unreachable (gateway answers 502)        {op, Reqs:1, BytesIn}; not billed
//	upstream 5xx (any route; streamed, not buffered)  {op, Reqs:1, BytesIn, BytesOut: Content-Length}; not billed
//	POST /api/v1/push, 2xx                            {OpPush, Reqs:1, Msgs: BillPush(status, body), BytesIn: len(req), BytesOut: len(body)}
//	POST /api/v1/push, other non-5xx (e.g. 400)       {OpPush, Reqs:1, BytesIn, BytesOut}
//	POST /api/v1/ephemeral/push, 2xx                  {OpPush, Reqs:1, Msgs: BillEphemeralPush(status, body), BytesIn, BytesOut}
//	POST /api/v1/transaction, 2xx                     {OpTxn, Reqs:1, Msgs: BillTransaction(status, body, counted push items), BytesIn, BytesOut}
//	POST /api/v1/transaction, other non-5xx           {OpTxn, Reqs:1, BytesIn, BytesOut}
//	pop (/api/v1/pop/queue/..., ephemeral pop), 2xx   {OpDelivery, Reqs:1, Msgs: n, BytesOut: len(body)} where n is
//	                                                  ReadPopAnswer(status, body).Messages() (BillPop's count); debit n
//	                                                  from the message bucket, less the keys the redelivery filter has
//	                                                  seen (a redelivery was debited when first delivered)
//	pop, 204 or other non-5xx                         {OpDelivery, Reqs:1, BytesOut: Content-Length}
//	POST /streams/v1/cycle, 2xx, with sink groups     {OpRead, Reqs:1, BytesIn, BytesOut} and, when
//	                                                  n := BillCycle(status, body, groups) > 0, {OpPush, Msgs: n}
//	POST /streams/v1/cycle otherwise                  {OpRead, Reqs:1, BytesIn, BytesOut}
//	DLQ replay (.../retry, /dlq/{id}/replay), 2xx     {OpConfigure, Reqs:1, BytesIn, BytesOut} and, when stored,
//	                                                  {OpPush, Msgs:1}; when !readable (stored, readable :=
//	                                                  BillReplay(status, body)) record, then answer 502 "replay
//	                                                  response could not be read; the move may have committed, so
//	                                                  re-read the dead-letter row"
//	everything else (configure, admin, reads, acks,   {op for the route class, Reqs:1, BytesIn, BytesOut}
//	leases, fetch, kv, timers, traces, operator)
//
// Every answer is read by the rules of answers in package wire (its doc,
// "The rules of answers"): the broker's grammar, its exact member names,
// the last of a repeated member, and no bill from a text the grammar
// refuses. The readers here are watchers over wire.Stream (and, for the
// ephemeral push's one member, wire.TopMembers), and hold only the billing
// decisions: what counts as
// accepted, committed or delivered, and which key a delivery has.
//
// The op of a route class: POST /api/v1/push and ephemeral push → OpPush;
// other produce (transaction) → OpTxn; pops → OpDelivery; other consume
// (ack, ack/batch, lease) → OpRead; queue admin → OpConfigure; reads,
// gated routes (kv, timers, traces, streams), operator routes (metered
// against the acted-on cluster) → OpRead.
//
// Only OpPush and OpTxn messages count toward the monthly quota; delivery
// messages are recorded for usage reports, not billed.
//
// # Writing
//
// Every CheckpointEvery (1 s) while Run runs, what Record added since the
// last checkpoint is sealed into batches with fresh ids, one minute each,
// and appended to a journal file in the spool directory, fsynced; only then
// is it durable, and from then on it is written to the database only as
// those batches, under those ids. Meter.Run writes the journaled batches of
// the closed minutes every FlushEvery (15 s) in one statement: an additive
// upsert that also records the write's batch ids in
// queen_proxy.meter_batches, so the same batch is never added twice. A
// journal file is deleted once every batch in it is in the database; the
// open minute's batches wait, journaled, for their minute to close.
//
// When the database fails, everything the meter holds goes to the spool:
// its journal files are renamed from *.journal to *.jsonl (append-only JSON
// Lines, fsynced per write, rotated at SpoolRotateBytes, 5 MiB) and the
// batches leave memory; after three consecutive failures a circuit breaker
// skips the database for 30 s, doubling up to 5 min, and hands straight to
// the spool. The spool is replayed at start and whenever the database may
// be tried again; a replayed batch is recorded with its rows in one
// statement, so a file replayed twice after a crash adds nothing the second
// time. On shutdown Run drains every aggregate, the open minute included,
// within ShutdownDrain (5 s), spooling what the database did not take, and
// leaves no journal behind.
//
// # Crash safety
//
// A crash (SIGKILL, OOM kill, power loss) loses what was recorded after the
// last checkpoint: at most CheckpointEvery of usage (1 s), plus the time one
// checkpoint takes to write (a few milliseconds), plus the requests in
// flight, which are recorded when the upstream answered. The interval is
// the process's running time: on a starved host a process that is not
// scheduled checkpoints late, and what it recorded just before the stall
// waits with it (it records nothing during the stall). Everything older
// is in a journal file that the dead process no longer locks; the next
// start replays it like a spool file. Batches it had already written are
// no-ops there, and batches the replay applies are no-ops if the old meter
// writes them after all (a reload's old configuration), so nothing is
// counted twice. A journal whose last append a crash cut short is replayed
// without that piece, which was never durable. The e2e test
// TestMeteringSIGKILLLosesAtMostOneCheckpoint measures the loss of a real
// gateway killed under load.
//
// Meter.Unflushed shows the usage recorded in memory and the journaled
// batches not yet written; usage handed to the spool after a failed write
// is in neither until a replay writes it.
//
// A sample recorded after Run's final drain (a request still in flight
// across a Caddy reload) is drained by itself about a second later.
//
// Metering cost: Record is one shard lock and one map update, without
// allocating for a key that exists; while Run runs with the real clock it
// does not read the clock either (a ticker keeps the current minute). A
// checkpoint zeroes the entries it takes instead of deleting them, so the
// next second's Record on the same key still does not allocate. The
// checkpoint is one fsynced append per second with traffic (none when idle);
// the flush issues one statement per FlushEvery tick that has closed minutes
// (one per minute in steady traffic), whatever the number of clusters. Each
// checkpoint adds one batch id per minute it holds to meter_batches (about
// 86,400 a day for a gateway with steady traffic), pruned after
// BatchKeepDays.
package meter
