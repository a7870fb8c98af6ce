package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/queengate/queengate/internal/buildversion"
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
//
// Readiness detail (cell names and verdicts, member names, database
// errors) is for operators: it is shown, and the checks are run for the
// asking, only on the probe listener (the probes option) or to a loopback
// caller. Any other caller gets the last verdict alone, checked again at
// most once per readinessCacheFor, so an anonymous flood of /readyz on a
// public host neither reads the gateway's internals nor pings its
// database per request.
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
		if g.Probes || fromLoopback(r) {
			ok, detail := g.app.readiness.check(ctx, g.app.readinessChecks())
			detail["version"] = queengateVersion()
			writeHealth(w, readinessStatus(ok), detail)
			return true
		}
		ok := g.app.readiness.verdict(ctx, g.app.readinessChecks())
		writeHealth(w, readinessStatus(ok), map[string]string{"status": readinessWord(ok)})
		return true
	}
	return false
}

// queengateVersion is the module version and commit the binary carries, as
// "caddy queen version" prints it; shown with the readiness detail only, so
// anonymous callers do not learn which build to target.
var queengateVersion = sync.OnceValue(func() string { return buildversion.Read().String() })

func readinessStatus(ok bool) int {
	if ok {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}

func readinessWord(ok bool) string {
	if ok {
		return "ready"
	}
	return "not ready"
}

// fromLoopback reports whether both the connection's peer and the client
// address Caddy determined (trusted_proxies) are loopback: a request a
// local proxy relays for a remote client is not.
func fromLoopback(r *http.Request) bool {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && peer.Addr().Unmap().IsLoopback() && clientAddr(r).Unmap().IsLoopback()
}

// readinessCacheFor is how long a readiness verdict is reused for callers
// that get no detail.
const readinessCacheFor = time.Second

// readinessCache runs the readiness checks and remembers the verdict.
type readinessCache struct {
	running sync.Mutex // held while the checks run
	mu      sync.Mutex
	ok      bool
	at      time.Time // zero until the checks first ran
}

// check runs every check and returns the verdict and each check's detail.
func (c *readinessCache) check(ctx context.Context, checks []ReadinessCheck) (bool, map[string]string) {
	c.running.Lock()
	defer c.running.Unlock()
	return c.runLocked(ctx, checks)
}

func (c *readinessCache) runLocked(ctx context.Context, checks []ReadinessCheck) (bool, map[string]string) {
	ok, detail := true, map[string]string{}
	for _, check := range checks {
		name, d, passed := check(ctx)
		detail[name] = d
		ok = ok && passed
	}
	detail["status"] = readinessWord(ok)
	c.mu.Lock()
	c.ok, c.at = ok, time.Now()
	c.mu.Unlock()
	return ok, detail
}

// last is the last verdict, and whether it is recent enough to reuse
// (false until the checks first ran).
func (c *readinessCache) last() (ok, recent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, !c.at.IsZero() && time.Since(c.at) < readinessCacheFor
}

// verdict returns the last verdict while it is recent, else checks again.
// While the checks run for another caller, the previous verdict is
// returned rather than waited on; only the very first callers wait.
func (c *readinessCache) verdict(ctx context.Context, checks []ReadinessCheck) bool {
	ok, recent := c.last()
	if recent {
		return ok
	}
	c.mu.Lock()
	never := c.at.IsZero()
	c.mu.Unlock()
	if never {
		c.running.Lock()
	} else if !c.running.TryLock() {
		return ok
	}
	defer c.running.Unlock()
	if ok, recent := c.last(); recent {
		return ok // checked by the caller this one waited for
	}
	ok, _ = c.runLocked(ctx, checks)
	return ok
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
