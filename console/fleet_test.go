package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// fleetRoute is one fleet route with a body that would succeed for an
// operator, and the status it answers an operator.
type fleetRoute struct {
	method, path, body string
	operatorStatus     int
}

func fleetRoutes(clusterID, slug string) []fleetRoute {
	return []fleetRoute{
		{"GET", "/api/operator/cells", "", 200},
		{"GET", "/api/operator/tenants", "", 200},
		{"GET", "/api/operator/plans", "", 200},
		{"GET", "/api/operator/clusters/" + clusterID + "/requests", "", 200},
		{"PUT", "/api/operator/clusters/" + slug + "/plan", `{"plan":"dev"}`, 200},
		{"POST", "/api/operator/clusters/" + clusterID + "/keys", `{"name":"ops","scopes":["read"]}`, 201},
		{"POST", "/api/operator/clusters/" + clusterID + "/suspend", "", 200},
		{"POST", "/api/operator/clusters/" + clusterID + "/resume", "", 200},
	}
}

// operator makes a live operator (of its own tenant, with no role on any
// cluster) and returns a session token for it.
func (e *env) operator() string {
	e.t.Helper()
	tenant, _ := e.tenant()
	id, email := e.user(tenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, email)
	return e.token(id)
}

// TestFleetRoutesAreForLiveOperatorsOnly: every fleet route, read or
// write, answers 404 route_blocked to a signed-out caller, an API key, a
// cluster admin, and an operator whose bit is not live, and changes
// nothing for them; the operator gets the answer.
func TestFleetRoutesAreForLiveOperatorsOnly(t *testing.T) {
	off := newEnv(t, func(o *Options) { o.OperatorEnabled = true })
	on := newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	notLive := newEnv(t, func(o *Options) { o.OperatorAPI = true })
	w := on.world()
	slug := strings.TrimSuffix(w.host, "."+baseDomain)
	op := on.operator()
	admin := on.token(w.users["admin"])
	_, key := on.apiKey(w.clusterID)
	keysBefore := on.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid`, w.clusterID)

	for _, rt := range fleetRoutes(w.clusterID, slug) {
		for _, who := range []struct {
			name string
			e    *env
			tok  string
			host string
		}{
			{"signed out", on, "", w.host},
			{"api key", on, key, w.host},
			{"cluster admin", on, admin, w.host},
			{"cluster admin on a shared host", on, admin, "api." + baseDomain},
			{"operator without operator_api", off, op, w.host},
			{"operator without operator_enabled", notLive, op, w.host},
		} {
			r := who.e.write(rt.method, who.host, rt.path, who.tok, rt.body)
			if r.Code != 404 || r.json()["code"] != "route_blocked" {
				t.Fatalf("%s %s as %s: %d %s, want 404 route_blocked", rt.method, rt.path, who.name, r.Code, r.Body.String())
			}
		}
		// A signed-in non-operator's cookie write with a same-origin
		// Origin passes CSRF and is still refused as absent.
		on.do(req{method: rt.method, host: w.host, path: rt.path, cookie: admin, body: rt.body,
			header: map[string]string{"Origin": "http://" + w.host}}).want(404, "route_blocked")
	}
	if got := on.scalar(`SELECT status FROM queen_proxy.clusters WHERE id = $1::uuid`, w.clusterID); got != "active" {
		t.Fatalf("refused callers changed the cluster's status to %s", got)
	}
	if got := on.scalar(`SELECT p.code FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE c.id = $1::uuid`, w.clusterID); got != "pro" {
		t.Fatalf("refused callers changed the plan to %s", got)
	}
	if got := on.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid`, w.clusterID); got != keysBefore {
		t.Fatalf("refused callers issued keys: %s, was %s", got, keysBefore)
	}
	// The operator, on any host, with no acting cluster.
	for _, rt := range fleetRoutes(w.clusterID, slug) {
		on.write(rt.method, "api."+baseDomain, rt.path, op, rt.body).want(rt.operatorStatus, "")
	}
	on.get(w.host, "/api/operator/nothing", op).want(404, "not_found")
	on.write("DELETE", w.host, "/api/operator/cells", op, "").want(405, "invalid_request")
	on.write("GET", w.host, "/api/operator/clusters/"+w.clusterID+"/suspend", op, "").want(405, "invalid_request")
	on.write("POST", w.host, "/api/operator/clusters/no-such-cluster/suspend", op, "").want(404, "not_found")
}

func find(t *testing.T, list any, field, value string) map[string]any {
	t.Helper()
	for _, x := range list.([]any) {
		if m := x.(map[string]any); m[field] == value {
			return m
		}
	}
	t.Fatalf("no %s=%s in %v", field, value, list)
	return nil
}

// TestFleetViews: cells with use, verdict and serving gateway; tenants
// with their clusters' status, plan, month usage and quota state; plans.
func TestFleetViews(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w := e.world()
	op := e.operator()
	e.exec(`UPDATE queen_proxy.cells SET capacity_slots = 7, tenancy_stated = 'scoped' WHERE id = $1::uuid`, e.cellID)
	// The cell is fronted by a group whose name is not the cell's: the
	// fleet pairs them from gateway_group_cells, and a lease that merely
	// carries the cell's name is not the cell's gateway.
	group := name("front")
	e.exec(`SELECT * FROM queen_proxy.claim_gateway_cells($1, 'gw-b', ARRAY[$2])`, group, e.cell)
	e.exec(`INSERT INTO queen_proxy.gateway_leases (group_name, holder, expires_at, holder_peer_url)
		VALUES ($1, 'gw-b', now() + interval '1 minute', 'http://192.0.2.12:7946')`, group)
	e.exec(`INSERT INTO queen_proxy.gateway_leases (group_name, holder, expires_at) VALUES ($1, 'gw-namesake', now() + interval '1 minute')`, e.cell)
	stale := name("group")
	e.exec(`INSERT INTO queen_proxy.gateway_leases (group_name, holder, expires_at) VALUES ($1, 'gw-x', now() - interval '1 minute')`, stale)
	e.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"monthly_msgs_quota": 1000000}' WHERE id = $1::uuid`, w.clusterID)
	now := time.Now().UTC()
	e.exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
		VALUES ($1::uuid, $2, 'push', 900000, 3, 0, 0), ($1::uuid, $2, 'delivery', 5000, 2, 0, 0)`,
		w.clusterID, now.Truncate(time.Minute).Add(-time.Minute))
	e.live = []meter.Unflushed{{Minute: now.Truncate(time.Minute), Op: meter.OpPush, Reqs: 1, Msgs: 10}}

	cells := e.get(w.host, "/api/operator/cells", op).want(200, "").json()
	cell := find(t, cells["cells"], "id", e.cellID)
	if cell["slug"] != e.cell || cell["url"] != e.broker.URL || cell["class"] != "shared" || cell["capacity_slots"] != float64(7) ||
		cell["clusters"] != float64(1) || cell["status"] != "active" {
		t.Fatalf("cell %v", cell)
	}
	ten := cell["tenancy"].(map[string]any)
	if ten["stated"] != "scoped" || ten["probed"] != "unknown" || ten["keeper_cluster"] != strings.TrimSuffix(w.host, "."+baseDomain) {
		t.Fatalf("cell tenancy %v", ten)
	}
	if g, _ := cell["gateway_group"].(map[string]any); g["group"] != group || g["claimed_by"] != "gw-b" || g["stated_at"] == "" {
		t.Fatalf("cell gateway group %v, want %s", cell["gateway_group"], group)
	}
	gw := cell["gateway"].(map[string]any)
	if gw["group"] != group || gw["holder"] != "gw-b" || gw["serving"] != true || gw["peer_url"] != "http://192.0.2.12:7946" {
		t.Fatalf("cell gateway %v", gw)
	}
	if g := find(t, cells["gateway_groups"], "group", group); fmt.Sprint(g["cells"]) != fmt.Sprint([]any{e.cell}) {
		t.Fatalf("group %s fronts %v, want [%s]", group, g["cells"], e.cell)
	}
	if g := find(t, cells["gateway_groups"], "group", e.cell); fmt.Sprint(g["cells"]) != "[]" {
		t.Fatalf("the lease named after the cell fronts %v, want nothing", g["cells"])
	}
	if g := find(t, cells["gateway_groups"], "group", stale); g["serving"] != false || g["holder"] != "gw-x" {
		t.Fatalf("stale group %v", g)
	}
	if self := cells["this_gateway"].(map[string]any); self["name"] != "gw-test" || self["role"] != "leader" ||
		fmt.Sprint(self["cells"]) != "[cell-test]" {
		t.Fatalf("this gateway %v", self)
	}

	tenants := e.get(w.host, "/api/operator/tenants", op).want(200, "").json()
	if tenants["month"] != now.Format("2006-01") {
		t.Fatalf("month %v", tenants["month"])
	}
	tenant := find(t, tenants["tenants"], "id", w.tenantID)
	cl := find(t, tenant["clusters"], "id", w.clusterID)
	usage, quota := cl["usage"].(map[string]any), cl["quota"].(map[string]any)
	if cl["status"] != "active" || cl["plan"] != "pro" || cl["cell_slug"] != e.cell || usage["msgs"] != float64(900010) ||
		usage["reqs"] != float64(6) {
		t.Fatalf("cluster %v", cl)
	}
	// A quota of 1,000,000 (an override): 90% used is the warning level.
	if quota["monthly_msgs_quota"] != float64(1000000) || quota["state"] != "warning" || quota["percent"] != float64(90) {
		t.Fatalf("quota %v", quota)
	}
	e.exec(`UPDATE queen_proxy.clusters SET limit_overrides = '{"monthly_msgs_quota": null}' WHERE id = $1::uuid`, w.clusterID)
	e.exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'grace')`, w.tenantID)
	tenants = e.get(w.host, "/api/operator/tenants", op).want(200, "").json()
	cl = find(t, find(t, tenants["tenants"], "id", w.tenantID)["clusters"], "id", w.clusterID)
	if cl["quota"].(map[string]any)["state"] != "unlimited" || cl["status"] != "push_blocked" || cl["cluster_status"] != "active" {
		t.Fatalf("cluster after override and grace %v", cl)
	}

	plans := e.get(w.host, "/api/operator/plans", op).want(200, "").json()
	pro := find(t, plans["plans"], "code", "pro")
	if pro["monthly_msgs_quota"] != nil || pro["cell_class"] != "shared" || pro["clusters"].(float64) < 1 ||
		pro["limits"].(map[string]any)["max_req_per_sec"] == nil {
		t.Fatalf("pro plan %v", pro)
	}
}

func TestQuotaState(t *testing.T) {
	q := func(n int64) *int64 { return &n }
	for _, c := range []struct {
		msgs  int64
		quota *int64
		want  string
	}{{5, nil, "unlimited"}, {0, q(100), "ok"}, {79, q(100), "ok"}, {80, q(100), "warning"}, {100, q(100), "exhausted"}, {250, q(100), "exhausted"}} {
		if got := quotaState(c.msgs, c.quota).State; got != c.want {
			t.Errorf("quotaState(%d, %v) = %s, want %s", c.msgs, c.quota, got, c.want)
		}
	}
}

// TestFleetActions: suspend, resume, change the plan and issue a key, each
// through its SQL function, audited with the operator's id, idempotent
// where nothing changes, and refused across origins.
func TestFleetActions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w := e.world()
	op := e.operator()
	admin := e.token(w.users["admin"])
	base := "/api/operator/clusters/" + w.clusterID
	status := func() string {
		return e.scalar(`SELECT status FROM queen_proxy.clusters WHERE id = $1::uuid`, w.clusterID)
	}

	r := e.write("POST", w.host, base+"/suspend", op, "").want(200, "").json()
	if r["changed"] != true || r["status"] != "suspended" || status() != "suspended" {
		t.Fatalf("suspend %v, stored %s", r, status())
	}
	// The cluster's own console now refuses writes.
	e.write("POST", w.host, "/api/console/keys", admin, `{"name":"k","scopes":["read"]}`).want(403, "cluster_suspended")
	if r := e.write("POST", w.host, base+"/suspend", op, "").want(200, "").json(); r["changed"] != false {
		t.Fatalf("second suspend %v", r)
	}
	if n := e.countOps(w.clusterID, "operator_cluster_suspended", "user"); n != 1 {
		t.Fatalf("%d operator_cluster_suspended rows", n)
	}
	if n := e.countOps(w.clusterID, "cluster_status_changed", "control_plane"); n != 1 {
		t.Fatalf("%d cluster_status_changed rows", n)
	}
	var actor string
	if err := e.pool.QueryRow(e.ctx(), `SELECT actor_id::text FROM queen_proxy.operations
		WHERE cluster_id = $1::uuid AND action = 'operator_cluster_suspended'`, w.clusterID).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	claims, err := e.keys.Verify(op)
	if err != nil || actor != claims.UserID {
		t.Fatalf("audited actor %s, operator %s (%v)", actor, claims.UserID, err)
	}
	if r := e.write("POST", w.host, base+"/resume", op, "").want(200, "").json(); r["changed"] != true || status() != "active" {
		t.Fatalf("resume %v, stored %s", r, status())
	}
	if r := e.write("POST", w.host, base+"/resume", op, "").want(200, "").json(); r["changed"] != false {
		t.Fatalf("second resume %v", r)
	}
	// A push block (a billing hold) is lifted by resume too, as the CLI's
	// cluster resume does.
	e.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'push_blocked')`, w.clusterID)
	if r := e.write("POST", w.host, base+"/resume", op, "").want(200, "").json(); r["changed"] != true || status() != "active" {
		t.Fatalf("resume of a push-blocked cluster %v, stored %s", r, status())
	}
	if n := e.countOps(w.clusterID, "operator_cluster_resumed", "user"); n != 2 {
		t.Fatalf("%d operator_cluster_resumed rows", n)
	}

	// Plans.
	e.write("PUT", w.host, base+"/plan", op, `{"plan":"no-such-plan"}`).want(400, "invalid_request")
	e.write("PUT", w.host, base+"/plan", op, `{}`).want(400, "invalid_request")
	if r := e.write("PUT", w.host, base+"/plan", op, `{"plan":"dev"}`).want(200, "").json(); r["changed"] != true || r["plan"] != "dev" {
		t.Fatalf("plan change %v", r)
	}
	if got := e.scalar(`SELECT p.code FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE c.id = $1::uuid`, w.clusterID); got != "dev" {
		t.Fatalf("stored plan %s", got)
	}
	if c, err := e.cache.ClusterByID(context.Background(), w.clusterID); err != nil || c.PlanCode != "dev" {
		t.Fatalf("the gateway's cache still has plan %v (%v)", c, err)
	}
	if n := e.countOps(w.clusterID, "operator_plan_changed", "user"); n != 1 {
		t.Fatalf("%d operator_plan_changed rows", n)
	}

	// Keys: shown once, live at once.
	e.write("POST", w.host, base+"/keys", op, `{"name":"","scopes":["read"]}`).want(400, "invalid_request")
	e.write("POST", w.host, base+"/keys", op, `{"name":"x","scopes":["everything"]}`).want(400, "invalid_request")
	k := e.write("POST", w.host, base+"/keys", op, `{"name":"ops key","scopes":["produce","read","produce"]}`).want(201, "").json()
	plaintext, _ := k["key"].(string)
	if !strings.HasPrefix(plaintext, "qk_live_") || k["cluster_id"] != w.clusterID || len(k["scopes"].([]any)) != 2 {
		t.Fatalf("issued %v", k)
	}
	if got, err := e.cache.APIKey(context.Background(), plaintext); err != nil || got.Cluster.ID != w.clusterID {
		t.Fatalf("the issued key does not authenticate: %v %v", got, err)
	}
	if n := e.countOps(w.clusterID, "operator_api_key_issued", "user"); n != 1 {
		t.Fatalf("%d operator_api_key_issued rows", n)
	}

	// Cookie writes follow the CSRF rule.
	e.do(req{method: "POST", host: w.host, path: base + "/suspend", cookie: op,
		header: map[string]string{"Origin": "https://evil.test"}}).want(403, "csrf_rejected")
	e.do(req{method: "POST", host: w.host, path: base + "/suspend", cookie: op}).want(403, "csrf_rejected")
	if status() != "active" {
		t.Fatal("a cross-site write suspended the cluster")
	}
	e.do(req{method: "POST", host: w.host, path: base + "/suspend", cookie: op,
		header: map[string]string{"Origin": "http://" + w.host}}).want(200, "")

	// A deleting cluster takes no action.
	e.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'deleting')`, w.clusterID)
	e.write("POST", w.host, base+"/resume", op, "").want(409, "conflict")
	e.write("POST", w.host, base+"/keys", op, `{"name":"k","scopes":["read"]}`).want(409, "conflict")
}

// liveRequests is a state that also holds unwritten request counts.
type liveRequests struct {
	testState
	counts []meter.RequestCount
}

func (l liveRequests) UnflushedRequests(string) []meter.RequestCount { return l.counts }

// TestConsoleRequests: per-key requests and refusals per minute, written
// and live, for any member; the operator reads any cluster's.
func TestConsoleRequests(t *testing.T) {
	var live []meter.RequestCount
	e := newEnv(t, func(o *Options) {
		o.OperatorAPI, o.OperatorEnabled = true, true
		o.State = liveRequests{counts: nil}
	})
	w := e.world()
	keyA, _ := e.apiKey(w.clusterID)
	keyB, _ := e.apiKey(w.clusterID)
	now := time.Now().UTC()
	m1 := now.Truncate(time.Minute).Add(-2 * time.Minute)
	old := now.Add(-30 * time.Hour).Truncate(time.Minute)
	for _, row := range []struct {
		at      time.Time
		key     string
		outcome string
		reqs    int64
	}{
		{m1, keyA, "ok", 40}, {m1, keyA, "429", 7}, {m1, keyB, "403", 2}, {m1, "", "5xx", 1}, {m1, "", "ok", 3}, {old, keyA, "ok", 1000},
	} {
		e.exec(`INSERT INTO queen_proxy.request_minutes (cluster_id, minute, key_id, outcome, reqs) VALUES ($1::uuid, $2, $3, $4, $5)`,
			w.clusterID, row.at, row.key, row.outcome, row.reqs)
	}
	live = []meter.RequestCount{{KeyID: keyA, Minute: now.Truncate(time.Minute), Outcome: meter.OutcomeRateLimited, Reqs: 5}}
	e.opts.State = liveRequests{counts: live}
	s, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.s = s

	viewer := e.token(w.users["viewer"])
	doc := e.get(w.host, "/api/console/requests", viewer).want(200, "").json()
	if doc["hours"] != float64(24) || len(doc["outcomes"].([]any)) != 5 {
		t.Fatalf("requests %v", doc)
	}
	tot := doc["totals"].(map[string]any)
	if tot["ok"] != float64(43) || tot["429"] != float64(12) || tot["403"] != float64(2) || tot["5xx"] != float64(1) || tot["4xx"] != float64(0) {
		t.Fatalf("totals %v", tot)
	}
	a := find(t, doc["keys"], "key_id", keyA)
	if a["total"] != float64(52) || a["reqs"].(map[string]any)["429"] != float64(12) || a["name"] != "test" {
		t.Fatalf("key A %v", a)
	}
	if b := find(t, doc["keys"], "key_id", keyB); b["total"] != float64(2) {
		t.Fatalf("key B %v", b)
	}
	var noKey map[string]any
	for _, k := range doc["keys"].([]any) {
		if m := k.(map[string]any); m["key_id"] == nil {
			noKey = m
		}
	}
	if noKey == nil || noKey["total"] != float64(4) {
		t.Fatalf("requests without a key %v", doc["keys"])
	}
	minutes := doc["minutes"].([]any)
	if len(minutes) != 5 {
		t.Fatalf("minutes %v", minutes)
	}
	first, last := minutes[0].(map[string]any), minutes[len(minutes)-1].(map[string]any)
	if first["minute"] != m1.Format(time.RFC3339) || first["outcome"] != "ok" || first["reqs"] != float64(43) {
		t.Fatalf("first minute %v", first)
	}
	if last["outcome"] != "429" || last["live"] != true || last["reqs"] != float64(5) {
		t.Fatalf("live minute %v", last)
	}
	// One key's minutes.
	one := e.get(w.host, "/api/console/requests?key="+keyB, viewer).want(200, "").json()
	if ms := one["minutes"].([]any); len(ms) != 1 || ms[0].(map[string]any)["outcome"] != "403" {
		t.Fatalf("key B's minutes %v", ms)
	}
	if ms := e.get(w.host, "/api/console/requests?key=", viewer).want(200, "").json()["minutes"].([]any); len(ms) != 2 {
		t.Fatalf("minutes without a key %v", ms)
	}
	e.get(w.host, "/api/console/requests?key=nope", viewer).want(400, "invalid_request")
	// A wider window reaches the old minute.
	if tot := e.get(w.host, "/api/console/requests?hours=48", viewer).want(200, "").json()["totals"].(map[string]any); tot["ok"] != float64(1043) {
		t.Fatalf("48 h totals %v", tot)
	}
	// Refused as the other console reads are.
	e.get(w.host, "/api/console/requests", "").want(401, "unauthorized")
	_, plaintext := e.apiKey(w.clusterID)
	e.get(w.host, "/api/console/requests", plaintext).want(403, "forbidden")
	e.get(w.host, "/api/console/requests", e.token(w.users["nonmember"])).want(403, "forbidden")
	e.write("POST", w.host, "/api/console/requests", viewer, "").want(405, "invalid_request")
	other := e.world()
	e.get(other.host, "/api/console/requests", viewer).want(403, "forbidden")

	// The operator reads any cluster's, from any host.
	op := e.operator()
	if tot := e.get("api."+baseDomain, "/api/operator/clusters/"+w.clusterID+"/requests", op).want(200, "").json()["totals"].(map[string]any); tot["429"] != float64(12) {
		t.Fatalf("operator's view %v", tot)
	}
	if r := e.get(w.host, "/api/operator/clusters/"+w.clusterID+"/requests", e.token(w.users["admin"])); r.Code != http.StatusNotFound {
		t.Fatalf("admin reading the operator route: %d", r.Code)
	}
}

// TestFleetMonthUsageFromDays: the fleet page's month totals take whole
// days from usage_days and minutes only for yesterday and today, the larger
// of the two per day, billable messages from pushes and transactions only;
// another month's rows count nowhere.
func TestFleetMonthUsageFromDays(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.OperatorAPI = true
		o.OperatorEnabled = true
		o.State = statusBlockState{o.State.(testState)}
	})
	// The 20th of last month, so that the month has days before yesterday.
	real := time.Now().UTC()
	month := time.Date(real.Year(), real.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, -1, 0)
	today := month.AddDate(0, 0, 19)
	e.clock.Store(today.Add(12 * time.Hour).UnixNano())
	w := e.world()
	op := e.operator()
	day := func(d time.Time) string { return d.Format("2006-01-02") }
	for _, r := range []struct {
		day  time.Time
		op   string
		msgs int64
		reqs int64
	}{
		{month.AddDate(0, 0, 4), "push", 100, 10},     // rolled up, its minutes too
		{month.AddDate(0, 0, 4), "delivery", 50, 5},   // requests count, messages do not
		{today.AddDate(0, 0, -1), "push", 30, 3},      // yesterday, rolled up part-way
		{month.AddDate(0, 0, -1), "push", 1000, 1000}, // last day of the month before
	} {
		e.exec(`INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs, reqs) VALUES ($1::uuid, $2::date, $3, $4, $5)`,
			w.clusterID, day(r.day), r.op, r.msgs, r.reqs)
	}
	for _, r := range []struct {
		at   time.Time
		op   string
		msgs int64
		reqs int64
	}{
		{month.AddDate(0, 0, 4).Add(time.Hour), "push", 100, 10}, // the day above's minutes: not twice
		{today.Add(-time.Hour), "push", 40, 4},                   // yesterday's minutes, more than its row
		{today.Add(time.Hour), "txn", 9, 1},                      // today
		{today.Add(2 * time.Hour), "read", 0, 2},                 // today
		{month.Add(-time.Minute), "push", 500, 500},              // the month before
	} {
		e.exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs) VALUES ($1::uuid, $2, $3, $4, $5)`,
			w.clusterID, r.at, r.op, r.msgs, r.reqs)
	}
	tenants := e.get(w.host, "/api/operator/tenants", op).want(200, "").json()
	if tenants["month"] != month.Format("2006-01") {
		t.Fatalf("month %v, want %s", tenants["month"], month.Format("2006-01"))
	}
	cl := find(t, find(t, tenants["tenants"], "id", w.tenantID)["clusters"], "id", w.clusterID)
	usage := cl["usage"].(map[string]any)
	// msgs: 100 (day 5) + 40 (yesterday's minutes) + 9 (today's txn).
	// reqs: 15 (day 5) + 4 (yesterday's minutes) + 3 (today).
	if usage["msgs"] != float64(149) || usage["reqs"] != float64(22) {
		t.Fatalf("usage %v, want msgs 149 and reqs 22", usage)
	}
	if cl["push_block"] != nil {
		t.Fatalf("push block %v of an active cluster", cl["push_block"])
	}
	// The push block is asked of the cluster's worst status: a tenant in
	// grace push-blocks every cluster it has.
	e.exec(`UPDATE queen_proxy.tenants SET status = 'grace' WHERE id = $1::uuid`, w.tenantID)
	tenants = e.get(w.host, "/api/operator/tenants", op).want(200, "").json()
	cl = find(t, find(t, tenants["tenants"], "id", w.tenantID)["clusters"], "id", w.clusterID)
	if cl["push_block"] != "billing" || cl["status"] != "push_blocked" {
		t.Fatalf("cluster of a tenant in grace %v, want push_block billing", cl)
	}
}

// statusBlockState reports a billing block for a push-blocked cluster, as
// the gateway does for a hold it did not measure itself.
type statusBlockState struct{ testState }

func (s statusBlockState) PushBlock(c *tenancy.Cluster) string {
	if c.Status == tenancy.StatusPushBlocked {
		return "billing"
	}
	return ""
}
