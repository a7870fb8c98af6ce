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
// buffered response body, because the broker answers 200 with an error body
// for most failures. Bodies are buffered only on the routes below that read
// them (with a cap); every other response streams through. BytesIn is the
// buffered request length on buffered routes, else 0; BytesOut is the
// buffered response length where buffered, else the upstream Content-Length
// (0 when absent or chunked).
//
//	situation                                         Sample(s) to Record
//	------------------------------------------------  ---------------------------------------------------------------
//	refused by the gateway before forwarding          nothing (401/403 incl. scope and push-block 403s, 400
//	(any 4xx it generates itself)                     bad_request, 404, 413, 421, 429)
//	upstream timeout (gateway answers 504)            {op, Reqs:1}; BytesIn, BytesOut 0; not billed
//	upstream unreachable (gateway answers 502)        {op, Reqs:1}; BytesIn, BytesOut 0; not billed
//	upstream 5xx (any route; streamed, not buffered)  {op, Reqs:1, BytesIn, BytesOut: Content-Length}; not billed
//	POST /api/v1/push, 2xx                            {OpPush, Reqs:1, Msgs: BillPush(status, body), BytesIn: len(req), BytesOut: len(body)}
//	POST /api/v1/push, other non-5xx (e.g. 400)       {OpPush, Reqs:1, BytesIn, BytesOut}
//	POST /api/v1/ephemeral/push, 2xx                  {OpPush, Reqs:1, Msgs: BillEphemeralPush(status, body), BytesIn, BytesOut}
//	POST /api/v1/transaction, 2xx                     {OpTxn, Reqs:1, Msgs: BillTransaction(status, body, counted push items), BytesIn, BytesOut}
//	POST /api/v1/transaction, other non-5xx           {OpTxn, Reqs:1, BytesIn, BytesOut}
//	pop (/api/v1/pop/queue/..., ephemeral pop), 2xx   {OpDelivery, Reqs:1, Msgs: n, BytesOut: len(body)} where n, ids :=
//	                                                  BillPop(status, body); debit n from the message bucket, less the
//	                                                  ids the redelivery filter has seen (SPEC fix 7)
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
// Meter.Run flushes the closed minutes every FlushEvery (15 s) in one
// statement: an additive upsert that also records the write's batch ids in
// queen_proxy.meter_batches, so the same batch is never added twice. When
// the database fails, the batches go to an append-only JSON Lines spool on
// disk, fsynced per write and rotated at SpoolRotateBytes (5 MiB); after
// three consecutive failures a circuit breaker skips the database for 30 s,
// doubling up to 5 min, and writes straight to the spool. The spool is
// replayed at start and whenever the database may be tried again; a
// replayed batch is recorded with its rows in one statement, so a file
// replayed twice after a crash adds nothing the second time. On shutdown Run
// drains every aggregate, the open minute included, within ShutdownDrain
// (5 s), spooling what the database did not take. What a crash (not a
// shutdown) loses is what was still in memory: up to one flush interval of
// closed minutes plus the open minute.
//
// A sample recorded after Run's final drain (a request still in flight
// across a Caddy reload) is drained by itself about a second later.
//
// Metering cost: Record is one shard lock and one map update, without
// allocating for a key that exists; while Run runs with the real clock it
// does not read the clock either (a ticker keeps the current minute). The
// flush issues one statement per FlushEvery tick that has closed minutes
// (one per minute in steady traffic), whatever the number of clusters.
package meter
