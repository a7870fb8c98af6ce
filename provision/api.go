// Package provision is the provisioning API: the HTTP surface through
// which a machine (a signup service, a billing job, a support tool) holding
// a machine token provisions tenants, clusters, API keys and roles and
// reads plans, usage and activity. It calls the same control-plane
// functions, with the same argument checks, as the CLI and the console.
//
// Every create is an ensure by a natural key (a slug, an e-mail, a key
// hash): the same request twice gives the same object; one that differs
// gets 409 naming what differs. What has no natural key takes an
// Idempotency-Key header, whose first answer is stored and replayed. Each
// call runs in one transaction, audited with the calling token's id.
//
// The package does not import Caddy; caddymodule mounts it.
package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/harden"
)

// Prefix is where the API's routes live, so it can share a host (the
// operators' host, say) with the gateway's other surfaces.
const Prefix = "/provision/v1"

// HeaderRequestID is the response header carrying the request id that
// error envelopes repeat.
const HeaderRequestID = "X-Queen-Request-Id"

// MaxBodyBytes caps a request body; every body of this API is small.
const MaxBodyBytes = 64 << 10

// Options configure the API.
type Options struct {
	Pool *pgxpool.Pool
	Log  *zap.Logger
	// OnClusterChanged drops what this process caches about a cluster
	// after a change it made (other gateways hear of it by NOTIFY).
	OnClusterChanged func(clusterID string)
	// TokenTTL bounds how long an authenticated token is cached when no
	// invalidation arrives. Default 30s.
	TokenTTL time.Duration
	// CallTimeout bounds one call's database work. Default 10s.
	CallTimeout time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// ClientIP is the caller's address, by which failed authentications
	// are counted; the connection's peer when nil.
	ClientIP func(*http.Request) netip.Addr
}

// API is the provisioning API handler.
type API struct {
	o      Options
	routes []route
	tokens tokenCache
	limits sync.Map // token id -> *rate.Limiter
	// failures backs off an address that presents unknown tokens, before
	// each costs a database lookup.
	failures *harden.FailureGuard
}

// New returns the API.
func New(o Options) (*API, error) {
	if o.Pool == nil {
		return nil, errors.New("provision: a database pool is required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = 30 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ClientIP == nil {
		o.ClientIP = func(r *http.Request) netip.Addr {
			ap, _ := netip.ParseAddrPort(r.RemoteAddr)
			return ap.Addr()
		}
	}
	a := &API{o: o, failures: harden.NewFailureGuard(harden.FailureGuardConfig{Now: o.Now})}
	a.tokens.entries = map[string]tokenEntry{}
	a.routes = a.routeTable()
	return a, nil
}

// Owns reports whether the path is the API's.
func Owns(path string) bool { return path == Prefix || strings.HasPrefix(path, Prefix+"/") }

// InvalidateTokens drops every cached token: called when the control
// plane announces a change of callers' standing (a token revoked or
// rotated), and whenever the invalidation listener reconnects.
func (a *API) InvalidateTokens() {
	a.tokens.mu.Lock()
	clear(a.tokens.entries)
	a.tokens.gen++
	a.tokens.mu.Unlock()
}

// tokenCache holds authenticated tokens by the SHA-256 of their secret.
type tokenCache struct {
	mu      sync.Mutex
	gen     uint64
	entries map[string]tokenEntry
}

type tokenEntry struct {
	caller controlplane.TokenCaller
	at     time.Time
}

// call is one request being answered.
type call struct {
	a      *API
	r      *http.Request
	w      http.ResponseWriter
	ctx    context.Context
	token  controlplane.TokenCaller
	params map[string]string
	body   []byte
	tx     pgx.Tx
	// Filled in by the handler for the audit row.
	tenantID, clusterID, target string
	changed                     []string // clusters whose cached state to drop
}

// answer is what a handler returns: status and a JSON value.
type answer struct {
	status int
	body   any
}

func ok(v any) answer      { return answer{http.StatusOK, v} }
func created(v any) answer { return answer{http.StatusCreated, v} }

// ServeHTTP answers one call.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	rt, params, e := a.match(r)
	if e != nil {
		a.writeError(w, e)
		return
	}
	if rt.public {
		rt.raw(w, r)
		return
	}
	caller, e := a.authenticate(r)
	if e != nil {
		a.writeError(w, e)
		return
	}
	if e := a.rateLimit(caller); e != nil {
		a.writeError(w, e)
		return
	}
	if !caller.Has(rt.scope) {
		e := &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden,
			Message: "this token lacks the " + rt.scope + " scope"}
		a.audit(r, caller, rt, nil, e.Status)
		a.writeError(w, e)
		return
	}
	body, e := readBody(w, r, rt.method)
	if e != nil {
		a.audit(r, caller, rt, nil, e.Status)
		a.writeError(w, e)
		return
	}
	a.run(w, r, rt, caller, params, body)
}

// run answers an authenticated call in one transaction, replaying a
// stored answer for a repeated Idempotency-Key.
func (a *API) run(w http.ResponseWriter, r *http.Request, rt *route, caller controlplane.TokenCaller, params map[string]string, body []byte) {
	idem := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if rt.idempotency == idemRequired && idem == "" && !rt.hasNaturalKey(body) {
		e := invalidField("Idempotency-Key", "this operation has no natural key: send an Idempotency-Key header")
		a.audit(r, caller, rt, nil, e.Status)
		a.writeError(w, e)
		return
	}
	if len(idem) > 200 {
		e := invalidField("Idempotency-Key", "at most 200 characters")
		a.audit(r, caller, rt, nil, e.Status)
		a.writeError(w, e)
		return
	}
	if rt.idempotency == idemNone {
		idem = ""
	}
	if rt.ownTx {
		a.runOwn(w, r, rt, caller, params, body)
		return
	}
	for attempt := 0; ; attempt++ {
		c := &call{a: a, r: r, w: w, token: caller, params: params, body: body}
		res, replayed, err := a.inTx(r.Context(), c, rt, idem)
		// Two ensures of one new object race to create it: the loser's
		// unique violation means the object now exists, and a second
		// run answers from it.
		if err != nil && attempt == 0 && controlplane.KindOf(err) == controlplane.Taken && rt.method != http.MethodGet {
			continue
		}
		if err != nil {
			e := a.toAPIError(err)
			a.audit(r, caller, rt, c, e.Status)
			a.writeError(w, e)
			return
		}
		for _, id := range c.changed {
			if a.o.OnClusterChanged != nil {
				a.o.OnClusterChanged(id)
			}
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		writeRaw(w, res.status, res.raw)
		return
	}
}

// OwnTxTimeout bounds an operation that waits for the gateways to drain a
// cluster (a move, a tenant's final deletion).
const OwnTxTimeout = 2 * time.Minute

// runOwn answers a call whose control-plane function runs its own steps,
// committing a drain before it waits for every gateway to acknowledge it,
// which one transaction cannot do. It is audited after it ends.
func (a *API) runOwn(w http.ResponseWriter, r *http.Request, rt *route, caller controlplane.TokenCaller, params map[string]string, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), OwnTxTimeout)
	defer cancel()
	c := &call{a: a, r: r, w: w, ctx: controlplane.WithDrainWait(ctx, OwnTxTimeout-10*time.Second), token: caller, params: params, body: body}
	ans, err := rt.handle(c)
	var raw []byte
	if err == nil {
		raw, err = marshal(ans.body)
	}
	if err != nil {
		e := a.toAPIError(err)
		a.audit(r, caller, rt, c, e.Status)
		a.writeError(w, e)
		return
	}
	a.audit(r, caller, rt, c, ans.status)
	for _, id := range c.changed {
		if a.o.OnClusterChanged != nil {
			a.o.OnClusterChanged(id)
		}
	}
	writeRaw(w, ans.status, raw)
}

type storedAnswer struct {
	status int
	raw    []byte
}

// inTx runs the handler and its audit row in one transaction.
func (a *API) inTx(parent context.Context, c *call, rt *route, idem string) (storedAnswer, bool, error) {
	ctx, cancel := context.WithTimeout(parent, a.o.CallTimeout)
	defer cancel()
	c.ctx = ctx
	var res storedAnswer
	replayed := false
	err := pgx.BeginFunc(ctx, a.o.Pool, func(tx pgx.Tx) error {
		c.tx = tx
		reqHash := requestHash(c.r, c.body)
		if idem != "" {
			stored, found, err := claimReplay(ctx, tx, idem, c.token.ID, reqHash)
			if err != nil {
				return err
			}
			if found {
				res, replayed = stored, true
				c.target = "replay of " + idem
				return a.auditTx(c, rt, stored.status)
			}
		}
		ans, err := rt.handle(c)
		if err != nil {
			return err
		}
		raw, err := marshal(ans.body)
		if err != nil {
			return err
		}
		res = storedAnswer{status: ans.status, raw: raw}
		if idem != "" {
			if _, err := tx.Exec(ctx, `UPDATE queen_proxy.provision_replays SET status = $2, body = $3 WHERE idempotency_key = $1`,
				idem, ans.status, string(raw)); err != nil {
				return err
			}
		}
		return a.auditTx(c, rt, ans.status)
	})
	return res, replayed, err
}

// ReplayRetention is how long the answer to a request with an
// Idempotency-Key is kept for its retries.
const ReplayRetention = 7 * 24 * time.Hour

// claimReplay takes the Idempotency-Key for this call, or finds the answer
// stored under it. A concurrent call with the same key waits on the row
// until the first commits (or rolls back, freeing the key).
func claimReplay(ctx context.Context, tx pgx.Tx, key, tokenID, reqHash string) (storedAnswer, bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO queen_proxy.provision_replays (idempotency_key, token_id, request_hash, status, body)
		VALUES ($1, $2::uuid, $3, 0, '') ON CONFLICT (idempotency_key) DO NOTHING`, key, tokenID, reqHash)
	if err != nil {
		return storedAnswer{}, false, err
	}
	if tag.RowsAffected() == 1 {
		// Answers are kept for ReplayRetention; the table holds no more.
		_, err := tx.Exec(ctx, `DELETE FROM queen_proxy.provision_replays WHERE created_at < now() - make_interval(secs => $1)`,
			ReplayRetention.Seconds())
		return storedAnswer{}, false, err
	}
	var s storedAnswer
	var hash, body string
	if err := tx.QueryRow(ctx, `SELECT request_hash, status, body FROM queen_proxy.provision_replays WHERE idempotency_key = $1`,
		key).Scan(&hash, &s.status, &body); err != nil {
		return storedAnswer{}, false, err
	}
	if hash != reqHash {
		return storedAnswer{}, false, conflictf("Idempotency-Key %q was used for a different request", key)
	}
	s.raw = []byte(body)
	return s, true, nil
}

// requestHash identifies a request for the replay store: its method, path,
// query and body.
func requestHash(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery + "\n"))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// authenticate reads "Authorization: Bearer qmt_…".
func (a *API) authenticate(r *http.Request) (controlplane.TokenCaller, *apierror.Error) {
	unauth := &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized,
		Message: "a live machine token is required: Authorization: Bearer qmt_…"}
	addr := a.o.ClientIP(r)
	auth := r.Header.Get("Authorization")
	scheme, secret, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(secret, controlplane.MachineTokenPrefix) {
		a.failures.Fail(addr)
		return controlplane.TokenCaller{}, unauth
	}
	key := controlplane.HashKey(secret)
	now := a.o.Now()
	a.tokens.mu.Lock()
	e, hit := a.tokens.entries[key]
	gen := a.tokens.gen
	a.tokens.mu.Unlock()
	if hit && now.Sub(e.at) < a.o.TokenTTL {
		return e.caller, nil
	}
	if allowed, retry := a.failures.Allow(addr); !allowed {
		return controlplane.TokenCaller{}, &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.RateLimited,
			Message: "too many failed authentications from this address", RetryAfter: retry}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.o.CallTimeout)
	defer cancel()
	caller, err := controlplane.AuthenticateMachineToken(ctx, a.o.Pool, secret)
	if controlplane.KindOf(err) == controlplane.NotFound {
		a.failures.Fail(addr)
		return controlplane.TokenCaller{}, unauth
	}
	if err != nil {
		a.o.Log.Warn("machine token not checked", zap.Error(err))
		return controlplane.TokenCaller{}, &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.InternalError,
			Message: "the control-plane database did not answer", RetryAfter: 1}
	}
	a.tokens.mu.Lock()
	// An invalidation that arrived during the lookup may concern this
	// very token: what was read before it is not kept.
	if a.tokens.gen == gen {
		a.tokens.entries[key] = tokenEntry{caller: caller, at: now}
	}
	a.tokens.mu.Unlock()
	return caller, nil
}

// rateLimit spends one request of the token's budget on this gateway.
func (a *API) rateLimit(c controlplane.TokenCaller) *apierror.Error {
	v, _ := a.limits.Load(c.ID)
	l, _ := v.(*rate.Limiter)
	if l == nil || l.Limit() != rate.Limit(c.RatePerSecond) || l.Burst() != c.Burst {
		l = rate.NewLimiter(rate.Limit(c.RatePerSecond), c.Burst)
		if prev, loaded := a.limits.LoadOrStore(c.ID, l); loaded {
			if p := prev.(*rate.Limiter); p.Limit() == l.Limit() && p.Burst() == l.Burst() {
				l = p
			} else {
				a.limits.Store(c.ID, l)
			}
		}
	}
	if l.AllowN(a.o.Now(), 1) {
		return nil
	}
	return &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.RateLimited,
		Message: "this machine token's rate limit is spent", RetryAfter: 1}
}
