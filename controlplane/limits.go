package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/queengate/queengate/limits"
)

// Limit is one limit of a cluster: the plan's value, the override if the
// cluster has one, and what the gateway enforces. A nil value is unlimited.
type Limit struct {
	Name string `json:"name"`
	Plan *int64 `json:"plan"`
	// Override is the override exactly as stored (a number or null), absent
	// when the cluster has none for this limit.
	Override  json.RawMessage `json:"override,omitempty"`
	Effective *int64          `json:"effective"`
	// Inactive says why the limit is not enforced now (absent when it
	// is): max_retained_bytes on a cell whose broker reports no retained
	// bytes.
	Inactive string `json:"inactive,omitempty"`
}

// StorageInactive is why max_retained_bytes is not enforced on a cell whose
// broker reports no retained bytes (cells.storage_reporting not_reported).
const StorageInactive = "the broker reports no retained bytes (brokers before 0.16)"

// Limits are a cluster's limits: its plan merged with its limit_overrides.
type Limits struct {
	Cluster   string          `json:"cluster"`
	ClusterID string          `json:"cluster_id"`
	Plan      string          `json:"plan"`
	Overrides json.RawMessage `json:"overrides"`
	Limits    []Limit         `json:"limits"`
}

// NormalizeOverrides validates a limit_overrides document as an operator
// gives it and returns it compact. It must be a JSON object whose keys are
// limit names (LimitNames) and whose values are whole numbers of at least 0
// or null (unlimited). An empty document or null clears every override and
// yields {}.
func NormalizeOverrides(doc []byte) ([]byte, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 || string(doc) == "null" {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || dec.More() {
		return nil, errorf(Invalid, "invalid overrides: want a JSON object such as {\"max_queues\": 500, \"req_burst\": null}")
	}
	if obj == nil {
		return []byte("{}"), nil
	}
	for key, v := range obj {
		if !isLimitName(key) {
			return nil, errorf(Invalid, "invalid overrides: unknown limit %q (known: %s)", key, strings.Join(LimitNames, ", "))
		}
		if v == nil {
			continue
		}
		n, ok := v.(json.Number)
		if !ok {
			return nil, errorf(Invalid, "invalid overrides: %s must be a whole number of at least 0, or null for unlimited", key)
		}
		if i, err := strconv.ParseInt(n.String(), 10, 64); err != nil || i < 0 {
			return nil, errorf(Invalid, "invalid overrides: %s must be a whole number of at least 0, or null for unlimited (got %s)", key, n)
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, errorf(Invalid, "invalid overrides: %v", err)
	}
	return out, nil
}

// SetOverrides replaces a cluster's limit overrides as a whole through
// set_limit_override (an empty document clears them) and returns the
// limits that now apply.
func SetOverrides(ctx context.Context, db DB, cluster string, doc []byte) (Limits, error) {
	norm, err := NormalizeOverrides(doc)
	if err != nil {
		return Limits{}, err
	}
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Limits{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_limit_override($1::uuid, $2::jsonb)`, c.ID, string(norm)); err != nil {
		return Limits{}, dbError("set limit override", err)
	}
	return ClusterLimits(ctx, db, c.ID)
}

// ClusterLimits returns a cluster's plan limits, overrides and the limits
// the gateway enforces, merged by the same rule the gateway applies (a
// missing key keeps the plan value, null is unlimited, a number replaces it,
// anything else keeps the plan value).
func ClusterLimits(ctx context.Context, db DB, cluster string) (Limits, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Limits{}, err
	}
	cl, err := getCluster(ctx, db, c.ID)
	if err != nil {
		return Limits{}, err
	}
	p, err := getPlan(ctx, db, cl.PlanCode)
	if err != nil {
		return Limits{}, err
	}
	out := mergeLimits(cl, p)
	var reporting string
	if err := db.QueryRow(ctx, `SELECT ce.storage_reporting FROM queen_proxy.clusters c
		JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE c.id = $1::uuid`, c.ID).Scan(&reporting); err != nil {
		return Limits{}, dbError("read the cell's storage reporting", err)
	}
	if reporting == "not_reported" {
		for i := range out.Limits {
			if out.Limits[i].Name == "max_retained_bytes" && out.Limits[i].Effective != nil {
				out.Limits[i].Inactive = StorageInactive
			}
		}
	}
	return out, nil
}

func mergeLimits(c Cluster, p Plan) Limits {
	out := Limits{Cluster: c.Slug, ClusterID: c.ID, Plan: p.Code, Overrides: c.Overrides}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(c.Overrides, &raw)

	// The request-path limits are merged by the gateway's own code, so what
	// is shown is what is enforced.
	planCap := func(name string) limits.Cap {
		if v := p.Limits[name]; v != nil {
			return limits.Cap(*v)
		}
		return limits.Unlimited
	}
	effective := capsByName(limits.ApplyOverrides(limits.Effective{
		MaxReqPerSec:          planCap("max_req_per_sec"),
		ReqBurst:              planCap("req_burst"),
		MaxMsgsPerSec:         planCap("max_msgs_per_sec"),
		MsgsBurst:             planCap("msgs_burst"),
		MaxQueues:             planCap("max_queues"),
		MaxPartitionsPerQueue: planCap("max_partitions_per_queue"),
		MaxParkedPops:         planCap("max_parked_pops"),
		MaxPayloadBytes:       planCap("max_payload_bytes"),
		MaxBatchItems:         planCap("max_batch_items"),
		MaxRetainedBytes:      planCap("max_retained_bytes"),
		MaxRetentionSeconds:   planCap("max_retention_seconds"),
	}, c.Overrides))

	for _, name := range LimitNames {
		l := Limit{Name: name, Plan: p.Limits[name], Override: raw[name]}
		if v, ok := effective[name]; ok {
			if !v.IsUnlimited() {
				n := int64(v)
				l.Effective = &n
			}
		} else {
			l.Effective = mergeOne(l.Plan, raw[name])
		}
		out.Limits = append(out.Limits, l)
	}
	return out
}

func capsByName(e limits.Effective) map[string]limits.Cap {
	return map[string]limits.Cap{
		"max_req_per_sec":          e.MaxReqPerSec,
		"req_burst":                e.ReqBurst,
		"max_msgs_per_sec":         e.MaxMsgsPerSec,
		"msgs_burst":               e.MsgsBurst,
		"max_queues":               e.MaxQueues,
		"max_partitions_per_queue": e.MaxPartitionsPerQueue,
		"max_parked_pops":          e.MaxParkedPops,
		"max_payload_bytes":        e.MaxPayloadBytes,
		"max_batch_items":          e.MaxBatchItems,
		"max_retained_bytes":       e.MaxRetainedBytes,
		"max_retention_seconds":    e.MaxRetentionSeconds,
	}
}

// mergeOne applies the override rule to a limit outside the gateway's
// request-path set (monthly_msgs_quota).
func mergeOne(plan *int64, override json.RawMessage) *int64 {
	if override == nil {
		return plan
	}
	if string(override) == "null" {
		return nil
	}
	var n int64
	if err := json.Unmarshal(override, &n); err != nil || n < 0 {
		return plan
	}
	return &n
}
