package provision

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/tenancy"
)

// Every route of the API is in openapi.yaml and every operation of
// openapi.yaml is a route, with the same operationId.
func TestRoutesMatchOpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+Prefix+path] = op.OperationID
		}
	}
	a := &API{}
	routes := a.routeTable()
	served := map[string]bool{}
	for _, rt := range routes {
		key := rt.method + " " + Prefix + rt.pattern
		served[key] = true
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is not in openapi.yaml", key)
		} else if op != rt.op {
			t.Errorf("route %s is operation %q in openapi.yaml, %q in the route table", key, op, rt.op)
		}
	}
	for key := range documented {
		if !served[key] {
			t.Errorf("openapi.yaml documents %s, which the API does not serve", key)
		}
	}
	if len(routes) < 20 {
		t.Fatalf("only %d routes", len(routes))
	}
}

// A signup service provisions a tenant, a cluster and a key twice: the
// second time answers the same objects, and nothing is made twice.
func TestEnsureTwiceGivesTheSameObjects(t *testing.T) {
	e := newEnv(t)
	tok := e.token

	t1 := e.call(tok, "PUT", "/tenants/acme", map[string]any{"name": "Acme Inc"})
	e.want(t1, 201, `"slug":"acme"`)
	t2 := e.call(tok, "PUT", "/tenants/acme", map[string]any{"name": "Acme Inc"})
	e.want(t2, 200)
	if t1.str("id") != t2.str("id") {
		t.Fatalf("tenant ids %s, %s", t1.str("id"), t2.str("id"))
	}
	e.want(e.call(tok, "PUT", "/tenants/acme", map[string]any{"name": "Other"}), 409, `name is \"Acme Inc\", not \"Other\"`)

	c1 := e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "pro"})
	e.want(c1, 201, `"cell_slug":"eu1-a"`, `"placed":true`)
	c2 := e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "pro"})
	e.want(c2, 200)
	if c1.str("id") != c2.str("id") {
		t.Fatal("a second cluster")
	}
	e.want(e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "starter"}), 409, "plan is")
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.clusters WHERE slug = 'acme-prod'`); n != 1 {
		t.Fatalf("%d clusters", n)
	}

	keyReq := map[string]any{"name": "signup", "scopes": []string{"produce", "consume"}}
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", keyReq), 400, "Idempotency-Key")
	k1 := e.call(tok, "POST", "/clusters/acme-prod/keys", keyReq, "Idempotency-Key", "signup-acme-1")
	e.want(k1, 201, `"key":"qk_live_`)
	k2 := e.call(tok, "POST", "/clusters/acme-prod/keys", keyReq, "Idempotency-Key", "signup-acme-1")
	e.want(k2, 201)
	if k1.str("id") != k2.str("id") || k1.str("key") != k2.str("key") || k2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered %s, first %s", k2.raw, k1.raw)
	}
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", map[string]any{"name": "other", "scopes": []string{"read"}},
		"Idempotency-Key", "signup-acme-1"), 409, "different request")
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.api_keys k JOIN queen_proxy.clusters c ON c.id = k.cluster_id WHERE c.slug = 'acme-prod'`); n != 1 {
		t.Fatalf("%d keys after a retry, want 1", n)
	}

	// A key the caller made: only its hash travels and is stored, and the
	// hash is the natural key.
	secret := "qk_live_" + strings.Repeat("k", 43)
	hashReq := map[string]any{"name": "own", "scopes": []string{"produce"}, "key_hash": controlplane.HashKey(secret)}
	h1 := e.call(tok, "POST", "/clusters/acme-prod/keys", hashReq)
	e.want(h1, 201)
	if _, has := h1.body["key"]; has {
		t.Fatalf("an answer for a caller's hash shows a key: %s", h1.raw)
	}
	h2 := e.call(tok, "POST", "/clusters/acme-prod/keys", hashReq)
	e.want(h2, 200)
	if h1.str("id") != h2.str("id") {
		t.Fatal("a second key for one hash")
	}
	hashReq["scopes"] = []string{"produce", "consume"}
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", hashReq), 409, "scopes is")

	// The key the caller keeps is the one the gateway accepts.
	store := tenancy.NewStore(e.pool)
	if k, err := store.APIKeyByHash(ctxT(t), tenancy.HashAPIKey(secret)); err != nil || k.ID != h1.str("id") {
		t.Fatalf("the gateway's store reads the caller's key as %+v, %v", k, err)
	}
}

// Every malformed request is a 400 that names the field, in the error
// envelope, and changes nothing.
func TestMalformedRequestsNameTheField(t *testing.T) {
	e := newEnv(t)
	tok := e.token
	e.want(e.call(tok, "PUT", "/tenants/acme", `{"name":"A","bogus":1}`), 400, `"bogus: unknown member"`, `"code":"invalid_request"`)
	e.want(e.call(tok, "PUT", "/tenants/acme", `{"name":7}`), 400, `"name: must be a JSON string"`)
	e.want(e.call(tok, "PUT", "/tenants/acme", `{"name":"A"} {}`), 400, "body: one JSON object only")
	e.want(e.call(tok, "PUT", "/tenants/acme", `[1]`), 400, "body: must be a JSON object")
	e.want(e.call(tok, "PUT", "/tenants/-acme", map[string]any{}), 400, "tenant: invalid tenant slug")
	e.want(e.call(tok, "PUT", "/tenants/acme", map[string]any{}), 201)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme"}), 400, "plan: plan is required")
	e.want(e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "nope"}), 404, `unknown plan`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "pro"}), 201)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/status", map[string]any{"status": "paused"}), 400, "status: invalid cluster status")
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", map[string]any{"name": "x", "scopes": []string{"write"}},
		"Idempotency-Key", "k1"), 400, `scopes: invalid scope \"write\"`)
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", map[string]any{"name": "x", "scopes": []string{"read"}, "key_hash": "ABC"}),
		400, "key_hash: key hash must be")
	e.want(e.call(tok, "POST", "/clusters/acme-prod/keys", map[string]any{"name": "x", "scopes": []string{"read"}, "expires_at": "soon"},
		"Idempotency-Key", "k2"), 400, "expires_at: invalid expiry")
	e.want(e.call(tok, "PUT", "/users/not-an-email", map[string]any{"tenant": "acme"}), 400, "email: invalid e-mail")
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/roles/a@b.example", map[string]any{"role": "owner"}), 400, `role: invalid role`)
	e.want(e.call(tok, "GET", "/usage?page_size=0", nil), 400, "page_size: must be 1 to 1000")
	e.want(e.call(tok, "DELETE", "/keys/abc", nil), 400, `key: invalid key id \"abc\"`)
	e.want(e.call(tok, "GET", "/usage?month=2026-13", nil), 400, "from/to/month")
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.api_keys`); n != 0 {
		t.Fatalf("%d keys after refused requests", n)
	}
	// A route or method the API lacks is refused in the envelope too.
	resp, err := http.Get(e.srv.URL + Prefix + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("unknown route: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// The lifecycle of a cluster, its keys and its users' roles over the API,
// each call audited with the token's id.
func TestClusterLifecycleAndAudit(t *testing.T) {
	e := newEnv(t)
	tok := e.token
	e.want(e.call(tok, "PUT", "/tenants/acme", nil), 201)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod", map[string]any{"tenant": "acme", "plan": "pro"}), 201)
	e.want(e.call(tok, "GET", "/plans", nil), 200, `"code":"pro"`)
	e.want(e.call(tok, "GET", "/tenants/acme", nil), 200, `"clusters":1`)

	e.want(e.call(tok, "PUT", "/clusters/acme-prod/status", map[string]any{"status": "suspended"}), 200, `"status":"suspended"`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/status", map[string]any{"status": "suspended"}), 200, `"status":"suspended"`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/status", map[string]any{"status": "push_blocked"}), 200, `"status":"push_blocked"`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/status", map[string]any{"status": "active"}), 200, `"status":"active"`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/overrides", map[string]any{"max_batch_items": 5}), 200, `"overrides":{"max_batch_items":5}`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/overrides", map[string]any{"max_nonsense": 5}), 400)
	e.want(e.call(tok, "GET", "/clusters/acme-prod/limits", nil), 200, `"plan":"pro"`)

	k := e.call(tok, "POST", "/clusters/acme-prod/keys", map[string]any{"name": "ci", "scopes": []string{"produce"}}, "Idempotency-Key", "ci-1")
	e.want(k, 201)
	id := k.str("id")
	e.want(e.call(tok, "GET", "/clusters/acme-prod/keys", nil), 200, id)
	rot := e.call(tok, "POST", "/keys/"+id+"/rotate", map[string]any{"overlap": "1h"}, "Idempotency-Key", "rot-1")
	e.want(rot, 200, `"old_valid_until":"`)
	rot2 := e.call(tok, "POST", "/keys/"+id+"/rotate", map[string]any{"overlap": "1h"}, "Idempotency-Key", "rot-1")
	if string(rot2.raw) != string(rot.raw) {
		t.Fatalf("a retried rotation answered %s, first %s", rot2.raw, rot.raw)
	}
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.api_keys`); n != 2 {
		t.Fatalf("%d keys after a retried rotation, want 2", n)
	}
	id = rot.body["new"].(map[string]any)["id"].(string)
	// An answer older than the retention is dropped by the next claim.
	if _, err := e.pool.Exec(ctxT(t), `UPDATE queen_proxy.provision_replays SET created_at = now() - interval '8 days' WHERE idempotency_key = 'ci-1'`); err != nil {
		t.Fatal(err)
	}
	e.want(e.call(tok, "POST", "/keys/"+id+"/rotate", map[string]any{"overlap": "0"}, "Idempotency-Key", "rot-2"), 200)
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.provision_replays WHERE idempotency_key = 'ci-1'`); n != 0 {
		t.Fatal("an expired answer is kept")
	}
	e.want(e.call(tok, "DELETE", "/keys/"+id, nil), 200, `"status":"revoked"`)
	e.want(e.call(tok, "DELETE", "/keys/"+id, nil), 200, `"status":"revoked"`)
	e.want(e.call(tok, "GET", "/keys/00000000-0000-4000-8000-000000000000", nil), 404)

	e.want(e.call(tok, "PUT", "/users/Dev@Acme.example", map[string]any{"tenant": "acme", "name": "Dev"}), 201, `"email":"dev@acme.example"`)
	e.want(e.call(tok, "PUT", "/users/dev@acme.example", map[string]any{"tenant": "acme", "name": "Dev"}), 200)
	e.want(e.call(tok, "PUT", "/users/dev@acme.example", map[string]any{"tenant": "other"}), 409, "tenant is")
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/roles/dev@acme.example", map[string]any{"role": "producer"}), 200, `"role":"producer"`)
	e.want(e.call(tok, "PUT", "/clusters/acme-prod/roles/dev@acme.example", map[string]any{"role": "producer"}), 200, `"previous":"producer"`)
	e.want(e.call(tok, "GET", "/users/dev@acme.example", nil), 200, `"role":"producer"`)
	e.want(e.call(tok, "DELETE", "/clusters/acme-prod/roles/dev@acme.example", nil), 200, `"previous":"producer"`)
	e.want(e.call(tok, "DELETE", "/clusters/acme-prod/roles/dev@acme.example", nil), 200, `"previous":""`)
	e.want(e.call(tok, "GET", "/clusters/acme-prod/activity", nil), 200, `"last_traffic_at":null`)

	e.want(e.call(tok, "PUT", "/tenants/acme/status", map[string]any{"status": "suspended"}), 200, `"status":"suspended"`)
	e.want(e.call(tok, "DELETE", "/tenants/acme", nil), 200, `"already_deleting":false`)
	e.want(e.call(tok, "DELETE", "/tenants/acme", nil), 200, `"already_deleting":true`)

	var tokenID string
	if err := e.pool.QueryRow(ctxT(t), `SELECT id::text FROM queen_proxy.machine_tokens WHERE name = 'signup'`).Scan(&tokenID); err != nil {
		t.Fatal(err)
	}
	var calls, refused int
	if err := e.pool.QueryRow(ctxT(t), `SELECT count(*), count(*) FILTER (WHERE (meta->>'status')::int >= 400)
		FROM queen_proxy.operations WHERE actor_id = $1::uuid AND action LIKE 'provision_%'`, tokenID).Scan(&calls, &refused); err != nil {
		t.Fatal(err)
	}
	if calls != 31 || refused != 3 {
		t.Fatalf("%d calls audited with the token's id (%d refused), want 31 (3)", calls, refused)
	}
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.operations WHERE actor_id = $1::uuid AND action = 'provision_ensureCluster'
		AND cluster_id IS NOT NULL AND tenant_id <> queen_proxy.platform_tenant_id()`, tokenID); n != 1 {
		t.Fatalf("%d audited cluster ensures name their tenant and cluster, want 1", n)
	}
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.machine_tokens WHERE id = $1::uuid AND last_used_at > now() - interval '1 minute'`, tokenID); n != 1 {
		t.Fatal("the token's last use is not stamped")
	}
}

// A token reaches only what its scopes allow; none, or a wrong one, is 401.
func TestTokenScopesAndRateLimit(t *testing.T) {
	e := newEnv(t)
	reader := e.newToken("reader", []string{"read"}, 0, 0)
	e.want(e.call("", "GET", "/plans", nil), 401, `"code":"unauthorized"`)
	e.want(e.call("qmt_"+strings.Repeat("x", 43), "GET", "/plans", nil), 401)
	e.want(e.call(reader, "GET", "/plans", nil), 200)
	e.want(e.call(reader, "PUT", "/tenants/acme", nil), 403, "provision scope")
	e.want(e.call(reader, "GET", "/usage", nil), 403, "usage scope")
	e.want(e.call("", "GET", "/openapi.yaml", nil), 200)
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.operations o JOIN queen_proxy.machine_tokens m ON m.id = o.actor_id
		WHERE m.name = 'reader' AND (o.meta->>'status')::int = 403`); n != 2 {
		t.Fatalf("%d refusals for a missing scope audited, want 2", n)
	}

	slow := e.newToken("slow", []string{"read"}, 1, 3)
	got := map[int]int{}
	for range 6 {
		got[e.call(slow, "GET", "/plans", nil).status]++
	}
	if got[200] < 3 || got[200] > 4 || got[429] < 2 {
		t.Fatalf("a token with 1/s burst 3 got %v in a quick run of 6", got)
	}
}

// A revoked token is refused by every API instance (each with its own
// cache, kept fresh by its own invalidation listener) within a second.
func TestRevocationReachesEveryGatewayWithinASecond(t *testing.T) {
	e := newEnv(t)
	second, err := New(Options{Pool: e.pool})
	if err != nil {
		t.Fatal(err)
	}
	apis := []*API{e.api, second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, a := range apis {
		l := &tenancy.InvalidationListener{ConnString: e.url, OnSessionRevoked: a.InvalidateTokens, OnConnected: a.InvalidateTokens}
		go l.Run(ctx)
		select {
		case <-l.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("listener not ready")
		}
	}
	tok := e.newToken("doomed", []string{"read"}, 1000, 1000)
	get := func(a *API) int {
		req, _ := http.NewRequest("GET", Prefix+"/plans", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		a.ServeHTTP(w, req)
		return w.Code
	}
	for _, a := range apis {
		if s := get(a); s != 200 {
			t.Fatalf("before the revocation: %d", s)
		}
	}
	if _, err := controlplane.RevokeMachineToken(ctxT(t), e.pool, "doomed"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, a := range apis {
		for get(a) != 401 {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("gateway %d still accepts a token revoked %v ago", i, time.Since(start))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The cache's TTL is 30 s: only the invalidation explains a refusal
	// this soon.
	t.Logf("revocation refused on both gateways %v after its commit", time.Since(start))
	if time.Since(start) > time.Second {
		t.Fatalf("revocation took %v to reach both gateways", time.Since(start))
	}
}

// The usage answer equals what `caddy queen usage` shows (the same
// report), its op classes add up to each row, and it pages.
func TestUsageEqualsTheCLIReport(t *testing.T) {
	e := newEnv(t)
	tok := e.token
	e.want(e.call(tok, "PUT", "/tenants/acme", nil), 201)
	for _, slug := range []string{"acme-a", "acme-b", "acme-c"} {
		e.want(e.call(tok, "PUT", "/clusters/"+slug, map[string]any{"tenant": "acme", "plan": "pro"}), 201)
	}
	minute := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	for i, class := range []string{"push", "delivery", "read", "txn"} {
		if _, err := e.pool.Exec(ctxT(t), `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
			SELECT id, $1, $2, $3, $4, $5, $6 FROM queen_proxy.clusters WHERE slug IN ('acme-a', 'acme-c')`,
			minute, class, 10*(i+1), i+1, 100*(i+1), 7*(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := controlplane.Usage(ctxT(t), e.pool, controlplane.UsageQuery{From: minute.Add(-time.Hour), To: minute.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	token := ""
	for page := 0; ; page++ {
		q := fmt.Sprintf("/usage?from=%s&to=%s&page_size=2", minute.Add(-time.Hour).Format(time.RFC3339), minute.Add(time.Hour).Format(time.RFC3339))
		if token != "" {
			q += "&page_token=" + token
		}
		r := e.call(tok, "GET", q, nil)
		e.want(r, 200)
		for _, raw := range r.body["clusters"].([]any) {
			row := raw.(map[string]any)
			i := len(seen)
			want := rep.Clusters[i]
			seen = append(seen, row["cluster"].(string))
			if row["cluster"] != want.Cluster || int64(row["requests"].(float64)) != want.Requests ||
				int64(row["billable_messages"].(float64)) != want.BillableMessages || int64(row["bytes_in"].(float64)) != want.BytesIn {
				t.Fatalf("row %d: API %v, CLI %+v", i, row, want)
			}
			var reqs, msgs int64
			for _, oc := range row["op_classes"].(map[string]any) {
				reqs += int64(oc.(map[string]any)["requests"].(float64))
				msgs += int64(oc.(map[string]any)["messages"].(float64))
			}
			if reqs != want.Requests || msgs != want.Messages {
				t.Fatalf("row %d: op classes add up to %d requests, %d messages; the row says %d, %d", i, reqs, msgs, want.Requests, want.Messages)
			}
		}
		tenants := r.body["tenants"].([]any)
		var billable, requests int64
		for _, w := range rep.Clusters {
			billable += w.BillableMessages
			requests += w.Requests
		}
		if len(tenants) != 1 || tenants[0].(map[string]any)["tenant"] != "acme" ||
			int64(tenants[0].(map[string]any)["billable_messages"].(float64)) != billable ||
			int64(tenants[0].(map[string]any)["requests"].(float64)) != requests || tenants[0].(map[string]any)["clusters"] != 3.0 {
			t.Fatalf("tenant totals %v, the CLI's rows add up to %d billable, %d requests over 3 clusters", tenants, billable, requests)
		}
		next, _ := r.body["next_page_token"].(string)
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(seen, []string{"acme-a", "acme-b", "acme-c"}) {
		t.Fatalf("pages listed %v", seen)
	}
	e.want(e.call(tok, "GET", "/clusters/acme-a/activity", nil), 200, `"last_traffic_at":"2026-03-04T05:06:00Z"`)
}

// Retries that race (an at-least-once bus delivering one signup twice at
// once) still make one tenant, one cluster and one key, and every racer
// gets a success.
func TestRacingEnsuresMakeOneObject(t *testing.T) {
	e := newEnv(t)
	tok := e.token
	const n = 6
	type res struct{ tenant, cluster, key reply }
	out := make(chan res, n)
	for range n {
		go func() {
			var r res
			r.tenant = e.call(tok, "PUT", "/tenants/race", map[string]any{"name": "Race"})
			r.cluster = e.call(tok, "PUT", "/clusters/race-prod", map[string]any{"tenant": "race", "plan": "pro"})
			r.key = e.call(tok, "POST", "/clusters/race-prod/keys", map[string]any{"name": "k", "scopes": []string{"read"}},
				"Idempotency-Key", "race-key")
			out <- r
		}()
	}
	keys := map[string]bool{}
	for range n {
		r := <-out
		for _, x := range []reply{r.tenant, r.cluster, r.key} {
			if x.status != 200 && x.status != 201 {
				t.Fatalf("a racing ensure answered %d %s", x.status, x.raw)
			}
		}
		keys[r.key.str("key")] = true
	}
	if len(keys) != 1 {
		t.Fatalf("racing retries answered %d different key secrets", len(keys))
	}
	for _, q := range []string{
		`SELECT count(*) FROM queen_proxy.tenants WHERE slug = 'race'`,
		`SELECT count(*) FROM queen_proxy.clusters WHERE slug = 'race-prod'`,
		`SELECT count(*) FROM queen_proxy.api_keys`,
	} {
		if got := e.scalar(q); got != 1 {
			t.Fatalf("%s = %d, want 1", q, got)
		}
	}
}

// The validator the tests rely on does catch an answer that drifts from
// openapi.yaml (a 3.1 type array, a required member, an extra member where
// none is allowed): otherwise the checks in call could never fail.
func TestOpenAPIValidatorCatchesDrift(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := doc.Components.Schemas["Key"].Value
	good := map[string]any{"id": "0b5b0a52-5a3e-4a43-9a77-3a5e1c1c7a01", "cluster_id": "0b5b0a52-5a3e-4a43-9a77-3a5e1c1c7a02",
		"cluster_slug": "a", "name": "n", "scopes": []any{"read"}, "status": "live", "created_at": "2026-01-01T00:00:00Z",
		"last_used_at": nil, "expires_at": nil, "revoked_at": nil}
	opts := []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()}
	if err := key.VisitJSON(good, opts...); err != nil {
		t.Fatalf("a well-formed key is refused: %v", err)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"a number where a string or null": func(m map[string]any) { m["expires_at"] = 5 },
		"a required member missing":       func(m map[string]any) { delete(m, "status") },
		"an undocumented member":          func(m map[string]any) { m["key_hash"] = "x" },
		"a scope outside the enum":        func(m map[string]any) { m["scopes"] = []any{"write"} },
	} {
		bad := map[string]any{}
		for k, v := range good {
			bad[k] = v
		}
		mutate(bad)
		if err := key.VisitJSON(bad, opts...); err == nil {
			t.Errorf("%s passes validation", name)
		}
	}
}

// An address that keeps presenting unknown tokens is backed off before
// each costs a database lookup; a token it already used keeps working.
func TestUnknownTokensAreBackedOff(t *testing.T) {
	e := newEnv(t)
	e.want(e.call(e.token, "GET", "/plans", nil), 200)
	got := map[int]int{}
	for i := range 30 {
		bogus := fmt.Sprintf("qmt_%043d", i)
		got[e.call(bogus, "GET", "/plans", nil).status]++
	}
	if got[401] < 15 || got[401] > 25 || got[429] < 5 {
		t.Fatalf("30 unknown tokens from one address got %v", got)
	}
	e.want(e.call(e.token, "GET", "/plans", nil), 200)
}

// Webhook endpoints over the API: the secret is answered only where it is
// made, an ensure that differs names what differs, the CLI's checks refuse
// bad filters and URLs with the field named, the operations without a
// natural key need an Idempotency-Key, a token without the provision
// scope is refused, and every call is audited under the token.
func TestWebhookEndpointsOverTheAPI(t *testing.T) {
	e := newEnv(t)
	tok := e.token
	req := map[string]any{"url": "https://hooks.example.com/q", "events": []string{"cluster_status_changed"}}
	w1 := e.call(tok, "PUT", "/webhooks/alerts", req)
	e.want(w1, 201, `"secret":"whsec_`)
	w2 := e.call(tok, "PUT", "/webhooks/alerts", map[string]any{"events": []string{"cluster_status_changed"}})
	e.want(w2, 200)
	if w2.body["id"] != w1.body["id"] || w2.body["secret"] != nil {
		t.Fatalf("the second ensure answered %s", w2.raw)
	}
	for _, path := range []string{"/webhooks", "/webhooks/alerts"} {
		if r := e.call(tok, "GET", path, nil); r.status != 200 || strings.Contains(string(r.raw), "whsec_") {
			t.Fatalf("GET %s: %d %s", path, r.status, r.raw)
		}
	}
	e.want(e.call(tok, "PUT", "/webhooks/alerts", map[string]any{"events": []string{}}), 409, `events is \"cluster_status_changed\", not \"all\"`)
	e.want(e.call(tok, "PUT", "/webhooks/alerts", map[string]any{"url": "ftp://x.example"}), 400, `"url: `)
	e.want(e.call(tok, "PUT", "/webhooks/other", map[string]any{}), 400, `"url: webhook endpoint URL is required`)
	e.want(e.call(tok, "PUT", "/webhooks/other", map[string]any{"url": "https://h.example", "events": []string{"nope"}}), 400, `"events: unknown event`)
	e.want(e.call(tok, "PUT", "/webhooks/Bad_Name", map[string]any{"url": "https://h.example"}), 400, `"webhook: invalid webhook endpoint name`)
	e.want(e.call(tok, "PUT", "/webhooks/alerts/events", map[string]any{}), 400, `"events: is required`)
	e.want(e.call(tok, "PUT", "/webhooks/alerts/status", map[string]any{"status": "paused"}), 400, `"status: \"paused\" is not active or disabled`)
	e.want(e.call(tok, "GET", "/webhooks/alerts/attempts?limit=0", nil), 400, `limit`)
	e.want(e.call(tok, "POST", "/webhooks/alerts/rotate-secret", map[string]any{}), 400, "Idempotency-Key")
	e.want(e.call(tok, "POST", "/webhooks/alerts/replay", map[string]any{"since": "2026-01-01"}), 400, "Idempotency-Key")
	e.want(e.call(tok, "POST", "/webhooks/alerts/replay", map[string]any{}, "Idempotency-Key", "r-1"), 400, "event id or a start time")
	e.want(e.call(tok, "GET", "/webhooks/nope", nil), 404, `unknown webhook endpoint`)

	r1 := e.call(tok, "POST", "/webhooks/alerts/rotate-secret", map[string]any{"overlap": "0"}, "Idempotency-Key", "rot-1")
	e.want(r1, 200, `"secret":"whsec_`)
	r2 := e.call(tok, "POST", "/webhooks/alerts/rotate-secret", map[string]any{"overlap": "0"}, "Idempotency-Key", "rot-1")
	if r2.body["secret"] != r1.body["secret"] || r1.body["secret"] == w1.body["secret"] {
		t.Fatalf("the rotation's retry answered another secret, or the rotation kept it: %s %s", r1.raw, r2.raw)
	}
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.webhook_endpoints WHERE secret = $1 AND previous_secret IS NULL`, r1.body["secret"]); n != 1 {
		t.Fatalf("the retry rotated again (%d endpoints hold the answered secret)", n)
	}

	reader := e.newToken("reader", []string{"read", "usage"}, 0, 0)
	e.want(e.call(reader, "GET", "/webhooks", nil), 403, `"code":"forbidden"`)

	e.want(e.call(tok, "DELETE", "/webhooks/alerts", nil), 200, `"removed":true`)
	e.want(e.call(tok, "DELETE", "/webhooks/alerts", nil), 404)
	if n := e.scalar(`SELECT count(*) FROM queen_proxy.operations o JOIN queen_proxy.machine_tokens m ON m.id = o.actor_id
		WHERE m.name = 'signup' AND o.action = 'provision_ensureWebhook' AND o.target = 'alerts'`); n < 2 {
		t.Fatalf("%d audited webhook ensures", n)
	}
}
