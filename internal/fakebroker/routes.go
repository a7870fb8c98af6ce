package fakebroker

import (
	"net/url"
	"strings"
)

// route is one registered method and path pattern. Pattern segments that
// start with ':' capture a non-empty path segment.
type route struct {
	method  string
	pattern string
	scoped  bool // acts on tenant data, so subject to Options.RequireTenant
	// rustOnly: served only under TenancyRust (rusttenancy.go); the
	// 0.15.1 model has no such route.
	rustOnly bool
	handler  func(*Broker, *reqCtx)
	segs     []string
}

// routes lists every route of the recorded broker (except the dashboard,
// which was not served). Literal patterns come before parameterised ones
// that could also match them.
var routes = buildRoutes([]route{
	{method: "GET", pattern: "/health", handler: (*Broker).handleHealth},
	{method: "GET", pattern: "/metrics", handler: (*Broker).handleMetrics},
	{method: "GET", pattern: "/metrics/prometheus", handler: (*Broker).handlePrometheus},

	{method: "POST", pattern: "/api/v1/configure", scoped: true, handler: (*Broker).handleConfigure},
	{method: "POST", pattern: "/api/v1/push", scoped: true, handler: (*Broker).handlePush},
	{method: "GET", pattern: "/api/v1/pop/queue/:queue", scoped: true, handler: (*Broker).handlePop},
	{method: "GET", pattern: "/api/v1/pop/queue/:queue/partition/:partition", scoped: true, handler: (*Broker).handlePop},
	{method: "POST", pattern: "/api/v1/ack", scoped: true, handler: (*Broker).handleAck},
	{method: "POST", pattern: "/api/v1/ack/batch", scoped: true, handler: (*Broker).handleAckBatch},
	{method: "POST", pattern: "/api/v1/transaction", scoped: true, handler: (*Broker).handleTransaction},
	{method: "POST", pattern: "/api/v1/lease/:leaseId/extend", scoped: true, handler: (*Broker).handleLeaseExtend},

	{method: "GET", pattern: "/api/v1/resources/overview", scoped: true, handler: (*Broker).handleOverview},
	{method: "GET", pattern: "/api/v1/resources/queues", scoped: true, handler: (*Broker).handleQueueList},
	{method: "GET", pattern: "/api/v1/resources/queues/:queue", scoped: true, handler: (*Broker).handleQueueDetail},
	{method: "DELETE", pattern: "/api/v1/resources/queues/:queue", scoped: true, handler: (*Broker).handleQueueDelete},
	{method: "GET", pattern: "/api/v1/resources/namespaces", scoped: true, handler: (*Broker).handleNamespaces},
	{method: "GET", pattern: "/api/v1/resources/tasks", scoped: true, handler: (*Broker).handleTasks},

	{method: "GET", pattern: "/api/v1/messages", scoped: true, handler: (*Broker).handleMessageList},
	{method: "GET", pattern: "/api/v1/messages/:partitionId/:transactionId", scoped: true, handler: (*Broker).handleMessageGet},
	{method: "DELETE", pattern: "/api/v1/messages/:partitionId/:transactionId", scoped: true, handler: (*Broker).handleMessageDelete},
	{method: "GET", pattern: "/api/v1/dlq", scoped: true, handler: (*Broker).handleDLQ},

	{method: "POST", pattern: "/api/v1/traces", scoped: true, handler: (*Broker).handleTraceRecord},
	{method: "GET", pattern: "/api/v1/traces/names", scoped: true, handler: (*Broker).handleTraceNames},
	{method: "GET", pattern: "/api/v1/traces/by-name/:traceName", scoped: true, handler: (*Broker).handleTracesByName},
	{method: "GET", pattern: "/api/v1/traces/:partitionId/:transactionId", scoped: true, handler: (*Broker).handleTracesByMessage},

	{method: "GET", pattern: "/api/v1/status", scoped: true, handler: (*Broker).handleStatus},
	{method: "GET", pattern: "/api/v1/status/queues", scoped: true, handler: (*Broker).handleStatusQueues},
	{method: "GET", pattern: "/api/v1/status/queues/:queue", scoped: true, handler: (*Broker).handleStatusQueue},
	{method: "GET", pattern: "/api/v1/status/queues/:queue/messages", scoped: true, handler: (*Broker).handleStatusQueueMessages},
	{method: "GET", pattern: "/api/v1/status/analytics", scoped: true, handler: (*Broker).handleStatusAnalytics},
	{method: "GET", pattern: "/api/v1/status/buffers", handler: (*Broker).handleStatusBuffers},
	{method: "GET", pattern: "/api/v1/analytics/system-metrics", handler: (*Broker).handleSystemMetrics},
	{method: "GET", pattern: "/api/v1/analytics/worker-metrics", scoped: true, handler: (*Broker).handleWorkerMetrics},
	{method: "GET", pattern: "/api/v1/analytics/queue-lag", scoped: true, handler: (*Broker).handleQueueLag},
	{method: "GET", pattern: "/api/v1/analytics/queue-ops", scoped: true, handler: (*Broker).handleQueueOps},
	{method: "GET", pattern: "/api/v1/analytics/queue-parked-replicas", handler: (*Broker).handleParkedReplicas},
	{method: "GET", pattern: "/api/v1/analytics/retention", scoped: true, handler: (*Broker).handleRetention},
	{method: "GET", pattern: "/api/v1/analytics/postgres-stats", handler: (*Broker).handlePostgresStats},

	{method: "GET", pattern: "/api/v1/consumer-groups", scoped: true, handler: (*Broker).handleGroupList},
	{method: "GET", pattern: "/api/v1/consumer-groups/lagging", scoped: true, handler: (*Broker).handleGroupLagging},
	{method: "GET", pattern: "/api/v1/consumer-groups/:group", scoped: true, handler: (*Broker).handleGroupDetail},
	{method: "DELETE", pattern: "/api/v1/consumer-groups/:group", scoped: true, handler: (*Broker).handleGroupDelete},
	{method: "POST", pattern: "/api/v1/consumer-groups/:group/subscription", scoped: true, handler: (*Broker).handleGroupSubscription},
	{method: "DELETE", pattern: "/api/v1/consumer-groups/:group/queues/:queue", scoped: true, handler: (*Broker).handleGroupDelete},
	{method: "POST", pattern: "/api/v1/consumer-groups/:group/queues/:queue/seek", scoped: true, handler: (*Broker).handleGroupSeek},
	{method: "POST", pattern: "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek", scoped: true, handler: (*Broker).handlePartitionSeek},
	{method: "POST", pattern: "/api/v1/stats/refresh", scoped: true, handler: (*Broker).handleStatsRefresh},

	{method: "GET", pattern: "/api/v1/system/maintenance", handler: (*Broker).handleMaintenanceGet},
	{method: "POST", pattern: "/api/v1/system/maintenance", handler: (*Broker).handleMaintenanceSet},
	{method: "GET", pattern: "/api/v1/system/maintenance/pop", handler: (*Broker).handlePopMaintenanceGet},
	{method: "POST", pattern: "/api/v1/system/maintenance/pop", handler: (*Broker).handlePopMaintenanceSet},
	{method: "GET", pattern: "/api/v1/system/shared-state", handler: (*Broker).handleSharedState},
	{method: "POST", pattern: "/internal/api/notify", scoped: true, handler: (*Broker).handleNotify},
	{method: "GET", pattern: "/internal/api/shared-state/stats", handler: (*Broker).handleSharedState},
	{method: "GET", pattern: "/internal/api/inter-instance/stats", handler: (*Broker).handleSharedState},

	{method: "POST", pattern: "/api/v1/migration/test-connection", handler: (*Broker).handleMigrationTest},
	{method: "POST", pattern: "/api/v1/migration/start", handler: (*Broker).handleMigrationStart},
	{method: "GET", pattern: "/api/v1/migration/status", handler: (*Broker).handleMigrationStatus},
	{method: "POST", pattern: "/api/v1/migration/validate", handler: (*Broker).handleMigrationValidate},
	{method: "POST", pattern: "/api/v1/migration/reset", handler: (*Broker).handleMigrationReset},

	{method: "POST", pattern: "/streams/v1/queries", scoped: true, handler: (*Broker).handleStreamRegister},
	{method: "POST", pattern: "/streams/v1/cycle", scoped: true, handler: (*Broker).handleStreamCycle},
	{method: "POST", pattern: "/streams/v1/state/get", scoped: true, handler: (*Broker).handleStreamStateGet},

	// Queen's Rust brokers only (rusttenancy.go).
	{method: "DELETE", pattern: "/api/v1/resources/tenant", scoped: true, rustOnly: true, handler: (*Broker).handleTenantDelete},
	{method: "POST", pattern: "/api/v1/resources/quota", scoped: true, rustOnly: true, handler: (*Broker).handleQuotaSet},
	{method: "POST", pattern: "/api/v1/system/quota", scoped: true, rustOnly: true, handler: (*Broker).handleQuotaSet},
	{method: "POST", pattern: "/api/v1/system/quotas", scoped: true, rustOnly: true, handler: (*Broker).handleQuotaSet},
	{method: "POST", pattern: "/api/v1/kv", scoped: true, rustOnly: true, handler: (*Broker).handleKVBatch},
	{method: "PUT", pattern: "/api/v1/kv/:ns/:key", scoped: true, rustOnly: true, handler: (*Broker).handleKVPut},
	{method: "GET", pattern: "/api/v1/kv/:ns/:key", scoped: true, rustOnly: true, handler: (*Broker).handleKVGet},
	{method: "DELETE", pattern: "/api/v1/kv/:ns/:key", scoped: true, rustOnly: true, handler: (*Broker).handleKVDelete},
	{method: "POST", pattern: "/api/v1/timers", scoped: true, rustOnly: true, handler: (*Broker).handleTimerSet},
	{method: "POST", pattern: "/api/v1/locks", scoped: true, rustOnly: true, handler: (*Broker).handleLock},
	{method: "POST", pattern: "/api/v1/ephemeral/push", scoped: true, rustOnly: true, handler: (*Broker).handleEphemeralPush},
	{method: "GET", pattern: "/api/v1/ephemeral/pop", scoped: true, rustOnly: true, handler: (*Broker).handleEphemeralPop},
	{method: "GET", pattern: "/auth/me", rustOnly: true, handler: (*Broker).handleAuthMe},
})

func buildRoutes(rs []route) []route {
	for i := range rs {
		rs[i].segs = strings.Split(strings.TrimPrefix(rs[i].pattern, "/"), "/")
	}
	return rs
}

// matchRoute finds the route for method and escaped path, with its
// parameters decoded. It returns nil when nothing matches.
func matchRoute(method, escapedPath string) (*route, map[string]string) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	for i := range routes {
		rt := &routes[i]
		if rt.method != method || len(rt.segs) != len(segs) {
			continue
		}
		params, ok := matchSegs(rt.segs, segs)
		if ok {
			return rt, params
		}
	}
	return nil, nil
}

func matchSegs(pattern, segs []string) (map[string]string, bool) {
	var params map[string]string
	for i, p := range pattern {
		if strings.HasPrefix(p, ":") {
			v, err := url.PathUnescape(segs[i])
			if err != nil || v == "" {
				return nil, false
			}
			if params == nil {
				params = make(map[string]string)
			}
			params[p[1:]] = v
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}
