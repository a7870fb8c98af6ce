package webhook

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
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

// CheckURL refuses an endpoint URL the gateway would not call: anything
// but an absolute http or https URL with a host, and URLs with user
// information (a password in a URL ends up in logs and listings) or a
// fragment.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("endpoint URL %q does not parse: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint URL %q must start with https:// or http://", raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("endpoint URL %q has no host", raw)
	case u.User != nil:
		return fmt.Errorf("endpoint URL %q carries user information; put credentials in the receiver's check of the signature instead", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("endpoint URL %q has a fragment", raw)
	case strings.ContainsAny(raw, " \t\r\n"):
		return fmt.Errorf("endpoint URL %q contains white space", raw)
	}
	return nil
}
