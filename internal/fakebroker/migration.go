package fakebroker

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"time"
)

// migrationState is the broker-wide database migration state. The fake
// never migrates: every attempt fails, as it did against the unreachable
// targets in the recording.
type migrationState struct {
	status  string // idle, running, error
	step    string
	errText string
	started time.Time
}

// migrationTarget reads host, port, database and user from a migration body.
func migrationTarget(m map[string]json.RawMessage) (addr, host, port string, ok bool) {
	host = asStringOr(m["host"], "")
	db := asStringOr(m["database"], "")
	user := asStringOr(m["user"], "")
	port = asStringOr(m["port"], "")
	if port == "" {
		port = strconv.Itoa(asInt(m["port"], 5432))
	}
	if host == "" || db == "" || user == "" {
		return "", "", "", false
	}
	return net.JoinHostPort(host, port), host, port, true
}

// connectError describes why the fake cannot use a migration target, in
// libpq's words where the target does not accept connections.
func connectError(addr, host, port string) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "connection to server at \"" + host + "\", port " + port +
			" failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n"
	}
	_ = conn.Close()
	return "fakebroker: database migration is not supported by the fake broker"
}

// handleMigrationStatus serves GET /api/v1/migration/status.
func (b *Broker) handleMigrationStatus(rc *reqCtx) {
	b.mu.Lock()
	s := b.migration
	b.mu.Unlock()
	resp := obj{"currentStep": s.step, "elapsedSeconds": 0, "status": s.status}
	if !s.started.IsZero() {
		resp["elapsedSeconds"] = int(time.Since(s.started) / time.Second)
	}
	if s.errText != "" {
		resp["error"] = s.errText
	}
	rc.ok(resp)
}

// handleMigrationTest serves POST /api/v1/migration/test-connection.
func (b *Broker) handleMigrationTest(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	addr, host, port, ok := migrationTarget(m)
	if !ok {
		badRequest(rc.w, "host, database, and user are required")
		return
	}
	rc.ok(obj{"error": connectError(addr, host, port), "message": "Connection failed", "success": false})
}

// handleMigrationValidate serves POST /api/v1/migration/validate.
func (b *Broker) handleMigrationValidate(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	addr, host, port, ok := migrationTarget(m)
	if !ok {
		badRequest(rc.w, "target host, database, and user are required")
		return
	}
	writeJSON(rc.w, http.StatusInternalServerError, obj{
		"error": "Failed to connect to target: " + connectError(addr, host, port), "success": false,
	})
}

// handleMigrationStart serves POST /api/v1/migration/start: 202, then the
// migration fails in the background.
func (b *Broker) handleMigrationStart(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	addr, host, port, ok := migrationTarget(m)
	if !ok {
		badRequest(rc.w, "target host, database, and user are required")
		return
	}
	b.mu.Lock()
	b.migration = migrationState{status: "running", step: "Preparing target database (creating schema)...", started: time.Now()}
	b.mu.Unlock()
	go func() {
		text := "Cannot connect to target: " + connectError(addr, host, port)
		b.mu.Lock()
		if b.migration.status == "running" {
			b.migration.status = "error"
			b.migration.errText = text
		}
		b.mu.Unlock()
	}()
	writeJSON(rc.w, http.StatusAccepted, obj{
		"message": "Migration started. Poll /api/v1/migration/status for progress.", "status": "started",
	})
}

// handleMigrationReset serves POST /api/v1/migration/reset.
func (b *Broker) handleMigrationReset(rc *reqCtx) {
	b.mu.Lock()
	b.migration = migrationState{status: "idle"}
	b.mu.Unlock()
	rc.ok(obj{"message": "Migration state reset", "status": "idle"})
}
