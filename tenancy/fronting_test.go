package tenancy

import "testing"

func TestFrontingServes(t *testing.T) {
	on := func(cell, group string) *Cluster { return &Cluster{Slug: "c", CellSlug: cell, CellGroup: group} }
	configured := Fronting{Group: "eu1-a", Cells: []string{"eu1-a", "eu1-b"}}
	unconfigured := Fronting{}
	groupOnly := Fronting{Group: "eu1-a"}
	cases := []struct {
		name string
		f    Fronting
		c    *Cluster
		want bool
	}{
		{"own cell, claimed by this group", configured, on("eu1-a", "eu1-a"), true},
		{"own cell, claim not recorded yet", configured, on("eu1-b", ""), true},
		{"own cell, claimed by another group", configured, on("eu1-b", "eu1-x"), false},
		{"a cell not configured, unclaimed", configured, on("us1-a", ""), false},
		{"a cell not configured, claimed by this group earlier", configured, on("us1-a", "eu1-a"), false},
		{"no cells configured: an unclaimed cell", unconfigured, on("us1-a", ""), true},
		{"no cells configured: a claimed cell", unconfigured, on("us1-a", "us1-a"), false},
		{"group without cells: its own group's cell", groupOnly, on("eu1-a", "eu1-a"), true},
		{"group without cells: another group's cell", groupOnly, on("us1-a", "us1-a"), false},
	}
	for _, tc := range cases {
		if got := tc.f.Serves(tc.c); got != tc.want {
			t.Errorf("%s: Serves = %v, want %v", tc.name, got, tc.want)
		}
	}
}
