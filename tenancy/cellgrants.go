package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/wire"
)

// GrantKind is a feature grant a tenancy broker (Queen's Rust brokers with
// QUEEN_TENANCY_HEADER=true) requires per tenant before it serves the
// feature: without it the feature answers 403 feature_gated.
type GrantKind string

// The grant kinds, as POST /api/v1/resources/quota names them.
const (
	// GrantKV covers KV, timers and locks, and so the Kafka and S3
	// carve-out's offset commits, which are KV batches.
	GrantKV GrantKind = "kv"
	// GrantEphemeral covers ephemeral queues.
	GrantEphemeral GrantKind = "ephemeral"
	// GrantStreams covers streams (a kind the raft-storage line takes;
	// whether it gates streams without it is not confirmed).
	GrantStreams GrantKind = "streams"
)

// AllGrantKinds is every kind, in the order they are issued.
var AllGrantKinds = []GrantKind{GrantKV, GrantEphemeral, GrantStreams}

// How a cell's grants are handled (cells.grants), as the operator states
// it for the cell's broker line.
const (
	// CellGrantsAPI: the broker takes grants over HTTP (the raft-storage
	// line): the gateway issues them at placement and withdraws them when
	// the cluster leaves.
	CellGrantsAPI = "api"
	// CellGrantsVerify: grants are rows the operator writes in the cell's
	// own database (1.x, queen.kv_quota): the gateway checks them at
	// placement and refuses a cluster that lacks one.
	CellGrantsVerify = "verify"
	// CellGrantsNone: the cell's broker gates no feature by grant (the
	// public 0.15 broker, or a Rust broker with tenancy off).
	CellGrantsNone = "none"
)

// GrantsFor is the grants a cluster whose plan has f needs on a tenancy
// cell. KV is always needed: the Kafka and S3 carve-out lets every
// cluster's clients commit offsets through KV batches, whatever the plan
// says about kv. Timers are KV rows, so a plan with timers needs KV too.
func GrantsFor(f Features) []GrantKind {
	kinds := []GrantKind{GrantKV}
	if f.Ephemeral {
		kinds = append(kinds, GrantEphemeral)
	}
	if f.Streams {
		kinds = append(kinds, GrantStreams)
	}
	return kinds
}

// grantQuotaPath is the raft-storage line's grant route; the gateway never
// forwards it for a client (it names its target in the body).
const grantQuotaPath = "/api/v1/resources/quota"

// IssueGrants grants tenant every kind in kinds through the cell's quota
// route. Granting what is granted already changes nothing, so it may run
// again after a failure. The first kind the broker does not confirm (a
// non-2xx answer, or no answer) is an error naming it.
func IssueGrants(ctx context.Context, cell cellclient.Client, tenant string, kinds []GrantKind) error {
	return setGrants(ctx, cell, tenant, kinds, true)
}

// WithdrawGrants withdraws every kind in kinds from tenant through the
// cell's quota route ("enabled": false). Withdrawing what is not granted
// changes nothing.
func WithdrawGrants(ctx context.Context, cell cellclient.Client, tenant string, kinds []GrantKind) error {
	return setGrants(ctx, cell, tenant, kinds, false)
}

func setGrants(ctx context.Context, cell cellclient.Client, tenant string, kinds []GrantKind, enabled bool) error {
	verb := "grant"
	if !enabled {
		verb = "withdraw"
	}
	for _, k := range kinds {
		// The tenant is named in the body as well as in the header: the
		// route acts on the body's tenant, and the header alone would be
		// read as "the caller's own".
		body, err := json.Marshal(map[string]any{"tenant": tenant, "kind": string(k), "enabled": enabled})
		if err != nil {
			return err
		}
		a, err := cell.Do(ctx, cellclient.Request{Method: http.MethodPost, Path: grantQuotaPath, Tenant: tenant, Body: body})
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, k, err)
		}
		if !a.OK() {
			return fmt.Errorf("%s %s: the broker answered HTTP %d: %s", verb, k, a.Status, snippet(a.Body))
		}
	}
	return nil
}

// grantCheckName names what the verification reads: a KV namespace and an
// ephemeral queue under the probe's reserved prefix, which no client
// request may name, so the reads touch nothing of the tenant's.
const grantCheckName = ProbeQueuePrefix + "grant-check"

// VerifyGrants reads, as tenant, one thing behind each kind in kinds (a KV
// key, an ephemeral pop of a queue nobody can push to) and returns the
// kinds the broker refused with 403 feature_gated. A 2xx answer is a
// grant; a 404 is a broker without the route, which gates nothing. Any
// other answer proves neither and is an error. Streams cannot be read
// without a grant-free side effect and are not checked.
func VerifyGrants(ctx context.Context, cell cellclient.Client, tenant string, kinds []GrantKind) ([]GrantKind, error) {
	var missing []GrantKind
	for _, k := range kinds {
		var path string
		switch k {
		case GrantKV:
			path = "/api/v1/kv/" + grantCheckName + "/" + grantCheckName
		case GrantEphemeral:
			path = "/api/v1/ephemeral/pop?queue=" + grantCheckName
		default:
			continue
		}
		a, err := cell.Do(ctx, cellclient.Request{Method: http.MethodGet, Path: path, Tenant: tenant})
		if err != nil {
			return nil, fmt.Errorf("check the %s grant: %w", k, err)
		}
		switch {
		case a.OK(), a.Status == http.StatusNotFound:
		case a.Status == http.StatusForbidden && isFeatureGated(a.Body):
			missing = append(missing, k)
		default:
			return nil, fmt.Errorf("check the %s grant: the broker answered HTTP %d: %s", k, a.Status, snippet(a.Body))
		}
	}
	return missing, nil
}

// isFeatureGated reports a broker's feature_gated refusal: the code in
// "error" or "reason" (the KV envelope) or "code" (the raft-storage one),
// read by the rules of answers (names exactly).
func isFeatureGated(raw []byte) bool {
	var v [3][]byte
	if !wire.TopMembers(raw, []string{"error", "reason", "code"}, v[:]) {
		return false
	}
	for _, m := range v {
		if s, ok := wire.StringValue(m); ok && s == "feature_gated" {
			return true
		}
	}
	return false
}

// snippet is at most 200 bytes of an answer, for an error message.
func snippet(raw []byte) string {
	return strings.TrimSpace(string(raw[:min(len(raw), 200)]))
}

// KVQuotaGrantSQL is the statement that grants tenant the KV grant on a
// 1.x cell, run by the operator in the cell's own database: a
// queen.kv_quota row for the tenant (its limits NULL: unlimited) is the
// grant. It inserts nothing when the row exists.
func KVQuotaGrantSQL(tenant string) string {
	return fmt.Sprintf("INSERT INTO queen.kv_quota (tenant_id) SELECT '%[1]s'::uuid WHERE NOT EXISTS (SELECT 1 FROM queen.kv_quota WHERE tenant_id = '%[1]s'::uuid);", tenant)
}

// KVQuotaWithdrawSQL is the statement that withdraws it.
func KVQuotaWithdrawSQL(tenant string) string {
	return fmt.Sprintf("DELETE FROM queen.kv_quota WHERE tenant_id = '%s'::uuid;", tenant)
}
