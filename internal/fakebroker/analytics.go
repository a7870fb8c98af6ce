package fakebroker

import (
	"sort"
	"time"
)

// The analytics routes report worker and database internals the fake does
// not have; they answer with the recorded shapes and zero or empty values.

// queueNames returns the tenant's queue names, sorted.
func (b *Broker) queueNames(tenantID string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenantLocked(tenantID)
	names := make([]string, 0, len(t.queues))
	for n := range t.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// handleSystemMetrics serves GET /api/v1/analytics/system-metrics.
func (b *Broker) handleSystemMetrics(rc *reqCtx) {
	from, to := rc.timeRange(time.Now(), time.Hour)
	rc.ok(obj{
		"bucketMinutes": 1, "pointCount": 0, "replicaCount": 0, "replicas": emptyList(),
		"timeRange": rangeJSON(from, to),
	})
}

// handleWorkerMetrics serves GET /api/v1/analytics/worker-metrics.
func (b *Broker) handleWorkerMetrics(rc *reqCtx) {
	from, to := rc.timeRange(time.Now(), time.Hour)
	// Cell-wide under TenancyRust (cellWideLocked): every tenant's queues.
	var names []string
	b.mu.Lock()
	for _, t := range b.cellWideLocked(rc) {
		for n := range t.queues {
			names = append(names, n)
		}
	}
	b.mu.Unlock()
	sort.Strings(names)
	queues := make([]any, 0, len(names))
	for _, n := range names {
		queues = append(queues, obj{"avgLagMs": 0, "maxLagMs": 0, "popCount": 0, "queueName": n})
	}
	rc.ok(obj{
		"bucketMinutes": 1, "pointCount": 0, "queues": queues,
		"summary": obj{
			"pendingMessages": 0, "totalAckFailed": 0, "totalAckMessages": 0, "totalAckRequests": 0,
			"totalDbErrors": 0, "totalDlq": 0, "totalPopMessages": 0, "totalPopRequests": 0,
			"totalPushMessages": 0, "totalPushRequests": 0,
		},
		"timeRange": rangeJSON(from, to), "timeSeries": emptyList(), "workers": emptyList(),
	})
}

// handleQueueLag serves GET /api/v1/analytics/queue-lag: a bare array.
func (b *Broker) handleQueueLag(rc *reqCtx) {
	bucket := time.Now().UTC().Truncate(time.Minute).Format(layoutBucket)
	filter := rc.query.Get("queue")
	list := make([]any, 0)
	for _, n := range b.queueNames(rc.tenant) {
		if filter == "" || n == filter {
			list = append(list, obj{"avgLagMs": 0, "bucketTime": bucket, "maxLagMs": 0, "popCount": 0, "queueName": n})
		}
	}
	rc.ok(list)
}

// handleQueueOps serves GET /api/v1/analytics/queue-ops.
func (b *Broker) handleQueueOps(rc *reqCtx) {
	now := time.Now()
	from, to := rc.timeRange(now, time.Hour)
	bucket := now.UTC().Truncate(time.Minute).Format(layoutBucket)
	names := b.queueNames(rc.tenant)
	queues := make([]any, 0, len(names))
	series := make([]any, 0, len(names))
	for _, n := range names {
		queues = append(queues, n)
		series = append(series, obj{
			"ackFailed": 0, "ackPerSecond": 0, "ackRequests": 0, "ackSuccess": 0, "avgLagMs": 0,
			"bucket": bucket, "emptyPerSecond": 0, "maxLagMs": 0, "parkedCount": 0,
			"partitionCount": nil, "partitionsCreated": 0, "partitionsDeleted": 0, "popEmpty": 0,
			"popMessages": 0, "popPerSecond": 0, "pushMessages": 0, "pushPerSecond": 0,
			"pushRequests": 0, "queueName": n, "transactions": 0,
		})
	}
	rc.ok(obj{"bucketMinutes": 1, "queues": queues, "series": series, "timeRange": rangeJSON(from, to)})
}

// handleParkedReplicas serves GET /api/v1/analytics/queue-parked-replicas.
func (b *Broker) handleParkedReplicas(rc *reqCtx) {
	from, to := rc.timeRange(time.Now(), time.Hour)
	rc.ok(obj{"bucketMinutes": 1, "replicas": emptyList(), "series": emptyList(), "timeRange": rangeJSON(from, to)})
}

// handleRetention serves GET /api/v1/analytics/retention.
func (b *Broker) handleRetention(rc *reqCtx) {
	from, to := rc.timeRange(time.Now(), time.Hour)
	rc.ok(obj{
		"bucketMinutes": 1, "series": emptyList(), "timeRange": rangeJSON(from, to),
		"totals": obj{
			"completedRetentionMsgs": 0, "eventCount": 0, "evictionMsgs": 0, "retentionMsgs": 0,
			"totalMsgs": 0,
		},
	})
}

// handlePostgresStats serves GET /api/v1/analytics/postgres-stats. There is
// no PostgreSQL behind the fake: every list is empty.
func (b *Broker) handlePostgresStats(rc *reqCtx) {
	cache := obj{"cacheHits": 0, "diskReads": 0, "hitRatio": 100}
	rc.ok(obj{
		"activeQueries": emptyList(), "autovacuumStatus": emptyList(),
		"bufferConfig": obj{"sharedBuffers": "0", "sharedBuffersSize": "0 bytes"},
		"bufferUsage":  emptyList(),
		"cacheSummary": obj{"indexes": cache, "tables": cache},
		"database":     "fakebroker",
		"databaseCache": obj{
			"cacheHitRatio": 100, "cacheHits": 0, "database": "fakebroker", "diskReads": 0,
		},
		"deadTuples": emptyList(), "hotUpdates": emptyList(), "indexCache": emptyList(),
		"tableCache": emptyList(), "tableSizes": emptyList(), "timestamp": fmtMilli(time.Now()),
	})
}
