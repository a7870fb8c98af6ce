package tenancy

import "testing"

// TestCellWideRoutesReachNoTenant: a Rust tenancy broker answers these
// routes for the whole cell, every tenant's data, whoever asks. Only a live
// operator may call them: an API key of every scope and a cluster admin are
// refused, and a spelling that could reach them another way is refused
// before any class. (A trailing slash is no route of the broker: the e2e
// test TestTenantCannotReadCellWideStatus shows it reads nothing there.)
func TestCellWideRoutesReachNoTenant(t *testing.T) {
	tenants := map[string]*Principal{
		"all-scope key": {Kind: PrincipalAPIKey, KeyID: "k", Scopes: ScopeSet(ScopeRead) | ScopeSet(ScopeAdmin) | ScopeSet(ScopeProduce) | ScopeSet(ScopeConsume)},
		"cluster admin": {Kind: PrincipalUser, UserID: "u", Role: RoleAdmin},
	}
	cellWide := []string{
		"/api/v1/status", "/api/v1/status/buffers", "/api/v1/analytics/worker-metrics",
		"/api/v1/analytics/system-metrics", "/api/v1/analytics/postgres-stats",
		"/metrics", "/metrics/prometheus", "/status",
	}
	for _, path := range cellWide {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			r, err := ClassifyRoute(method, path)
			if err != nil || (r.Class != ClassOperator && r.Class != ClassBlocked) {
				t.Errorf("%s %s: class %v (%v), want operator or blocked", method, path, r.Class, err)
				continue
			}
			for name, p := range tenants {
				if Authorize(p, r) {
					t.Errorf("%s may call %s %s", name, method, path)
				}
			}
		}
	}
	for _, path := range []string{
		"//api/v1/status", "/api/v1/./status", "/api/v1/x/../status", "/api/v1/%73tatus", "/api/v1/Status",
		"/api/v1/analytics%2Fworker-metrics", "/api/v1/analytics/Worker-Metrics",
	} {
		if r, err := ClassifyRoute("GET", path); err == nil && r.Class != ClassOperator && r.Class != ClassBlocked {
			t.Errorf("GET %s: class %v, want refused", path, r.Class)
		}
	}
}
