package fakebroker

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/queengate/queengate/internal/uuidtext"
)

// TenancyRust is the Options.Tenancy value that makes the fake follow the
// tenancy contract of Queen's Rust brokers (the PostgreSQL "1.x" line and
// its raft-storage successor) started with QUEEN_TENANCY_HEADER=true and
// QUEEN_KV_TRUSTED_PROXY=1. Each behaviour names, next to its code, the file
// of the queen-mq/queen repository it is modelled on. What the fake does in
// this mode, and in no other:
//
//   - x-queen-tenant is trimmed and lower-cased; a value that is not an
//     8-4-4-4-12 hex UUID (or not ASCII) is answered 400; an absent or empty
//     header is DefaultTenant. No request is ever refused for lacking the
//     header: that is what makes a lost header dangerous on a real cell.
//   - errors carry real statuses: an unknown route is a JSON 404, an error
//     object that would be HTTP 200 on 0.15.1 is 404 when it says "not found"
//     and 500 otherwise; a name over 447 bytes is 413 name_too_long;
//     SetRustCellCondition gives the raft-storage cell's 503 (Retry-After)
//     and 507.
//   - a push that stores answers 201; a pop that delivers nothing answers 204
//     with no body; a consumer group without subscriptionMode starts at the
//     tail ("new").
//   - DELETE /api/v1/resources/tenant and POST /api/v1/resources/quota (also
//     /api/v1/system/quota and /system/quotas) exist and act on the tenant
//     the CALLER names, which is why the gateway must never forward them.
//   - KV, timers, locks and ephemeral queues exist, scoped per tenant, and
//     answer 403 feature_gated until the tenant holds a grant (SetGrant or
//     the quota route).
//   - retainedBytes is the value a slow lane last stored, refreshed every
//     Options.RetainedBytesInterval (ten minutes by default), so a fresh
//     queue reads 0 until the lane runs (RunRetainedBytesLane).
//   - POST /api/v1/transaction takes the raft-storage brokers' "positions"
//     rider beside its operations (rustpositions.go): cursor writes that
//     store no message, refused whole (400) when malformed or naming a
//     queue the tenant lacks.
//   - GET /api/v1/status and /api/v1/analytics/worker-metrics answer for
//     the whole cell, every tenant's queues, whoever asks (status.go,
//     cellWideLocked): the gateway must keep them from tenants.
//   - GET /auth/me answers the broker's own operator identity, as a broker
//     with authentication off does.
//
// RequireTenant and Token have no counterpart on these brokers and New
// refuses them in this mode (panics), so no test can claim to model a real
// cell with them.
const TenancyRust = "rust"

// rustDefaultRetainedBytesInterval is the 1.x slow lane's default period
// (RETAINED_BYTES_INTERVAL_MS; server/src/handlers/queues.rs reads the stats
// the lane writes).
const rustDefaultRetainedBytesInterval = 10 * time.Minute

// rustNameBudget is the longest queue name the raft-storage broker accepts
// (NAME_BUDGET_BYTES in server/src/handlers/raft.rs).
const rustNameBudget = 447

// Grant kinds, as POST /api/v1/resources/quota names them (raft-era
// api_quota_set; 1.x keeps the same grants as queen.kv_quota rows).
const (
	GrantKV        = "kv"
	GrantEphemeral = "ephemeral"
	GrantStreams   = "streams"
)

// rust reports whether the broker follows TenancyRust.
func (b *Broker) rust() bool { return b.opts.Tenancy == TenancyRust }

// badTenantBody is the body of the 400 for a malformed tenant header
// (server/src/tenant.rs, bad_tenant).
const badTenantBody = "invalid x-queen-tenant header (must be a UUID)"

// resolveRustTenant resolves the tenant of a request as
// server/src/tenant.rs tenant_middleware does: the first header value,
// trimmed; absent or empty is DefaultTenant; otherwise it must be a UUID
// and is lower-cased. ok=false means 400.
func resolveRustTenant(h http.Header) (tenant string, ok bool) {
	vals := h.Values(TenantHeader)
	if len(vals) == 0 {
		return DefaultTenant, true
	}
	v := vals[0]
	for i := 0; i < len(v); i++ {
		if v[i] >= 0x80 {
			return "", false
		}
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return DefaultTenant, true
	}
	if !uuidtext.Valid(v) {
		return "", false
	}
	return strings.ToLower(v), true
}

// writeRustNoRoute is the raft-era JSON 404 for a path no route serves
// (server/src/handlers/raft.rs; 1.x main.rs answers a JSON 404 too).
func writeRustNoRoute(w http.ResponseWriter, path string) {
	writeJSON(w, http.StatusNotFound, obj{"code": "no_such_route", "error": "not found", "path": path})
}

// rustStatus is the status a Rust broker gives an answer the 0.15.1 model
// sends as HTTP 200: an object whose "error" is a message becomes 404 when
// the message says "not found" and 500 otherwise, the mapping of
// sp_result_to_response in server/src/handlers/mod.rs. Arrays (per-item
// results) and objects without an error stay 200.
func rustStatus(v any) int {
	o, isObj := v.(obj)
	if !isObj {
		return http.StatusOK
	}
	msg, _ := o["error"].(string)
	if msg == "" {
		return http.StatusOK
	}
	if strings.Contains(strings.ToLower(msg), "not found") {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// rustNameTooLong answers 413 name_too_long when name exceeds the
// raft-storage name budget (server/src/handlers/raft.rs err_response's
// envelope, {"error","code"}), and reports whether it did.
func rustNameTooLong(rc *reqCtx, name string) bool {
	if !rc.rust || len(name) <= rustNameBudget {
		return false
	}
	writeJSON(rc.w, http.StatusRequestEntityTooLarge, obj{"code": "name_too_long", "error": "name exceeds 447 bytes"})
	return true
}

// Cell conditions a raft-storage broker answers every tenant route with
// (server/src/handlers/raft.rs err_response: {"error","code"}); the codes'
// exact spelling is modelled, not confirmed from the source.
const (
	// RustNoLeader: 503 with Retry-After: 1 (retry, no leader, timeout).
	RustNoLeader = http.StatusServiceUnavailable
	// RustDiskFull: 507, the disk gate closed (QUEEN_RAFT_DISK_HIGH_PCT).
	RustDiskFull = http.StatusInsufficientStorage
)

// SetRustCellCondition makes every tenant-scoped route answer status
// (RustNoLeader or RustDiskFull) until called with 0, as a raft-storage
// cell without a leader or with a full disk does. Nothing is stored.
func (b *Broker) SetRustCellCondition(status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rustCondition = status
}

// answerRustCondition answers the cell condition set with
// SetRustCellCondition and reports whether there was one.
func (b *Broker) answerRustCondition(w http.ResponseWriter) bool {
	b.mu.Lock()
	status := b.rustCondition
	b.mu.Unlock()
	switch status {
	case RustNoLeader:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, status, obj{"code": "no_leader", "error": "no raft leader; retry"})
	case RustDiskFull:
		writeJSON(w, status, obj{"code": "disk_full", "error": "the cell's disk is above its high-water mark"})
	default:
		return false
	}
	return true
}

// SetGrant gives (true) or withdraws (false) tenant's grant of kind
// (GrantKV, GrantEphemeral, GrantStreams), as an operator does with a
// queen.kv_quota row on 1.x or POST /api/v1/resources/quota on the
// raft-storage line. The broker itself never checks who asked.
func (b *Broker) SetGrant(tenantID, kind string, granted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenantLocked(tenantID)
	if granted {
		t.grants[kind] = true
	} else {
		delete(t.grants, kind)
	}
}

// Granted reports whether tenant holds a grant of kind.
func (b *Broker) Granted(tenantID, kind string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tenantLocked(tenantID).grants[kind]
}

// TenantQueues is how many queues the broker holds for tenant; a purge
// through DELETE /api/v1/resources/tenant empties it.
func (b *Broker) TenantQueues(tenantID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.tenantLocked(tenantID).queues)
}

// RunRetainedBytesLane runs the slow lane that stores every queue's
// retained bytes now, as the 1.x broker does every
// RETAINED_BYTES_INTERVAL_MS (server/src/handlers/queues.rs reads what it
// stored). Only TenancyRust reads the stored value.
func (b *Broker) RunRetainedBytesLane() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runRetainedLaneLocked(time.Now())
}

func (b *Broker) runRetainedLaneLocked(now time.Time) {
	for _, t := range b.tenants {
		for _, q := range t.queues {
			q.sweepRetention(now)
			q.storedRetained = q.retainedBytes()
		}
	}
	b.retainedLaneAt = now
}

// retainedBytesLocked is what the queue listing reports as q's
// retainedBytes: live in the 0.15.1 model, the lane's last value under
// TenancyRust (running the lane first when its period has passed).
func (b *Broker) retainedBytesLocked(q *queue, now time.Time) int64 {
	if !b.rust() {
		return q.retainedBytes()
	}
	every := b.opts.RetainedBytesInterval
	if every <= 0 {
		every = rustDefaultRetainedBytesInterval
	}
	if now.Sub(b.retainedLaneAt) >= every {
		b.runRetainedLaneLocked(now)
	}
	return q.storedRetained
}

// handleTenantDelete serves DELETE /api/v1/resources/tenant
// (raft-era api_delete_tenant): the tenant purged is the one the CALLER
// names, ?tenant= first, then the body's "tenant", then the request's own.
// Only the default tenant is refused.
func (b *Broker) handleTenantDelete(rc *reqCtx) {
	target := rc.query.Get("tenant")
	if target == "" {
		var body struct {
			Tenant string `json:"tenant"`
		}
		_ = json.Unmarshal(rc.body, &body)
		target = body.Tenant
	}
	if target == "" {
		target = rc.tenant
	}
	target = strings.ToLower(strings.TrimSpace(target))
	if !uuidtext.Valid(target) || target == DefaultTenant {
		writeJSON(rc.w, http.StatusBadRequest, obj{"code": "rejected", "error": "cannot delete this tenant"})
		return
	}
	b.mu.Lock()
	t := b.tenantLocked(target)
	n := len(t.queues)
	for _, q := range t.sortedQueues() {
		t.deleteQueueLocked(q)
	}
	b.mu.Unlock()
	rc.ok(obj{"deleted": true, "queues": n, "tenant": target})
}

// handleQuotaSet serves POST /api/v1/resources/quota, /api/v1/system/quota
// and /api/v1/system/quotas (raft-era api_quota_set): it grants the tenant
// the body names ("tenant" or "tenantId", else the caller's) the feature of
// "kind". "enabled":false withdraws it (modelled: the withdrawal's spelling
// is not confirmed from the source).
func (b *Broker) handleQuotaSet(rc *reqCtx) {
	m, ok := rc.object()
	if !ok {
		return
	}
	target := asStringOr(m["tenant"], "")
	if target == "" {
		target = asStringOr(m["tenantId"], "")
	}
	if target == "" {
		target = rc.tenant
	}
	target = strings.ToLower(strings.TrimSpace(target))
	kind := asStringOr(m["kind"], "")
	switch kind {
	case GrantKV, GrantEphemeral, GrantStreams:
	default:
		writeJSON(rc.w, http.StatusBadRequest, obj{"code": "bad_request", "error": "kind must be kv, ephemeral or streams"})
		return
	}
	if !uuidtext.Valid(target) {
		writeJSON(rc.w, http.StatusBadRequest, obj{"code": "bad_request", "error": "tenant must be a UUID"})
		return
	}
	enabled := asBool(m["enabled"], true)
	b.SetGrant(target, kind, enabled)
	rc.ok(obj{"enabled": enabled, "kind": kind, "ok": true, "tenant": target})
}

// gateFeature answers 403 feature_gated when the request's tenant has no
// grant of kind, and reports whether it did. With tenancy on the absence of
// a grant is a denial (server/src/quota.rs, Verdict::NotGranted; the body
// is the KV envelope of server/src/handlers/kv.rs: the code in "error" and
// "reason").
func (b *Broker) gateFeature(rc *reqCtx, kind string) bool {
	if b.Granted(rc.tenant, kind) {
		return false
	}
	writeJSON(rc.w, http.StatusForbidden, obj{"error": "feature_gated", "reason": "feature_gated"})
	return true
}

// kvKey is a KV entry's key within its tenant.
func kvKey(ns, key string) string { return ns + "\x00" + key }

// handleKVPut serves PUT /api/v1/kv/:ns/:key (server/src/handlers/kv.rs):
// the body is the value.
func (b *Broker) handleKVPut(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	var v json.RawMessage
	if err := json.Unmarshal(rc.body, &v); err != nil {
		writeJSON(rc.w, http.StatusBadRequest, obj{"error": "kv_bad_request", "reason": "kv_bad_value"})
		return
	}
	b.mu.Lock()
	b.tenantLocked(rc.tenant).kv[kvKey(rc.params["ns"], rc.params["key"])] = v
	b.mu.Unlock()
	rc.ok(obj{"applied": true})
}

// handleKVGet serves GET /api/v1/kv/:ns/:key: an absent key is 200 with
// found:false (server/src/handlers/kv.rs: the status describes the call).
func (b *Broker) handleKVGet(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	b.mu.Lock()
	v, found := b.tenantLocked(rc.tenant).kv[kvKey(rc.params["ns"], rc.params["key"])]
	b.mu.Unlock()
	if !found {
		rc.ok(obj{"found": false})
		return
	}
	rc.ok(obj{"found": true, "value": v})
}

// handleKVDelete serves DELETE /api/v1/kv/:ns/:key.
func (b *Broker) handleKVDelete(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	k := kvKey(rc.params["ns"], rc.params["key"])
	_, existed := t.kv[k]
	delete(t.kv, k)
	b.mu.Unlock()
	rc.ok(obj{"applied": existed})
}

// handleKVBatch serves POST /api/v1/kv, the KV batch a Kafka-shaped
// client commits its offsets with (server/src/handlers/kv.rs): a JSON
// array of operations {ns, op, key, value}; put stores, get reads, delete
// removes, anything else is answered as not applied. Behind the KV grant
// like every KV route.
func (b *Broker) handleKVBatch(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	var ops []struct {
		NS    string          `json:"ns"`
		Op    string          `json:"op"`
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(rc.body, &ops); err != nil {
		writeJSON(rc.w, http.StatusBadRequest, obj{"error": "kv_bad_request", "reason": "kv_bad_body"})
		return
	}
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	results := make([]any, 0, len(ops))
	for _, o := range ops {
		k := kvKey(o.NS, o.Key)
		switch o.Op {
		case "put":
			t.kv[k] = o.Value
			results = append(results, obj{"applied": true})
		case "get":
			v, found := t.kv[k]
			results = append(results, obj{"found": found, "value": v})
		case "delete":
			_, existed := t.kv[k]
			delete(t.kv, k)
			results = append(results, obj{"applied": existed})
		default:
			results = append(results, obj{"applied": false})
		}
	}
	b.mu.Unlock()
	rc.ok(obj{"results": results})
}

// handleTimerSet serves POST /api/v1/timers: timers are KV rows and spend
// the KV grant (server/src/handlers/timers.rs, server/src/quota.rs
// Resource::Timers). Only the count is kept.
func (b *Broker) handleTimerSet(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	b.mu.Lock()
	b.tenantLocked(rc.tenant).timers++
	b.mu.Unlock()
	rc.ok(obj{"applied": true})
}

// handleLock serves POST /api/v1/locks: locks are built on KV and need
// the KV grant (server/src/handlers/locks.rs). The body's "name" is held
// by its "owner" until released with "release":true.
func (b *Broker) handleLock(rc *reqCtx) {
	if b.gateFeature(rc, GrantKV) {
		return
	}
	m, ok := rc.object()
	if !ok {
		return
	}
	name, owner := asStringOr(m["name"], ""), asStringOr(m["owner"], "")
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenantLocked(rc.tenant)
	k := kvKey("\x00locks", name)
	held, exists := t.kv[k]
	cur := ""
	_ = json.Unmarshal(held, &cur)
	if asBool(m["release"], false) {
		if exists && cur == owner {
			delete(t.kv, k)
		}
		rc.ok(obj{"acquired": false, "released": exists && cur == owner})
		return
	}
	if exists && cur != owner {
		rc.ok(obj{"acquired": false, "holder": cur})
		return
	}
	raw, _ := json.Marshal(owner)
	t.kv[k] = raw
	rc.ok(obj{"acquired": true})
}

// handleEphemeralPush serves POST /api/v1/ephemeral/push: messages held in
// memory per tenant, behind the ephemeral grant
// (server/src/handlers/ephemeral.rs).
func (b *Broker) handleEphemeralPush(rc *reqCtx) {
	if b.gateFeature(rc, GrantEphemeral) {
		return
	}
	m, ok := rc.object()
	if !ok {
		return
	}
	q := asStringOr(m["queue"], "")
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	t.ephemeral[q] = append(t.ephemeral[q], m["payload"])
	b.mu.Unlock()
	rc.ok(obj{"queued": true})
}

// handleEphemeralPop serves GET /api/v1/ephemeral/pop?queue=: the oldest
// message, or 204 when there is none.
func (b *Broker) handleEphemeralPop(rc *reqCtx) {
	if b.gateFeature(rc, GrantEphemeral) {
		return
	}
	q := rc.query.Get("queue")
	b.mu.Lock()
	t := b.tenantLocked(rc.tenant)
	msgs := t.ephemeral[q]
	if len(msgs) == 0 {
		b.mu.Unlock()
		rc.w.WriteHeader(http.StatusNoContent)
		return
	}
	t.ephemeral[q] = msgs[1:]
	b.mu.Unlock()
	rc.ok(obj{"payload": msgs[0]})
}

// handleAuthMe serves GET /auth/me as a Rust broker with authentication
// off does: a standalone operator identity naming the broker's own server
// id as the cell (server/src/config.rs resolve_server_id; the handler in
// server/src/auth.rs). The gateway must never forward it.
func (b *Broker) handleAuthMe(rc *reqCtx) {
	rc.ok(obj{"authenticated": true, "cell_slug": b.opts.Name, "role": "operator", "standalone": true})
}
