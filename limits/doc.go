// Package limits decides what a cluster may do against its plan, request by
// request. It does not import Caddy. The bodies it judges are read with
// package wire: checked by its grammar and walked with its walkers, or,
// for a push and a transaction, checked and counted in one pass with its
// cursor (producefast.go).
//
//   - Effective limits: a plan's columns with the cluster's limit_overrides
//     on top (effective.go).
//   - Rates: the request and message token buckets (bucket.go) and the
//     RateLimit headers that report them (ratelimitheader.go); the memory of
//     recently delivered messages, so that a redelivery is not paid for
//     twice (redelivery.go).
//   - Long-poll pops parked upstream, per cluster and per cell (parked.go).
//   - Queue and partition admission against max_queues and
//     max_partitions_per_queue (admission*.go, fptable.go), kept true by
//     the inventory reconciler that reads each cell's queue listing
//     (inventory.go).
//   - The storage quota and the push block it and the message quota raise
//     (storage.go, pushblock.go); the KV carve-out's bounds (carveout.go).
//   - What a produce, configure or replay body asks for (producebody.go,
//     producefast.go, txnpositions.go, configure.go) and the
//     broker's column rules for what it stores (schema.go): the items,
//     queues and partitions the decisions above need, or a refusal when the
//     body is one the broker would store otherwise than the gateway counts.
package limits
