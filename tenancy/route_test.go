package tenancy

import (
	"errors"
	"strings"
	"testing"
)

// Realistic path parameters.
const (
	testPID   = "0193c4f2-7a1e-7c3b-9d2e-5f6a7b8c9d0e" // partition id
	testTxID  = "0193c4f3-0b7d-7e21-a4c5-1d2e3f405162" // transaction id
	testDLQID = "8f14e45f-ceea-467f-a0e6-3b1d2c9a7e55" // dead-letter row id
)

type routeCase struct {
	method, path string
	want         Route
}

// knownRoutes is every row of the reference's table of broker routes, with
// queengate's deliberate differences where the reference is unsafe.
var knownRoutes = []routeCase{
	{"POST", "/api/v1/push", routeProduce},
	{"GET", "/api/v1/pop", routeBlocked},
	{"GET", "/api/v1/pop/queue/orders", routeConsume},
	{"GET", "/api/v1/pop/queue/orders/partition/" + testPID, routeConsume},
	{"POST", "/api/v1/fetch", routeConsume},
	{"POST", "/api/v1/partitions/changed", routeConsume},
	{"POST", "/api/v1/ack", routeConsume},
	{"POST", "/api/v1/ack/batch", routeConsume},
	{"POST", "/api/v1/transaction", routeProduce},
	{"POST", "/api/v1/lease/" + testTxID + "/extend", routeConsume},
	{"POST", "/api/v1/configure", routeQueueAdmin},
	{"GET", "/api/v1/resources/queues", routeRead},
	{"GET", "/api/v1/resources/overview", routeRead},
	{"GET", "/api/v1/resources/namespaces", routeRead},
	{"GET", "/api/v1/resources/tasks", routeRead},
	{"GET", "/api/v1/resources/queues/orders", routeRead},
	{"DELETE", "/api/v1/resources/queues/orders", routeQueueAdmin},
	{"GET", "/api/v1/resources/queues/orders/depth", routeRead},
	{"GET", "/api/v1/resources/queues/orders/sizes", routeRead},
	{"GET", "/api/v1/resources/kv/namespaces", routeRead},
	{"POST", "/api/v1/resources/kv/list", routeRead},
	{"DELETE", "/api/v1/resources/tenant", routeBlocked}, // reference: Read (§9.1)
	{"POST", "/api/v1/resources/quota", routeBlocked},    // reference: Read (§9.1)
	{"GET", "/api/v1/messages", routeRead},
	{"GET", "/api/v1/messages/" + testPID + "/" + testTxID, routeRead},
	{"HEAD", "/api/v1/messages/" + testPID + "/" + testTxID, routeRead},
	{"DELETE", "/api/v1/messages/" + testPID + "/" + testTxID, routeQueueAdmin},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeQueueAdmin},
	{"GET", "/api/v1/dlq", routeRead},
	{"DELETE", "/api/v1/dlq", routeQueueAdmin},
	{"POST", "/api/v1/dlq/" + testDLQID + "/replay", routeQueueAdmin},
	{"POST", "/api/v1/traces", gatedRoute(FeatureTraces, GatedOpen)},
	{"GET", "/api/v1/traces/names", routeRead},
	{"GET", "/api/v1/traces/by-name/checkout-flow", routeRead},
	{"GET", "/api/v1/traces/" + testPID + "/" + testTxID, routeRead},
	{"GET", "/api/v1/status", routeOperator},
	{"GET", "/api/v1/status/buffers", routeOperator},
	{"GET", "/api/v1/status/analytics", routeRead},
	{"GET", "/api/v1/status/queues", routeRead},
	{"GET", "/api/v1/status/queues/orders", routeRead},
	{"GET", "/api/v1/analytics/system-metrics", routeOperator},
	{"GET", "/api/v1/analytics/worker-metrics", routeOperator},
	{"GET", "/api/v1/analytics/postgres-stats", routeOperator},
	{"GET", "/api/v1/analytics/queue-lag", routeRead},
	{"GET", "/api/v1/analytics/queue-ops", routeRead},
	{"GET", "/api/v1/analytics/queue-parked-replicas", routeRead},
	{"GET", "/api/v1/analytics/retention", routeRead},
	{"GET", "/api/v1/analytics/workload", routeRead},
	{"GET", "/api/v1/analytics/dlq-signatures", routeRead},
	{"GET", "/api/v1/analytics/partition-liveness", routeRead},
	{"POST", "/api/v1/migration/test-connection", routeBlocked},
	{"POST", "/api/v1/migration/start", routeBlocked},
	{"POST", "/api/v1/migration/validate", routeBlocked},
	{"POST", "/api/v1/migration/reset", routeBlocked},
	{"GET", "/api/v1/migration/status", routeBlocked},
	{"GET", "/api/v1/consumer-groups", routeRead},
	{"GET", "/api/v1/consumer-groups/lagging", routeRead},
	{"GET", "/api/v1/consumer-groups/billing-workers", routeRead},
	{"DELETE", "/api/v1/consumer-groups/billing-workers", routeQueueAdmin},
	{"POST", "/api/v1/consumer-groups/billing-workers/subscription", routeQueueAdmin},
	{"DELETE", "/api/v1/consumer-groups/billing-workers/queues/orders", routeQueueAdmin},
	{"POST", "/api/v1/consumer-groups/billing-workers/queues/orders/seek", routeQueueAdmin},
	{"POST", "/api/v1/consumer-groups/billing-workers/queues/orders/partitions/" + testPID + "/seek", routeQueueAdmin},
	{"POST", "/api/v1/consumer-groups/positions", routeConsume},
	{"POST", "/api/v1/stats/refresh", routeBlocked},
	{"GET", "/api/v1/system/maintenance", routeOperator},
	{"POST", "/api/v1/system/maintenance", routeOperator},
	{"GET", "/api/v1/system/maintenance/pop", routeOperator},
	{"POST", "/api/v1/system/maintenance/pop", routeOperator},
	{"GET", "/api/v1/system/shared-state", routeBlocked},
	{"GET", "/api/v1/system/kv-timers", routeBlocked},
	{"POST", "/api/v1/system/kv-timers", routeBlocked},
	{"GET", "/api/v1/system/ephemeral", routeBlocked},
	{"POST", "/api/v1/system/ephemeral", routeBlocked},
	{"POST", "/api/v1/system/quota", routeBlocked},
	{"POST", "/api/v1/system/quotas", routeBlocked},
	{"POST", "/api/v1/system/raft/membership/add", routeBlocked},
	{"DELETE", "/api/v1/system/raft/membership/node-2", routeBlocked},
	{"GET", "/api/v1/raft/status", routeBlocked},
	{"GET", "/api/v1/raft/members", routeBlocked},
	{"GET", "/api/v1/raft/liveness", routeBlocked},
	{"POST", "/internal/api/notify", routeBlocked},
	{"GET", "/internal/api/shared-state/stats", routeBlocked},
	{"GET", "/internal/api/inter-instance/stats", routeBlocked},
	{"POST", "/streams/v1/queries", gatedRoute(FeatureStreams, GatedOpen)},
	{"POST", "/streams/v1/state/get", gatedRoute(FeatureStreams, GatedOpen)},
	{"POST", "/streams/v1/cycle", gatedRoute(FeatureStreams, GatedMixed)},
	{"GET", "/health", routeRead},
	{"GET", "/metrics", routeBlocked},
	{"GET", "/metrics/prometheus", routeOperator},
	{"GET", "/status", routeBlocked},
	{"POST", "/api/v1/kv", gatedRoute(FeatureKV, GatedMixed)},
	{"GET", "/api/v1/kv/queen-kafka/qk:offsets/orders", gatedRoute(FeatureKV, GatedRead)},
	{"PUT", "/api/v1/kv/sessions/user:42", gatedRoute(FeatureKV, GatedGrow)},
	{"DELETE", "/api/v1/kv/sessions/user:42", gatedRoute(FeatureKV, GatedOpen)},
	{"POST", "/api/v1/timers", gatedRoute(FeatureTimers, GatedMixed)},
	{"GET", "/api/v1/timers/orders", gatedRoute(FeatureTimers, GatedRead)},
	{"GET", "/api/v1/timers/orders/reminder-42", gatedRoute(FeatureTimers, GatedRead)},
	{"DELETE", "/api/v1/timers/orders/reminder-42", gatedRoute(FeatureTimers, GatedOpen)},
	{"POST", "/api/v1/ephemeral/push", gatedRoute(FeatureEphemeral, GatedGrow)},
	{"GET", "/api/v1/ephemeral/pop", gatedRoute(FeatureEphemeral, GatedOpen)},
	{"POST", "/api/v1/ephemeral/ack", gatedRoute(FeatureEphemeral, GatedOpen)},
	{"POST", "/api/v1/ephemeral/configure", gatedRoute(FeatureEphemeral, GatedOpen)},
	{"POST", "/api/v1/ephemeral/reset", gatedRoute(FeatureEphemeral, GatedOpen)},
	{"GET", "/api/v1/ephemeral/queues", gatedRoute(FeatureEphemeral, GatedRead)},
	{"GET", "/api/v1/ephemeral/queues/presence/depth", gatedRoute(FeatureEphemeral, GatedRead)},
	{"DELETE", "/api/v1/ephemeral/queue/presence", gatedRoute(FeatureEphemeral, GatedOpen)},
	{"POST", "/api/v1/ephemeral/_adopt", routeBlocked},
	{"POST", "/api/v1/ephemeral/_leaving", routeBlocked},
	{"GET", "/api/v1/ephemeral/_ready", routeBlocked},
	{"POST", "/api/v1/locks", routeBlocked},
	{"GET", "/api/v1/connectors", routeBlocked},
	{"POST", "/api/v1/connectors", routeBlocked},
	{"GET", "/api/v1/connectors/pg-sink", routeBlocked},
	{"DELETE", "/api/v1/connectors/pg-sink", routeBlocked},
	{"POST", "/api/v1/connectors/pg-sink/resync", routeBlocked},
}

// nearMisses are the notes under the reference's rule table, its pinned
// fail-closed examples and the neighbours of every exact or prefix rule.
var nearMisses = []routeCase{
	// Plain prefixes with the trailing slash (rules 21-25).
	{"POST", "/api/v1/kvstore", routeBlocked},
	{"GET", "/api/v1/kvstore/ns/k", routeBlocked},
	{"POST", "/api/v1/timersets", routeBlocked},
	{"POST", "/api/v1/ephemerals", routeBlocked},
	{"POST", "/api/v1/ephemeral", routeBlocked},
	{"POST", "/api/v1/ephemeral/", routeBlocked},
	{"GET", "/api/v1/ephemeral/", routeBlocked},
	{"POST", "/api/v1/fetch/", routeBlocked},
	{"POST", "/api/v1/partitions/changed/", routeBlocked},
	// Trailing-slash forms that are routes.
	{"POST", "/api/v1/kv/", gatedRoute(FeatureKV, GatedMixed)},
	{"POST", "/api/v1/timers/", gatedRoute(FeatureTimers, GatedMixed)},
	{"GET", "/api/v1/pop/", routeBlocked},
	// Rule 13/14 are shapes, not suffixes.
	{"GET", "/api/v1/messages/" + testPID + "/retry", routeRead},
	{"DELETE", "/api/v1/messages/" + testPID + "/retry", routeQueueAdmin},
	{"POST", "/api/v1/messages/" + testPID + "/retry", routeBlocked},
	{"POST", "/api/v1/dlq/replay", routeBlocked},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry/", routeBlocked},
	{"PUT", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry/", routeBlocked},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retrying", routeBlocked},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/extra/retry", routeBlocked},
	{"PUT", "/api/v1/messages/" + testPID + "/" + testTxID + "/extra/retry", routeBlocked},
	{"POST", "/api/v1/dlq/" + testDLQID + "/replay/", routeBlocked},
	{"POST", "/api/v1/dlq/" + testDLQID + "/extra/replay", routeBlocked},
	{"GET", "/api/v1/dlq/" + testDLQID, routeBlocked},
	{"POST", "/api/v1/dlq/" + testDLQID + "/purge", routeBlocked},
	{"GET", "/api/v1/dlq/", routeBlocked},
	// Consume routes ignore the method (the broker answers 405).
	{"GET", "/api/v1/ack", routeConsume},
	{"DELETE", "/api/v1/ack/batch", routeConsume},
	{"PUT", "/api/v1/pop/queue/orders", routeConsume},
	{"GET", "/api/v1/lease/" + testTxID + "/extend", routeConsume},
	{"GET", "/api/v1/push", routeProduce},
	{"PUT", "/api/v1/transaction", routeProduce},
	{"GET", "/api/v1/configure", routeQueueAdmin},
	{"POST", "/api/v1/ack/", routeBlocked},
	{"POST", "/api/v1/pushes", routeBlocked},
	{"POST", "/api/v1/push/", routeBlocked},
	{"GET", "/api/v1/pop/queues/orders", routeBlocked},
	{"POST", "/api/v1/lease", routeBlocked},
	// Pinned method-exact fail-closed examples.
	{"GET", "/api/v1/kv", routeBlocked},
	{"PUT", "/api/v1/kv", routeBlocked},
	{"DELETE", "/api/v1/kv", routeBlocked},
	{"PATCH", "/api/v1/kv", routeBlocked},
	{"PATCH", "/api/v1/kv/ns/k", routeBlocked},
	{"POST", "/api/v1/kv/ns/k", routeBlocked},
	{"PUT", "/api/v1/timers", routeBlocked},
	{"GET", "/api/v1/timers", routeBlocked},
	{"PUT", "/api/v1/timers/orders/reminder-42", routeBlocked},
	{"POST", "/api/v1/timers/orders", routeBlocked},
	{"GET", "/api/v1/ephemeral/push", routeBlocked},
	{"PUT", "/api/v1/ephemeral/push", routeBlocked},
	{"POST", "/api/v1/ephemeral/pop", routeBlocked},
	{"DELETE", "/api/v1/ephemeral/pop", routeBlocked},
	{"PUT", "/api/v1/ephemeral/ack", routeBlocked},
	{"GET", "/api/v1/ephemeral/reset", routeBlocked},
	{"POST", "/api/v1/ephemeral/queues", routeBlocked},
	{"DELETE", "/api/v1/ephemeral/queues", routeBlocked},
	{"GET", "/api/v1/ephemeral/queue/orders", routeBlocked},
	{"POST", "/api/v1/ephemeral/queue/orders", routeBlocked},
	{"GET", "/api/v1/ephemeral/bogus", routeBlocked},
	{"POST", "/api/v1/ephemeral/bogus", routeBlocked},
	{"DELETE", "/api/v1/ephemeral/bogus", routeBlocked},
	{"GET", "/api/v1/ephemeral/queues/orders", routeBlocked},
	{"GET", "/api/v1/ephemeral/queues/orders/depth/extra", routeBlocked},
	{"DELETE", "/api/v1/ephemeral/queues/orders/depth", routeBlocked},
	{"GET", "/api/v1/fetch", routeBlocked},
	{"PUT", "/api/v1/fetch", routeBlocked},
	{"DELETE", "/api/v1/fetch", routeBlocked},
	{"PATCH", "/api/v1/fetch", routeBlocked},
	{"GET", "/api/v1/partitions/changed", routeBlocked},
	{"PUT", "/api/v1/partitions/changed", routeBlocked},
	{"DELETE", "/api/v1/partitions/changed", routeBlocked},
	{"PATCH", "/api/v1/partitions/changed", routeBlocked},
	{"GET", "/api/v1/partitions", routeBlocked},
	{"GET", "/api/v1/partitions/", routeBlocked},
	{"POST", "/api/v1/partitions/changedall", routeBlocked},
	{"GET", "/api/v1/partitions/list", routeBlocked},
	{"POST", "/api/v1/fetchall", routeBlocked},
	{"POST", "/api/v1/unknown", routeBlocked},
	{"GET", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeBlocked},
	{"PUT", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeBlocked},
	{"DELETE", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeBlocked},
	{"PATCH", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeBlocked},
	{"GET", "/api/v1/dlq/" + testDLQID + "/replay", routeBlocked},
	{"PUT", "/api/v1/dlq/" + testDLQID + "/replay", routeBlocked},
	{"DELETE", "/api/v1/dlq/" + testDLQID + "/replay", routeBlocked},
	{"PATCH", "/api/v1/dlq/" + testDLQID + "/replay", routeBlocked},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID, routeBlocked},
	{"PUT", "/api/v1/messages/" + testPID + "/" + testTxID, routeBlocked},
	{"POST", "/api/v1/messages", routeBlocked},
	{"HEAD", "/api/v1/messages", routeRead},
	// Rule 1 is an exact, closed list that ignores the method.
	{"DELETE", "/api/v1/status", routeOperator},
	{"GET", "/api/v1/status/", routeBlocked},
	{"GET", "/api/v1/status/buffers/x", routeRead},
	{"GET", "/api/v1/system/maintenance/", routeBlocked},
	{"GET", "/api/v1/system/maintenance/popx", routeBlocked},
	{"GET", "/api/v1/analytics/system-metrics/", routeBlocked},
	{"GET", "/metrics/prometheus/", routeRead},
	{"GET", "/metrics/", routeRead},
	// Rule 2 is a plain prefix for /internal and /api/v1/system.
	{"GET", "/internal", routeBlocked},
	{"GET", "/internal/", routeBlocked},
	{"GET", "/internalx", routeBlocked},
	{"GET", "/api/v1/system", routeBlocked},
	{"GET", "/api/v1/systemd", routeBlocked},
	{"GET", "/api/v1/migration", routeBlocked},
	{"GET", "/api/v1/stats", routeBlocked},
	{"GET", "/api/v1/stats/refresh/", routeBlocked},
	{"GET", "/status/", routeRead},
	{"GET", "/statuses", routeRead},
	// Rule 28: unknown /api/ fails closed; rule 29: everything else is Read.
	{"GET", "/api", routeRead},
	{"GET", "/api/", routeBlocked},
	{"GET", "/api/v1", routeBlocked},
	{"GET", "/api/v1/", routeBlocked},
	{"GET", "/api/v2/push", routeBlocked},
	{"POST", "/api/cp/clusters", routeBlocked},
	{"GET", "/", routeRead},
	{"GET", "/some/spa/route", routeRead},
	{"GET", "/healthz", routeRead},
	{"GET", "/apidocs", routeRead},
	{"GET", "/metricsx", routeRead},
	{"GET", "/queues/orders", routeRead},
	{"GET", "/assets/index-4f9a.js", routeRead},
	// Plain prefixes of the read rule.
	{"GET", "/api/v1/resources", routeRead},
	{"GET", "/api/v1/analytics", routeRead},
	{"GET", "/api/v1/tracesx", routeRead},
	{"GET", "/api/v1/dlqx", routeBlocked},
	// Rule 12 applies to DELETE only and needs the trailing slash.
	{"DELETE", "/api/v1/resources/queues", routeBlocked},
	{"GET", "/api/v1/traces", routeRead},
	{"PUT", "/api/v1/traces", routeBlocked},
	// Method and path case: see route_case_test.go (refused, not classified).
}

// ourDifferences pins where queengate deliberately departs from the
// reference: read prefixes are GET/HEAD-only, and /streams/ fails closed.
var ourDifferences = []routeCase{
	{"HEAD", "/api/v1/resources/queues", routeRead},
	{"HEAD", "/api/v1/dlq", routeRead},
	{"HEAD", "/api/v1/traces/names", routeRead},
	{"PUT", "/api/v1/resources/queues/orders", routeBlocked},
	{"POST", "/api/v1/resources/queues/orders", routeBlocked},
	{"PATCH", "/api/v1/resources/queues/orders", routeBlocked},
	{"POST", "/api/v1/resources/queues", routeBlocked},
	{"DELETE", "/api/v1/resources/kv/list", routeBlocked},
	{"GET", "/api/v1/resources/kv/list", routeRead},
	{"POST", "/api/v1/resources/kv/list/", routeBlocked},
	{"POST", "/api/v1/resources/kv/namespaces", routeBlocked},
	{"DELETE", "/api/v1/resources", routeBlocked},
	{"POST", "/api/v1/status/queues", routeBlocked},
	{"DELETE", "/api/v1/status/queues/orders", routeBlocked},
	{"POST", "/api/v1/analytics/queue-lag", routeBlocked},
	{"PUT", "/api/v1/consumer-groups/billing-workers", routeBlocked},
	{"PATCH", "/api/v1/consumer-groups/billing-workers/queues/orders", routeBlocked},
	{"HEAD", "/api/v1/consumer-groups", routeRead},
	{"DELETE", "/api/v1/traces/names", routeBlocked},
	{"POST", "/api/v1/traces/names", routeBlocked},
	{"POST", "/api/v1/dlq", routeBlocked},
	{"PUT", "/api/v1/dlq", routeBlocked},
	{"OPTIONS", "/api/v1/resources/queues", routeBlocked},
	// /streams/ is fail-closed.
	{"GET", "/streams/v1/queries", routeBlocked},
	{"GET", "/streams/v1/cycle", routeBlocked},
	{"PUT", "/streams/v1/cycle", routeBlocked},
	{"GET", "/streams/v1/state/get", routeBlocked},
	{"POST", "/streams/v1/state/set", routeBlocked},
	{"POST", "/streams/v1/queries/", routeBlocked},
	{"POST", "/streams/v1/cycle/", routeBlocked},
	{"POST", "/streams/v2/cycle", routeBlocked},
	{"POST", "/streams/", routeBlocked},
	{"GET", "/streams/ui", routeBlocked},
	{"DELETE", "/streams/v1/queries", routeBlocked},
	{"POST", "/streams", routeBlocked}, // not under /streams/: rule 29, which reads only
	{"GET", "/streams", routeRead},
	{"OPTIONS", "/streams", routeRead},
	{"POST", "/foo", routeBlocked},
	{"PUT", "/", routeBlocked},
	{"DELETE", "/health", routeBlocked},
}

func runRouteCases(t *testing.T, cases []routeCase) {
	t.Helper()
	for _, c := range cases {
		got, err := ClassifyRoute(c.method, c.path)
		if err != nil {
			t.Errorf("ClassifyRoute(%s %q) error %v, want %v", c.method, c.path, err, c.want)
			continue
		}
		if got != c.want {
			t.Errorf("ClassifyRoute(%s %q) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

func TestClassifyRouteKnownRoutes(t *testing.T) { runRouteCases(t, knownRoutes) }
func TestClassifyRouteNearMisses(t *testing.T)  { runRouteCases(t, nearMisses) }
func TestClassifyRouteDifferences(t *testing.T) { runRouteCases(t, ourDifferences) }

// TestClassifyRouteEscapes covers escapes that leave the route unchanged and
// are therefore accepted.
func TestClassifyRouteEscapes(t *testing.T) {
	runRouteCases(t, []routeCase{
		{"GET", "/api/v1/pop/queue/my%20queue", routeConsume},
		{"DELETE", "/api/v1/resources/queues/my%20queue", routeQueueAdmin},
		{"GET", "/api/v1/resources/queues/%C3%A9v%C3%A9nements", routeRead},
		{"GET", "/api/v1/pop/queue/%ff%fe", routeConsume},
		{"PUT", "/api/v1/kv/sessions/user%3A42", gatedRoute(FeatureKV, GatedGrow)},
		{"GET", "/api/v1/kv/ns/100%25", gatedRoute(FeatureKV, GatedRead)},
		{"POST", "/api/v1/messages/" + testPID + "/tx%2D1/retry", routeQueueAdmin},
		{"GET", "/api/v1/messages/" + testPID + "/" + testTxID + "%2Eretry", routeRead},
		{"GET", "/api/v1/pop/queue/a.b", routeConsume},
		{"GET", "/api/v1/pop/queue/...", routeConsume},
		{"GET", "/api/v1/pop/queue/%2e%2e%2e", routeConsume},
		{"GET", "/api/v1/pop/queue/.hidden", routeConsume},
		{"GET", "/some/spa/r%C3%A9sum%C3%A9", routeRead},
		{"GET", "/api/v1/pu%2573h", routeBlocked}, // decodes once, to /api/v1/pu%73h
		{"GET", "/api/v1/pop/queue/\xff", routeConsume},
		{"GET", "/api/v1/%73ystem/shared-state", routeBlocked}, // blocked both ways
	})
}

func TestClassifyRouteAmbiguous(t *testing.T) {
	cases := []struct{ method, path, why string }{
		{"GET", "", "path does not start"},
		{"GET", "api/v1/push", "path does not start"},
		{"GET", "*", "path does not start"},
		{"GET", "%2Fapi/v1/push", "path does not start"},
		{"GET", "//", "empty path segment"},
		{"GET", "//api/v1/push", "empty path segment"},
		{"POST", "/api/v1//push", "empty path segment"},
		{"POST", "/api/v1/kv//", "empty path segment"},
		{"GET", "/api/v1/resources/queues//orders", "empty path segment"},
		{"GET", "/api/v1/messages/" + testPID + "//retry", "empty path segment"},
		{"GET", "/.", "dot segment"},
		{"GET", "/..", "dot segment"},
		{"GET", "/./api/v1/push", "dot segment"},
		{"GET", "/internal/../api/v1/system/maintenance", "dot segment"},
		{"GET", "/api/v1/resources/../system/shared-state", "dot segment"},
		{"GET", "/api/v1/resources/queues/orders/..", "dot segment"},
		{"GET", "/api/v1/resources/queues/orders/../", "dot segment"},
		{"GET", "/api/v1/resources/queues/orders/./", "dot segment"},
		{"DELETE", "/api/v1/resources/queues/%2e%2e", "dot segment"},
		{"DELETE", "/api/v1/resources/queues/%2E%2E", "dot segment"},
		{"DELETE", "/api/v1/resources/queues/.%2e", "dot segment"},
		{"DELETE", "/api/v1/resources/queues/%2e", "dot segment"},
		{"GET", "/api/v1/resources/%2e%2e/system/shared-state", "dot segment"},
		{"GET", "/api/v1/pop/queue/%", "malformed percent escape"},
		{"GET", "/api/v1/pop/queue/%2", "malformed percent escape"},
		{"GET", "/api/v1/pop/queue/%zz", "malformed percent escape"},
		{"GET", "/api/v1/pop/queue/%g0", "malformed percent escape"},
		{"GET", "/api/v1/pop/queue/%%41", "malformed percent escape"},
		{"GET", "/api/v1/pop/queue/a%2Fb", "percent-encoded /"},
		{"GET", "/api/v1/pop/queue/a%2fb", "percent-encoded /"},
		{"GET", "/api%2Fv1/push", "percent-encoded /"},
		{"GET", "/api/v1/pop/queue/a%5Cb", "backslash"},
		{"GET", "/api/v1/pop/queue/a%5cb", "backslash"},
		{"GET", "/api/v1/pop/queue/a\\b", "backslash"},
		{"GET", "/internal\\..\\api", "backslash"},
		{"GET", "/api/v1/pop/queue/a%00", "control byte"},
		{"GET", "/api/v1/pop/queue/a\x00", "control byte"},
		{"GET", "/api/v1/pop/queue/a%7F", "control byte"},
		{"GET", "/api/v1/pop/queue/a\x7f", "control byte"},
		{"GET", "/api/v1/pop/queue/a%0d%0aX-Evil:1", "control byte"},
		{"GET", "/api/v1/pop/queue/a\tb", "control byte"},
		{"GET", "/api/v1/pop/queue/a%1fb", "control byte"},
		{"POST", "/api/v1/pu%73h", "changes the route"},
		{"POST", "/api/v1/pu%73%68", "changes the route"},
		{"POST", "/%61pi/v1/push", "changes the route"},
		{"GET", "/%69nternal/api/notify", "changes the route"},
		{"POST", "/streams/v1/cycl%65", "changes the route"},
		{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retr%79", "changes the route"},
		{"POST", "/api/v1/dlq/" + testDLQID + "/%72eplay", "changes the route"},
		{"POST", "/api/v1/kv%2F", "percent-encoded /"},
		{"GET", "/api/v1/status%2Fbuffers", "percent-encoded /"},
		{"GET", "/api/v1/statu%73", "changes the route"}, // Blocked on the raw path, Operator decoded
		{"DELETE", "/api/v1/resources/queue%73/orders", "changes the route"},
		{"GET", "/metrics/prometheu%73", "changes the route"},
	}
	for _, c := range cases {
		r, err := ClassifyRoute(c.method, c.path)
		if !errors.Is(err, ErrAmbiguousPath) {
			t.Errorf("ClassifyRoute(%s %q) = %v, %v; want an ErrAmbiguousPath", c.method, c.path, r, err)
			continue
		}
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("ClassifyRoute(%s %q) error %q, want reason %q", c.method, c.path, err, c.why)
		}
		if r != routeBlocked {
			t.Errorf("ClassifyRoute(%s %q) returned route %v with its error, want blocked", c.method, c.path, r)
		}
	}
}

func TestRouteIsDLQReplay(t *testing.T) {
	cases := []struct {
		method, path string
		want         bool
	}{
		{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", true},
		{"POST", "/api/v1/dlq/" + testDLQID + "/replay", true},
		{"GET", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", false},
		{"PUT", "/api/v1/dlq/" + testDLQID + "/replay", false},
		{"POST", "/api/v1/messages/" + testPID + "/retry", false},
		{"POST", "/api/v1/messages//" + testTxID + "/retry", false},
		{"POST", "/api/v1/messages/" + testPID + "//retry", false},
		{"POST", "/api/v1/messages/a/b/c/retry", false},
		{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry/", false},
		{"POST", "/api/v1/dlq/replay", false},
		{"POST", "/api/v1/dlq//replay", false},
		{"POST", "/api/v1/dlq/a/b/replay", false},
		{"POST", "/api/v1/dlq/" + testDLQID + "/replay/", false},
		{"POST", "/api/v2/dlq/" + testDLQID + "/replay", false},
		{"POST", "/x/api/v1/dlq/" + testDLQID + "/replay", false},
		{"POST", "/api/v1/push", false},
		{"POST", "", false},
	}
	for _, c := range cases {
		if got := IsDLQReplay(c.method, c.path); got != c.want {
			t.Errorf("IsDLQReplay(%s %q) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

// TestIsDLQReplayAgreesWithClassification checks that the push-block
// predicate only ever names QueueAdmin routes.
func TestRouteDLQReplayIsQueueAdmin(t *testing.T) {
	for _, set := range [][]routeCase{knownRoutes, nearMisses, ourDifferences} {
		for _, c := range set {
			if IsDLQReplay(c.method, c.path) && c.want != routeQueueAdmin {
				t.Errorf("IsDLQReplay(%s %q) is true for a %v route", c.method, c.path, c.want)
			}
		}
	}
}

func TestRouteStrings(t *testing.T) {
	cases := []struct {
		r    Route
		want string
	}{
		{routeProduce, "produce"},
		{routeBlocked, "blocked"},
		{routeConsume, "consume"},
		{routeQueueAdmin, "queue_admin"},
		{routeRead, "read"},
		{routeOperator, "operator"},
		{gatedRoute(FeatureKV, GatedGrow), "gated(kv,grow)"},
		{gatedRoute(FeatureStreams, GatedMixed), "gated(streams,mixed)"},
		{gatedRoute(FeatureTraces, GatedOpen), "gated(traces,open)"},
		{gatedRoute(FeatureTimers, GatedRead), "gated(timers,read)"},
		{gatedRoute(FeatureEphemeral, GatedNone), "gated(ephemeral,none)"},
		{gatedRoute(FeatureNone, GatedOp(9)), "gated(none,unknown)"},
		{Route{Class: Class(42)}, "unknown"},
		{Route{Class: ClassGated, Feature: 77}, "gated(unknown,none)"},
		{Route{Class: ClassRead, Feature: FeatureKV}, "read"},
	}
	for _, c := range cases {
		if got := c.r.String(); got != c.want {
			t.Errorf("Route%+v.String() = %q, want %q", c.r, got, c.want)
		}
	}
	if Class(0) != ClassBlocked {
		t.Errorf("the zero Class is %v, want blocked", Class(0))
	}
}

func TestRouteFeaturesAllows(t *testing.T) {
	all := []Feature{FeatureStreams, FeatureTraces, FeatureKV, FeatureTimers, FeatureEphemeral}
	on := map[Feature]Features{
		FeatureStreams:   {Streams: true},
		FeatureTraces:    {Traces: true},
		FeatureKV:        {KV: true},
		FeatureTimers:    {Timers: true},
		FeatureEphemeral: {Ephemeral: true},
	}
	for _, f := range all {
		for _, g := range all {
			if got, want := on[f].Allows(g), f == g; got != want {
				t.Errorf("Features{%v on}.Allows(%v) = %v, want %v", f, g, got, want)
			}
		}
		if !on[f].Allows(FeatureNone) {
			t.Errorf("Features{%v on}.Allows(none) = false, want true", f)
		}
	}
	if !(Features{}).Allows(FeatureNone) {
		t.Error("no features must still allow FeatureNone")
	}
	if (Features{Streams: true, Traces: true, KV: true, Timers: true, Ephemeral: true}).Allows(Feature(99)) {
		t.Error("an unknown feature must be refused")
	}
}

func TestClassifyRouteDoesNotAllocate(t *testing.T) {
	for _, c := range knownRoutes {
		allocs := testing.AllocsPerRun(20, func() { _, _ = ClassifyRoute(c.method, c.path) })
		if allocs != 0 {
			t.Errorf("ClassifyRoute(%s %q) allocates %v times", c.method, c.path, allocs)
		}
	}
	bad := testing.AllocsPerRun(20, func() { _, _ = ClassifyRoute("GET", "/internal/../x") })
	if bad != 0 {
		t.Errorf("refusing a path allocates %v times", bad)
	}
}

// benchMix is a realistic request mix: mostly data-plane traffic.
var benchMix = []routeCase{
	{"POST", "/api/v1/push", routeProduce},
	{"POST", "/api/v1/push", routeProduce},
	{"GET", "/api/v1/pop/queue/orders/partition/" + testPID, routeConsume},
	{"GET", "/api/v1/pop/queue/orders", routeConsume},
	{"POST", "/api/v1/ack/batch", routeConsume},
	{"POST", "/api/v1/ack", routeConsume},
	{"POST", "/api/v1/transaction", routeProduce},
	{"POST", "/api/v1/lease/" + testTxID + "/extend", routeConsume},
	{"GET", "/api/v1/resources/queues/orders/depth", routeRead},
	{"GET", "/api/v1/messages/" + testPID + "/" + testTxID, routeRead},
	{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/retry", routeQueueAdmin},
	{"PUT", "/api/v1/kv/sessions/user:42", gatedRoute(FeatureKV, GatedGrow)},
	{"POST", "/streams/v1/cycle", gatedRoute(FeatureStreams, GatedMixed)},
	{"GET", "/api/v1/ephemeral/queues/presence/depth", gatedRoute(FeatureEphemeral, GatedRead)},
	{"GET", "/api/v1/analytics/queue-lag", routeRead},
	{"GET", "/health", routeRead},
}

func BenchmarkClassifyRoute(b *testing.B) {
	b.Run("mix", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c := benchMix[i%len(benchMix)]
			if r, err := ClassifyRoute(c.method, c.path); err != nil || r != c.want {
				b.Fatalf("%s %s = %v, %v", c.method, c.path, r, err)
			}
		}
	})
	b.Run("escaped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ClassifyRoute("GET", "/api/v1/pop/queue/my%20queue/partition/"+testPID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ClassifyRoute("GET", "/internal/../api/v1/system/maintenance"); err == nil {
				b.Fatal("accepted")
			}
		}
	})
}
