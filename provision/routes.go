package provision

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
)

// idemMode says whether an operation takes an Idempotency-Key.
type idemMode int

const (
	// idemNone: a read, or an ensure by a natural key; a key sent is
	// ignored.
	idemNone idemMode = iota
	// idemRequired: an operation with no natural key; refused without one.
	idemRequired
)

// route is one operation of the API. Adding an operation is adding a row
// to routeTable (and its path to openapi.yaml, which a test checks).
type route struct {
	method  string
	pattern string // below Prefix, with {param} segments
	// op is the operationId in openapi.yaml and, prefixed provision_, the
	// audited action.
	op          string
	scope       string
	idempotency idemMode
	// naturalKey, for an operation that takes an Idempotency-Key unless
	// its body names the object, says whether the body does.
	naturalKey func(body []byte) bool
	handle     func(*call) (answer, error)
	// ownTx operations run a control-plane function that commits its
	// own steps (a drain the gateways must see before it goes on); the
	// handler uses the pool, not a transaction.
	ownTx bool
	// public routes (the API's own description) need no token.
	public bool
	raw    http.HandlerFunc

	segs []string
}

func (rt *route) hasNaturalKey(body []byte) bool {
	return rt.naturalKey != nil && rt.naturalKey(body)
}

// Scopes of machine tokens, as the routes need them.
const (
	scopeProvision = "provision"
	scopeUsage     = "usage"
	scopeRead      = "read"
)

// routeTable is every operation of the API.
func (a *API) routeTable() []route {
	rs := []route{
		{method: http.MethodGet, pattern: "/openapi.yaml", op: "getOpenAPI", public: true, raw: serveOpenAPI},

		{method: http.MethodGet, pattern: "/plans", op: "listPlans", scope: scopeRead, handle: listPlans},

		{method: http.MethodPut, pattern: "/tenants/{tenant}", op: "ensureTenant", scope: scopeProvision, handle: ensureTenant},
		{method: http.MethodGet, pattern: "/tenants/{tenant}", op: "getTenant", scope: scopeRead, handle: getTenant},
		{method: http.MethodPut, pattern: "/tenants/{tenant}/status", op: "setTenantStatus", scope: scopeProvision, handle: setTenantStatus},
		{method: http.MethodDelete, pattern: "/tenants/{tenant}", op: "deleteTenant", scope: scopeProvision, handle: deleteTenant},
		{method: http.MethodPost, pattern: "/tenants/{tenant}/purged", op: "finishTenantDeletion", scope: scopeProvision,
			ownTx: true, handle: finishTenantDeletion},

		{method: http.MethodPut, pattern: "/clusters/{cluster}", op: "ensureCluster", scope: scopeProvision, handle: ensureCluster},
		{method: http.MethodGet, pattern: "/clusters/{cluster}", op: "getCluster", scope: scopeRead, handle: getCluster},
		{method: http.MethodPut, pattern: "/clusters/{cluster}/status", op: "setClusterStatus", scope: scopeProvision, handle: setClusterStatus},
		{method: http.MethodPut, pattern: "/clusters/{cluster}/overrides", op: "setClusterOverrides", scope: scopeProvision, handle: setClusterOverrides},
		{method: http.MethodGet, pattern: "/clusters/{cluster}/limits", op: "getClusterLimits", scope: scopeRead, handle: getClusterLimits},
		{method: http.MethodPost, pattern: "/clusters/{cluster}/move", op: "moveCluster", scope: scopeProvision,
			ownTx: true, handle: moveCluster},

		{method: http.MethodGet, pattern: "/clusters/{cluster}/keys", op: "listKeys", scope: scopeRead, handle: listKeys},
		{method: http.MethodPost, pattern: "/clusters/{cluster}/keys", op: "issueKey", scope: scopeProvision,
			idempotency: idemRequired, naturalKey: bodyHasKeyHash, handle: issueKey},
		{method: http.MethodGet, pattern: "/keys/{key}", op: "getKey", scope: scopeRead, handle: getKey},
		{method: http.MethodDelete, pattern: "/keys/{key}", op: "revokeKey", scope: scopeProvision, handle: revokeKey},
		{method: http.MethodPost, pattern: "/keys/{key}/rotate", op: "rotateKey", scope: scopeProvision,
			idempotency: idemRequired, handle: rotateKey},

		{method: http.MethodPut, pattern: "/users/{email}", op: "ensureUser", scope: scopeProvision, handle: ensureUser},
		{method: http.MethodGet, pattern: "/users/{email}", op: "getUser", scope: scopeRead, handle: getUser},
		{method: http.MethodPut, pattern: "/clusters/{cluster}/roles/{email}", op: "grantRole", scope: scopeProvision, handle: grantRole},
		{method: http.MethodDelete, pattern: "/clusters/{cluster}/roles/{email}", op: "revokeRole", scope: scopeProvision, handle: revokeRole},

		{method: http.MethodGet, pattern: "/usage", op: "getUsage", scope: scopeUsage, handle: getUsage},
		{method: http.MethodGet, pattern: "/clusters/{cluster}/activity", op: "getActivity", scope: scopeUsage, handle: getActivity},

		{method: http.MethodGet, pattern: "/webhooks", op: "listWebhooks", scope: scopeProvision, handle: listWebhooks},
		{method: http.MethodPut, pattern: "/webhooks/{webhook}", op: "ensureWebhook", scope: scopeProvision, handle: ensureWebhook},
		{method: http.MethodGet, pattern: "/webhooks/{webhook}", op: "getWebhook", scope: scopeProvision, handle: getWebhook},
		{method: http.MethodDelete, pattern: "/webhooks/{webhook}", op: "removeWebhook", scope: scopeProvision, handle: removeWebhook},
		{method: http.MethodPut, pattern: "/webhooks/{webhook}/events", op: "setWebhookEvents", scope: scopeProvision, handle: setWebhookEvents},
		{method: http.MethodPut, pattern: "/webhooks/{webhook}/status", op: "setWebhookStatus", scope: scopeProvision, handle: setWebhookStatus},
		{method: http.MethodPost, pattern: "/webhooks/{webhook}/rotate-secret", op: "rotateWebhookSecret", scope: scopeProvision,
			idempotency: idemRequired, handle: rotateWebhookSecret},
		{method: http.MethodGet, pattern: "/webhooks/{webhook}/attempts", op: "listWebhookAttempts", scope: scopeProvision, handle: listWebhookAttempts},
		{method: http.MethodPost, pattern: "/webhooks/{webhook}/replay", op: "replayWebhook", scope: scopeProvision,
			idempotency: idemRequired, handle: replayWebhook},
	}
	for i := range rs {
		rs[i].segs = strings.Split(strings.TrimPrefix(rs[i].pattern, "/"), "/")
	}
	return rs
}

// Routes lists the API's operations as "METHOD /provision/v1/path", for
// the test that holds openapi.yaml to them.
func (a *API) Routes() []string {
	out := make([]string, 0, len(a.routes))
	for _, rt := range a.routes {
		out = append(out, rt.method+" "+Prefix+rt.pattern)
	}
	return out
}

// match finds the route of a request and its path parameters; 404 for a
// path no route has, 405 for a method the path does not take.
func (a *API) match(r *http.Request) (*route, map[string]string, *apierror.Error) {
	rest, found := strings.CutPrefix(r.URL.EscapedPath(), Prefix+"/")
	if !found {
		return nil, nil, &apierror.Error{Status: http.StatusNotFound, Code: apierror.NotFound, Message: "no such route"}
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" || strings.Contains(u, "/") {
			return nil, nil, &apierror.Error{Status: http.StatusNotFound, Code: apierror.NotFound, Message: "no such route"}
		}
		segs[i] = u
	}
	var allowed []string
	for i := range a.routes {
		rt := &a.routes[i]
		params, ok := matchSegs(rt.segs, segs)
		if !ok {
			continue
		}
		if rt.method != r.Method {
			allowed = append(allowed, rt.method)
			continue
		}
		return rt, params, nil
	}
	if len(allowed) > 0 {
		slices.Sort(allowed)
		return nil, nil, &apierror.Error{Status: http.StatusMethodNotAllowed, Code: apierror.BadRequest,
			Message: "method " + r.Method + " not allowed here: use " + strings.Join(allowed, ", ")}
	}
	return nil, nil, &apierror.Error{Status: http.StatusNotFound, Code: apierror.NotFound, Message: "no such route"}
}

func matchSegs(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	var params map[string]string
	for i, p := range pattern {
		if name, isParam := strings.CutPrefix(p, "{"); isParam {
			if params == nil {
				params = map[string]string{}
			}
			params[strings.TrimSuffix(name, "}")] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI is the API's OpenAPI 3.1 description.
func OpenAPI() []byte { return openAPIDoc }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}

// auditTx writes the call's audit row in its transaction.
func (a *API) auditTx(c *call, rt *route, status int) error {
	return recordCall(c.ctx, c.tx, c.token.ID, nullable(c.tenantID), nullable(c.clusterID), rt, c.r, c.target, status)
}

// audit records a refused call after its transaction rolled back, or a
// call that ran its own steps, naming no tenant or cluster row (a refused
// call may have created one that is gone, a deletion removed it).
func (a *API) audit(r *http.Request, token controlplane.TokenCaller, rt *route, _ *call, status int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.o.CallTimeout)
	defer cancel()
	if err := recordCall(ctx, a.o.Pool, token.ID, nil, nil, rt, r, "", status); err != nil {
		a.o.Log.Warn("provisioning call not audited", zap.String("operation", rt.op), zap.Error(err))
	}
}

func recordCall(ctx context.Context, db controlplane.DB, tokenID string, tenant, cluster *string, rt *route, r *http.Request, target string, status int) error {
	if target == "" {
		target = r.URL.Path
	}
	meta, err := json.Marshal(map[string]any{"method": r.Method, "path": r.URL.Path, "status": status})
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `SELECT queen_proxy.record_machine_call($1::uuid, $2::uuid, $3::uuid, $4, $5, $6::jsonb)`,
		tokenID, tenant, cluster, "provision_"+rt.op, target, string(meta))
	return err
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
