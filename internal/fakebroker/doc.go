// Package fakebroker is an in-memory stand-in for the Queen message broker's
// HTTP API, built for queengate's tests.
//
// It reproduces the behaviour recorded from a real Queen 0.15.1 broker
// (testdata/broker at the repository root): the same routes, response shapes
// and per-item statuses, the quirk that most errors are HTTP 200 with an error body, the
// uWebSockets 404 page for unknown routes, long-poll pops parked until a push
// wakes them, leases, consumer groups, retries and the dead-letter queue.
//
// By default, unlike the recorded broker, it is tenancy-enabled: every queue and
// everything hanging off it (messages, leases, consumer groups, dedup sets,
// DLQ entries, traces, stream state) is scoped by the x-queen-tenant request
// header, as a tenancy-enabled broker does. Requests without the header use
// DefaultTenant unless Options.RequireTenant is set. With
// Options.IgnoreTenant (or SetIgnoreTenant while it runs) it behaves like
// the recorded public 0.15.1 broker instead, which has no tenancy: the header
// is ignored and every request shares one namespace.
//
// The default tenancy model is this fake's own: the header is used verbatim,
// and RequireTenant refuses a request without it, a refusal no real broker
// makes. Options.Tenancy = TenancyRust (rusttenancy.go) follows the contract
// of Queen's Rust brokers instead: header trimmed and lower-cased, a
// malformed one 400, a missing one the default tenant, real HTTP statuses,
// 201 pushes and 204 empty pops, tail-first consumer groups, the
// caller-targeted tenant and quota routes, grant-gated KV, timers, locks and
// ephemeral queues, and a retainedBytes that lags. Tests that model a
// tenancy broker should use it.
//
// Pops read their query parameters as the broker does (brokerquery.go):
// the first "key=" substring of the raw query, so "wait=1", "await=true"
// and "x=wait=true" park. A pop with a negative batch answers with the
// PostgreSQL error, SQL statement and PL/pgSQL context the broker passes
// through (sqlerrors.go; modelled, not recorded), so tests can show such
// internals reaching the gateway.
//
// Deliberate differences from the recorded broker:
//
//   - GET /api/v1/resources/queues reports a per-queue retainedBytes field: the
//     sum of the payload bytes of the messages the queue still retains
//     (completed messages stay retained until deleted or evicted by the
//     queue's retention options). Newer brokers report this field and the
//     gateway's inventory reconciler reads it for the storage quota; the
//     recorded 0.15.1 broker has no such field. Options.ReportKVTimerBytes
//     adds the top-level kvBytes/kvRows/timerBytes/timerRows fields as well.
//   - Queue statistics are live; the recorded broker served them from a
//     periodically refreshed stats table.
//   - Reason phrases are Go's standard ones ("Not Found", "Accepted"), not
//     uWebSockets' ("File Not Found", "").
//   - The buffered and failed push statuses, which the recorded broker emits
//     only in maintenance mode or when its database is down, are produced on
//     demand through SetPushMode and SetPushHook. Buffered messages are
//     flushed into their queue at once.
//   - Migration routes never migrate anything: a target that accepts TCP
//     connections is still reported as a failure.
//   - SetAnswerFault holds, cuts or drops answers after the request was
//     handled (a push stored), to put a slow or broken cell between the
//     commit and the answer; StoredMessages counts what a tenant stored.
//
// Everything is held in memory and lost on Close; the fake is for
// development and tests only.
package fakebroker
