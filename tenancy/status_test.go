package tenancy

import "testing"

func TestMergeStatus(t *testing.T) {
	cases := []struct {
		tenant, cluster string
		want            Status
	}{
		{"active", "active", StatusActive},
		{"grace", "active", StatusPushBlocked},
		{"active", "push_blocked", StatusPushBlocked},
		{"active", "suspended", StatusSuspended},
		{"suspended", "active", StatusSuspended},
		{"deleting", "push_blocked", StatusDeleting},
		{"grace", "deleting", StatusDeleting},
		{"active", "bogus", StatusSuspended},
		{"", "active", StatusSuspended},
		{"grace", "push_blocked", StatusPushBlocked},
	}
	for _, tc := range cases {
		if got := MergeStatus(tc.tenant, tc.cluster); got != tc.want {
			t.Errorf("MergeStatus(%q, %q) = %v, want %v", tc.tenant, tc.cluster, got, tc.want)
		}
	}
	if StatusPushBlocked.Serves() != true || StatusSuspended.Serves() || StatusDeleting.Serves() {
		t.Error("Serves: push-blocked must be served, suspended and deleting must not")
	}
}
