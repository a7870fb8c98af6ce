package limits

import "strconv"

// The Kafka and S3 facades keep their consumer state in reserved KV key
// spaces, and such a batch is served as a consume: without the kv plan
// feature and through push blocks. So that the exemption cannot become a
// free store, a carve-out batch is bounded on its own.

// MaxCarveOutBodyBytes caps the body of one carve-out batch, whatever the
// plan: facade state (offsets, upload progress) is small.
const MaxCarveOutBodyBytes = 1 << 20

// CheckCarveOut applies the carve-out's bounds to a batch of ops operations
// whose body is bodyBytes long and whose largest value (the first such, at
// operation heaviestIndex) is heaviestBytes of raw JSON: the body cap
// MaxCarveOutBodyBytes, the plan's per-item payload cap on every value,
// and the batch cap on the operations (as CheckProduce counts items). It
// returns nil when the batch is within all three.
func CheckCarveOut(bodyBytes, ops, heaviestIndex, heaviestBytes int, lim Effective, defaultMaxBatch int) *SizeRefusal {
	if bodyBytes > MaxCarveOutBodyBytes {
		return &SizeRefusal{Message: "a reserved key space batch of " + strconv.Itoa(bodyBytes) +
			" bytes exceeds its cap of " + strconv.Itoa(MaxCarveOutBodyBytes) + " bytes"}
	}
	if c := lim.MaxPayloadBytes; !c.IsUnlimited() && int64(heaviestBytes) > int64(c) {
		return &SizeRefusal{Message: "operation " + strconv.Itoa(heaviestIndex) + ": value " +
			strconv.Itoa(heaviestBytes) + " bytes exceeds max_payload_bytes (" + strconv.FormatInt(int64(c), 10) + ")"}
	}
	maxOps := batchCap(lim, defaultMaxBatch)
	if int64(ops) > maxOps {
		return &SizeRefusal{Message: "batch of " + strconv.Itoa(ops) + " operations exceeds max_batch_items (" +
			strconv.FormatInt(maxOps, 10) + ")"}
	}
	return nil
}

// batchCap is the plan's max_batch_items, else defaultMaxBatch, else
// DefaultMaxBatchItems.
func batchCap(lim Effective, defaultMaxBatch int) int64 {
	if !lim.MaxBatchItems.IsUnlimited() {
		return int64(lim.MaxBatchItems)
	}
	if defaultMaxBatch > 0 {
		return int64(defaultMaxBatch)
	}
	return DefaultMaxBatchItems
}
