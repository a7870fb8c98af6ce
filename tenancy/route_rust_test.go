package tenancy

import "testing"

// The Rust brokers' purge and grant routes act on the tenant the caller
// names (?tenant=, or "tenant"/"tenantId" in the body): forwarding any
// method of them would let one cluster wipe or grant another.
func TestCallerTargetedTenantAndQuotaRoutesAreBlocked(t *testing.T) {
	runRouteCases(t, []routeCase{
		{"DELETE", "/api/v1/resources/tenant", routeBlocked},
		{"GET", "/api/v1/resources/tenant", routeBlocked},
		{"HEAD", "/api/v1/resources/tenant", routeBlocked},
		{"POST", "/api/v1/resources/tenant", routeBlocked},
		{"DELETE", "/api/v1/resources/tenant/", routeBlocked},
		{"DELETE", "/api/v1/resources/tenant/0193c4f2-7a1e-7c3b-9d2e-5f6a7b8c9d0e", routeBlocked},
		{"POST", "/api/v1/resources/quota", routeBlocked},
		{"GET", "/api/v1/resources/quota", routeBlocked},
		{"PUT", "/api/v1/resources/quota", routeBlocked},
		{"POST", "/api/v1/resources/quota/kv", routeBlocked},
		{"POST", "/api/v1/system/quota", routeBlocked},
		{"GET", "/api/v1/system/quota", routeBlocked},
		{"POST", "/api/v1/system/quotas", routeBlocked},
		{"GET", "/api/v1/system/quotas", routeBlocked},
	})
	// Their neighbours keep their class.
	runRouteCases(t, []routeCase{
		{"GET", "/api/v1/resources/tenants", routeRead},
		{"GET", "/api/v1/resources/quotas", routeRead},
	})
}

// /auth and /raft belong to the broker's own identity and cluster, never
// to a tenant; the console answers /auth/ before classification.
func TestBrokerAuthAndRaftRoutesAreBlocked(t *testing.T) {
	var cases []routeCase
	for _, p := range []string{"/auth", "/auth/", "/auth/me", "/auth/login", "/auth/logout", "/auth/google/callback",
		"/raft", "/raft/", "/raft/v1/local", "/raft/v1/append"} {
		for _, m := range []string{"GET", "HEAD", "POST", "OPTIONS", "DELETE"} {
			cases = append(cases, routeCase{m, p, routeBlocked})
		}
	}
	runRouteCases(t, cases)
	// Not a prefix match on the letters: /authors is the catch-all.
	runRouteCases(t, []routeCase{{"GET", "/authors", routeRead}, {"GET", "/rafts", routeRead}})
	// An upper-case spelling that would reach them is ambiguous, not a read.
	for _, p := range []string{"/AUTH/me", "/Raft/v1/local", "/%61uth/me"} {
		if _, err := ClassifyRoute("GET", p); err == nil {
			t.Errorf("GET %s classified; want it refused as ambiguous", p)
		}
	}
}

// Every raft-storage route the brokers added has a class chosen for it.
func TestRaftStorageRoutesHaveDeliberateClasses(t *testing.T) {
	runRouteCases(t, []routeCase{
		// Positions and offset bounds: reads a consumer needs, no cursor moves.
		{"POST", "/api/v1/consumer-groups/positions", routeConsume},
		{"GET", "/api/v1/consumer-groups/positions", routeRead}, // a group named "positions"
		{"DELETE", "/api/v1/consumer-groups/positions", routeQueueAdmin},
		{"POST", "/api/v1/fetch/offsets", routeConsume},
		{"GET", "/api/v1/fetch/offsets", routeBlocked},
		{"PUT", "/api/v1/fetch/offsets", routeBlocked},
		{"POST", "/api/v1/fetch/offsets/x", routeBlocked},
		// The tenant's own partitions and sizes: reads.
		{"GET", "/api/v1/resources/partitions", routeRead},
		{"POST", "/api/v1/resources/partitions", routeBlocked},
		{"GET", "/api/v1/resources/queues/orders/sizes", routeRead},
		{"DELETE", "/api/v1/resources/queues/orders/sizes", routeQueueAdmin},
		// Locks: KV rows in a body the gateway does not read.
		{"POST", "/api/v1/locks", routeBlocked},
		{"GET", "/api/v1/locks", routeBlocked},
		{"DELETE", "/api/v1/locks/l-1", routeBlocked},
	})
}
