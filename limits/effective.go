package limits

import (
	"encoding/json"
	"math"
)

// Cap is one limit value. Unlimited means the limit does not apply.
type Cap int64

// Unlimited is the Cap of a limit that is not set (NULL in the plan, or JSON
// null in a cluster's overrides).
const Unlimited Cap = -1

// IsUnlimited reports whether the cap does not apply.
func (c Cap) IsUnlimited() bool { return c < 0 }

// Effective is the set of limits that applies to one cluster: its plan's
// columns with the cluster's limit_overrides applied on top.
type Effective struct {
	MaxReqPerSec          Cap `json:"max_req_per_sec"`
	ReqBurst              Cap `json:"req_burst"`
	MaxMsgsPerSec         Cap `json:"max_msgs_per_sec"`
	MsgsBurst             Cap `json:"msgs_burst"`
	MaxQueues             Cap `json:"max_queues"`
	MaxPartitionsPerQueue Cap `json:"max_partitions_per_queue"`
	MaxParkedPops         Cap `json:"max_parked_pops"`
	MaxPayloadBytes       Cap `json:"max_payload_bytes"`
	MaxBatchItems         Cap `json:"max_batch_items"`
	MaxRetainedBytes      Cap `json:"max_retained_bytes"`
	MaxRetentionSeconds   Cap `json:"max_retention_seconds"`
}

// AllUnlimited is an Effective with no limit set.
func AllUnlimited() Effective {
	return Effective{
		Unlimited, Unlimited, Unlimited, Unlimited, Unlimited, Unlimited,
		Unlimited, Unlimited, Unlimited, Unlimited, Unlimited,
	}
}

// fields maps each override key to its field, so the merge rule is written
// once for all eleven limits.
func (e *Effective) fields() map[string]*Cap {
	return map[string]*Cap{
		"max_req_per_sec":          &e.MaxReqPerSec,
		"req_burst":                &e.ReqBurst,
		"max_msgs_per_sec":         &e.MaxMsgsPerSec,
		"msgs_burst":               &e.MsgsBurst,
		"max_queues":               &e.MaxQueues,
		"max_partitions_per_queue": &e.MaxPartitionsPerQueue,
		"max_parked_pops":          &e.MaxParkedPops,
		"max_payload_bytes":        &e.MaxPayloadBytes,
		"max_batch_items":          &e.MaxBatchItems,
		"max_retained_bytes":       &e.MaxRetainedBytes,
		"max_retention_seconds":    &e.MaxRetentionSeconds,
	}
}

// ApplyOverrides returns plan with a cluster's limit_overrides (a JSON
// object) applied: a key that is absent keeps the plan value, a key set to
// JSON null makes the limit unlimited, a key set to a non-negative integer
// replaces it, and a key set to anything else keeps the plan value, so a bad
// override never silently becomes a zero. Overrides that are not a JSON
// object leave the plan untouched.
func ApplyOverrides(plan Effective, overrides []byte) Effective {
	out := plan
	if len(overrides) == 0 {
		return out
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(overrides, &raw); err != nil {
		return out
	}
	for key, field := range out.fields() {
		v, present := raw[key]
		if !present {
			continue
		}
		if string(v) == "null" {
			*field = Unlimited
			continue
		}
		var n float64
		if err := json.Unmarshal(v, &n); err != nil {
			continue
		}
		if n < 0 || n != math.Trunc(n) || n > math.MaxInt64/2 {
			continue
		}
		*field = Cap(n)
	}
	return out
}
