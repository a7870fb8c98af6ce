package fakebroker

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// sharedState is the shared_state object of /health and the shared-state routes.
func (b *Broker) sharedState() obj {
	b.mu.Lock()
	maint, popMaint := b.pushMode == PushBuffered, b.popMaint
	b.mu.Unlock()
	return obj{
		"enabled": false, "maintenance_mode": maint, "pop_maintenance_mode": popMaint,
		"queue_config_cache": obj{"hit_rate": 0, "hits": 0, "misses": 0, "size": 0},
		"running":            false,
		"server_health": obj{
			"heartbeats_received": 0, "restarts_detected": 0, "servers_alive": 0,
			"servers_dead": 0, "servers_tracked": 0,
		},
		"server_id": b.opts.Name,
	}
}

// handleHealth serves GET /health.
func (b *Broker) handleHealth(rc *reqCtx) {
	rc.ok(obj{
		"database": "connected", "queen": obj{"status": "active", "worker_id": 0},
		"server": "C++ Queen Server (libqueen)", "shared_state": b.sharedState(),
		"status": "healthy", "version": "1.0.0", "worker_id": 0,
	})
}

// handleSharedState serves the shared-state and inter-instance stats routes.
func (b *Broker) handleSharedState(rc *reqCtx) { rc.ok(b.sharedState()) }

// handleMetrics serves GET /metrics (JSON).
func (b *Broker) handleMetrics(rc *reqCtx) {
	b.mu.Lock()
	reqs, msgs := b.reqTotal, b.msgTotal
	b.mu.Unlock()
	rc.ok(obj{
		"cpu":      obj{"system": 0, "user": 0},
		"database": obj{"idleConnections": 0, "poolSize": 0, "waitingRequests": 0},
		"memory":   obj{"arrayBuffers": 0, "external": 0, "heapTotal": 0, "heapUsed": 0, "rss": 0},
		"messages": obj{"rate": 0, "total": msgs},
		"requests": obj{"rate": 0, "total": reqs},
		"uptime":   int(time.Since(b.started) / time.Second),
	})
}

// handlePrometheus serves GET /metrics/prometheus.
func (b *Broker) handlePrometheus(rc *reqCtx) {
	b.mu.Lock()
	maint := 0
	if b.pushMode == PushBuffered {
		maint = 1
	}
	msgs := b.msgTotal
	b.mu.Unlock()
	var sb strings.Builder
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	gauge("queen_uptime_seconds", "Seconds since the queen process started.", int64(time.Since(b.started)/time.Second))
	gauge("queen_file_buffer_pending", "Push events currently buffered to disk awaiting database flush.", 0)
	gauge("queen_file_buffer_failed", "Push events that failed to flush from the file buffer.", 0)
	gauge("queen_file_buffer_db_healthy", "1 if the file buffer believes the database is healthy, 0 otherwise.", 1)
	gauge("queen_maintenance_mode_enabled", "1 when push maintenance mode is active (push requests are buffered to disk), 0 otherwise.", int64(maint))
	gauge("queen_parked_pops", "Pop requests parked in a long-poll (fakebroker).", int64(b.Parked()))
	gauge("queen_messages_pushed", "Messages stored since start (fakebroker).", msgs)
	rc.w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	rc.w.WriteHeader(http.StatusOK)
	_, _ = rc.w.Write([]byte(sb.String()))
}

// handleMaintenanceGet serves GET /api/v1/system/maintenance.
func (b *Broker) handleMaintenanceGet(rc *reqCtx) {
	b.mu.Lock()
	maint, popMaint := b.pushMode == PushBuffered, b.popMaint
	b.mu.Unlock()
	rc.ok(obj{
		"bufferHealthy": true,
		"bufferStats": obj{
			"dbHealthy": true, "failedCount": 0,
			"failedFiles":  obj{"count": 0, "failoverCount": 0, "qos0Count": 0, "totalBytes": 0, "totalMB": 0},
			"pendingCount": 0,
		},
		"bufferedMessages": 0, "maintenanceMode": maint, "popMaintenanceMode": popMaint,
	})
}

// handleMaintenanceSet serves POST /api/v1/system/maintenance {"enabled":bool}:
// push maintenance buffers every pushed item (HTTP 201, status "buffered").
// Not recorded; the answer shape is this fake's.
func (b *Broker) handleMaintenanceSet(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	on := asBool(m["enabled"], false)
	b.mu.Lock()
	if on {
		b.pushMode = PushBuffered
	} else if b.pushMode == PushBuffered {
		b.pushMode = PushQueued
	}
	b.mu.Unlock()
	rc.ok(obj{"maintenanceMode": on, "success": true})
}

func popMaintenanceMessage(on bool) string {
	if on {
		return "Pop maintenance mode is ON. Pops return empty."
	}
	return "Pop maintenance mode is OFF. Normal operation."
}

// handlePopMaintenanceGet serves GET /api/v1/system/maintenance/pop.
func (b *Broker) handlePopMaintenanceGet(rc *reqCtx) {
	b.mu.Lock()
	on := b.popMaint
	b.mu.Unlock()
	rc.ok(obj{"message": popMaintenanceMessage(on), "popMaintenanceMode": on})
}

// handlePopMaintenanceSet serves POST /api/v1/system/maintenance/pop
// {"enabled":bool}: in pop maintenance every pop answers 204. Not recorded.
func (b *Broker) handlePopMaintenanceSet(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	on := asBool(m["enabled"], false)
	b.mu.Lock()
	b.popMaint = on
	b.mu.Unlock()
	rc.ok(obj{"message": popMaintenanceMessage(on), "popMaintenanceMode": on})
}

// handleNotify serves POST /internal/api/notify: it wakes the pops parked
// on a queue.
func (b *Broker) handleNotify(rc *reqCtx) {
	m := rc.lenientObject()
	if q, ok := asString(m["queue"]); ok {
		b.mu.Lock()
		b.wakeLocked(rc.tenant, q)
		b.mu.Unlock()
	}
	rc.ok(obj{"status": "ok"})
}

// handleStatsRefresh serves POST /api/v1/stats/refresh. The fake's
// statistics are always live; this only reports counts.
func (b *Broker) handleStatsRefresh(rc *reqCtx) {
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	parts := 0
	namespaces, tasks := map[string]bool{}, map[string]bool{}
	for _, q := range t.queues {
		parts += len(q.partList)
		namespaces[q.namespace] = true
		tasks[q.task] = true
	}
	delete(namespaces, "")
	delete(tasks, "")
	queues := len(t.queues)
	b.mu.Unlock()
	rc.ok(obj{
		"cleanup":   obj{"orphanedDeleted": 0},
		"namespace": obj{"namespacesUpdated": len(namespaces)},
		"partition": obj{
			"dirtyPartitionsScanned": 0, "newPartitions": parts, "partitionsSkippedByWatermark": 0,
			"partitionsUpdated": 0,
		},
		"queue":  obj{"queuesUpdated": queues},
		"system": obj{"systemUpdated": 1},
		"task":   obj{"tasksUpdated": len(tasks)},
	})
}
