package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// The health endpoints answer on every host, before cluster resolution, so
// probes can use the pod address.
const (
	livenessPath  = "/healthz"
	readinessPath = "/readyz"
)

// ReadinessCheck reports one dependency's state for the readiness endpoint:
// detail is shown as is; ok=false makes the gateway not ready.
type ReadinessCheck func(ctx context.Context) (name, detail string, ok bool)

// serveHealth answers the liveness and readiness probes and reports whether
// it did. Liveness never touches the database: a gateway that can answer
// is alive, and restarting it would not bring a database back. Readiness
// asks the database, the invalidation listener and the storage quota, and
// fails only when the gateway could no longer serve: a database that has
// been unreachable for longer than the stale grace.
func (g *Gateway) serveHealth(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch r.URL.Path {
	case livenessPath:
		writeHealth(w, http.StatusOK, map[string]string{"status": "ok"})
		return true
	case readinessPath:
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, body := http.StatusOK, map[string]string{"status": "ready"}
		for _, check := range g.app.readinessChecks() {
			name, detail, ok := check(ctx)
			body[name] = detail
			if !ok {
				status, body["status"] = http.StatusServiceUnavailable, "not ready"
			}
		}
		writeHealth(w, status, body)
		return true
	}
	return false
}

func writeHealth(w http.ResponseWriter, status int, body map[string]string) {
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readinessChecks are the database, the invalidation listener, and any
// check later parts of the app add (the storage quota's state).
func (a *App) readinessChecks() []ReadinessCheck {
	checks := []ReadinessCheck{a.backend.databaseReady, a.backend.listenerReady}
	return append(checks, a.extraReadiness...)
}

// databaseReady pings the database. While it does not answer the gateway
// still serves the clusters and keys it knows, for the stale grace; only
// past that is it not ready, because every gateway of the cell would then
// be taken out of service at once for an outage they can ride out.
func (b *backend) databaseReady(ctx context.Context) (string, string, bool) {
	if b.pool == nil {
		return "database", "not configured", false
	}
	now := time.Now()
	if err := b.pool.Ping(ctx); err != nil {
		last := b.lastDatabaseOK.Load()
		if last == 0 {
			return "database", "not reached since start: " + err.Error(), false
		}
		down := now.Sub(time.Unix(0, last))
		if down > b.staleGrace {
			return "database", "unreachable for " + down.Round(time.Second).String() + ", past the stale grace: " + err.Error(), false
		}
		return "database", "unreachable; serving known clusters from cache within the stale grace: " + err.Error(), true
	}
	b.lastDatabaseOK.Store(now.UnixNano())
	return "database", "ok", true
}

// listenerReady does not fail readiness: without LISTEN the gateway still
// serves correctly, only changes take up to the cache TTL to bite.
func (b *backend) listenerReady(context.Context) (string, string, bool) {
	if b.listener != nil && b.listener.Connected() {
		return "invalidation", "listening", true
	}
	return "invalidation", "reconnecting; changes are seen within the cache TTL", true
}
