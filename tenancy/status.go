package tenancy

// Status is a cluster's effective lifecycle status: the worse of its
// tenant's status and its own.
type Status int

// Effective statuses, in increasing severity.
const (
	StatusActive Status = iota + 1
	StatusPushBlocked
	StatusSuspended
	StatusDeleting
)

func (s Status) String() string {
	switch s {
	case StatusActive:
		return "active"
	case StatusPushBlocked:
		return "push_blocked"
	case StatusSuspended:
		return "suspended"
	case StatusDeleting:
		return "deleting"
	}
	return "unknown"
}

// Serves reports whether the data plane serves a cluster in this status at
// all; a push-blocked cluster is served (only its pushes are refused).
func (s Status) Serves() bool { return s == StatusActive || s == StatusPushBlocked }

// MergeStatus combines a tenant status and a cluster status, worst wins. A
// tenant in "grace" blocks pushes like a push-blocked cluster. A status the
// gateway does not know counts as suspended, so it fails closed.
func MergeStatus(tenant, cluster string) Status {
	return max(tenantSeverity(tenant), clusterSeverity(cluster))
}

func tenantSeverity(s string) Status {
	switch s {
	case "active":
		return StatusActive
	case "grace":
		return StatusPushBlocked
	case "suspended":
		return StatusSuspended
	case "deleting":
		return StatusDeleting
	}
	return StatusSuspended
}

func clusterSeverity(s string) Status {
	switch s {
	case "active":
		return StatusActive
	case "push_blocked":
		return StatusPushBlocked
	case "suspended":
		return StatusSuspended
	case "deleting":
		return StatusDeleting
	}
	return StatusSuspended
}
