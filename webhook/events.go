package webhook

import (
	"fmt"
	"slices"
	"strings"

	"github.com/queengate/queengate/internal/harden"
)

// Kind is an event kind: the outbox row's kind, sent as the payload's
// "type".
type Kind struct {
	Name string
	What string
}

// Kinds are the events the control plane records, in the order the
// documentation lists them. An endpoint's filter names some of them, or
// none for all.
var Kinds = []Kind{
	{"tenant_bootstrapped", "a tenant, its first cluster, admin and key were created in one call"},
	{"tenant_status_changed", "a tenant went from one status to another (active, grace, suspended, deleting)"},
	{"tenant_deleted", "a tenant was deleted from the control plane"},
	{"cluster_status_changed", "a cluster went from one status to another (active, push_blocked, suspended, deleting)"},
	{"cluster_deleted", "a cluster was deleted from the control plane"},
	{"cluster_monthly_quota_warning", "a cluster reached the warning level of its monthly message quota"},
	{"cluster_monthly_quota_blocked", "a cluster used up its monthly message quota: its pushes are refused"},
	{"cluster_monthly_quota_cleared", "a block ended: the cluster is under its quota again, or the month is over"},
	{"api_key_issued", "an API key was created (by any path: CLI, console, API, rotation)"},
	{"api_key_revoked", "an API key was revoked"},
	{"api_key_expiring", "a live API key expires within the announcement window"},
	{"cell_tenancy_contradicted", "a cell stated to keep tenants apart was probed and found not to: it serves its keeper only"},
	{"cell_removed", "a cell was removed"},
	{"cell_residue_released", "a keeper's queues left on a cell were forgotten"},
	{"webhook_endpoint_disabled", "a webhook endpoint was disabled after failing for too long, or by an operator"},
}

// KindNames are the names of Kinds.
func KindNames() []string {
	out := make([]string, len(Kinds))
	for i, k := range Kinds {
		out[i] = k.Name
	}
	return out
}

// CheckEvents refuses a filter that names an unknown kind or one kind
// twice.
func CheckEvents(events []string) error {
	names := KindNames()
	seen := map[string]bool{}
	for _, e := range events {
		if !slices.Contains(names, e) {
			return fmt.Errorf("unknown event %q (known: %s)", e, strings.Join(names, ", "))
		}
		if seen[e] {
			return fmt.Errorf("event %q is named twice", e)
		}
		seen[e] = true
	}
	return nil
}

// CheckURL refuses an endpoint URL the gateway would not call (see
// harden.CheckOutboundURL).
func CheckURL(raw string) error { return harden.CheckOutboundURL(raw) }
