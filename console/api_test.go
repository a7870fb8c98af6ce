package console

import (
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// TestOverviewAndUsage reads meter rows back per minute and per day, and
// the month's billable messages (pushes and transactions, not deliveries).
func TestOverviewAndUsage(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	now := time.Now().UTC()
	minute := now.Truncate(time.Minute).Add(-2 * time.Minute)
	old := now.Add(-30 * time.Hour).Truncate(time.Minute)
	for _, row := range []struct {
		at   time.Time
		op   string
		msgs int64
	}{
		{minute, "push", 30}, {minute, "delivery", 25}, {minute.Add(-time.Minute), "txn", 5}, {old, "push", 7},
	} {
		e.exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2, $3, $4, 1, 100, 200)`, w.clusterID, row.at, row.op, row.msgs)
	}
	// A rolled-up day long ago, inside the default 30 days.
	day := now.AddDate(0, 0, -10)
	e.exec(`INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out)
		VALUES ($1::uuid, $2::date, 'push', 1000, 10, 1, 1)`, w.clusterID, day)
	viewer := e.token(w.users["viewer"])

	u := e.get(w.host, "/api/console/usage", viewer).want(200, "").json()
	if u["hours"] != float64(24) || u["days"] != float64(30) {
		t.Fatalf("defaults %v %v", u["hours"], u["days"])
	}
	minutes := u["minutes"].([]any)
	if len(minutes) != 3 {
		t.Fatalf("minutes %v", minutes)
	}
	first := minutes[0].(map[string]any)
	if first["op"] != "txn" || first["minute"] != minute.Add(-time.Minute).Format(time.RFC3339) || first["msgs"] != float64(5) {
		t.Fatalf("first minute row %v", first)
	}
	if tot := u["totals"].(map[string]any); tot["msgs"] != float64(60) || tot["reqs"] != float64(3) || tot["bytes_out"] != float64(600) {
		t.Fatalf("totals %v", tot)
	}
	daily := u["daily"].([]any)
	var pushToday, pushOld float64
	for _, d := range daily {
		m := d.(map[string]any)
		switch {
		// The day of the pushes' minute, not of now: two minutes after
		// midnight they are yesterday's.
		case m["day"] == minute.Format(time.DateOnly) && m["op"] == "push":
			pushToday = m["msgs"].(float64)
		case m["day"] == day.Format(time.DateOnly) && m["op"] == "push":
			pushOld = m["msgs"].(float64)
		}
	}
	if pushOld != 1000 || (pushToday != 30 && pushToday != 37) {
		t.Fatalf("daily %v", daily)
	}
	// A wider window includes the older minute; values are clamped.
	u = e.get(w.host, "/api/console/usage?hours=9999&days=0", viewer).want(200, "").json()
	if len(u["minutes"].([]any)) != 4 || u["hours"] != float64(168) || u["days"] != float64(1) {
		t.Fatalf("wide window: %d minutes, hours %v days %v", len(u["minutes"].([]any)), u["hours"], u["days"])
	}

	// The meter's unwritten usage joins in: the open minute, and a minute
	// the table has part of.
	open := now.Truncate(time.Minute)
	e.live = []meter.Unflushed{
		{Minute: open, Op: meter.OpPush, Reqs: 1, Msgs: 4},
		{Minute: minute, Op: meter.OpPush, Reqs: 1, Msgs: 1},
		{Minute: open, Op: meter.OpDelivery, Reqs: 1, Msgs: 9},
	}
	u = e.get(w.host, "/api/console/usage", viewer).want(200, "").json()
	minutes = u["minutes"].([]any)
	if len(minutes) != 5 {
		t.Fatalf("minutes with live rows %v", minutes)
	}
	last := minutes[len(minutes)-1].(map[string]any)
	if last["minute"] != open.Format(time.RFC3339) || last["op"] != "push" || last["msgs"] != float64(4) || last["live"] != true {
		t.Fatalf("open minute row %v", last)
	}
	for _, m := range minutes {
		row := m.(map[string]any)
		if row["minute"] == minute.Format(time.RFC3339) && row["op"] == "push" && (row["msgs"] != float64(31) || row["live"] != true) {
			t.Fatalf("merged row %v", row)
		}
	}
	// Billable: the pushes (31 and the open minute's 4) and the
	// transaction's 5; the 34 deliveries are counted, not billed.
	if tot := u["totals"].(map[string]any); tot["msgs"] != float64(74) || tot["billable_msgs"] != float64(40) {
		t.Fatalf("totals with live rows %v", tot)
	}
	// Both live rows are today's unless the minute before last is yesterday's.
	if minute.Day() == now.Day() {
		for _, d := range u["daily"].([]any) {
			row := d.(map[string]any)
			if row["day"] == now.Format(time.DateOnly) && row["op"] == "push" && row["msgs"] != pushToday+5 {
				t.Fatalf("today's push with live rows %v, want %v", row, pushToday+5)
			}
		}
	}

	o := e.get(w.host, "/api/console/overview", viewer).want(200, "").json()
	usage := o["usage"].(map[string]any)
	// This month's pushes and transactions, written and live; on the 1st
	// just after midnight some of them are last month's.
	inMonth := func(at time.Time) bool { return at.Year() == now.Year() && at.Month() == now.Month() }
	wantMsgs := 4.0 // the open minute's live push
	if inMonth(minute) {
		wantMsgs += 30 + 1 // written and live pushes of that minute
	}
	if inMonth(minute.Add(-time.Minute)) {
		wantMsgs += 5
	}
	if inMonth(old) {
		wantMsgs += 7
	}
	if inMonth(day) {
		wantMsgs += 1000
	}
	if usage["month"] != now.Format("2006-01") || usage["msgs"] != wantMsgs || usage["billable_msgs"] != wantMsgs {
		t.Fatalf("usage %v, want %v billable msgs (also under msgs)", usage, wantMsgs)
	}
	if o["status"] != "active" || o["role"] != "viewer" || o["push_block"] != nil || o["slug"] != strings.TrimSuffix(w.host, "."+baseDomain) {
		t.Fatalf("overview %v", o)
	}
	// Internal gateway names are for operators only.
	if o["gateway"] != nil {
		t.Fatalf("a viewer's overview names the serving gateway %v", o["gateway"])
	}
	ops := newEnv(t, func(o *Options) { o.OperatorEnabled = true })
	opWorld := ops.world()
	opView := ops.get(opWorld.host, "/api/console/overview", ops.operator()).want(200, "").json()
	if gw, _ := opView["gateway"].(map[string]any); gw["name"] != "gw-test" || gw["role"] != "leader" {
		t.Fatalf("an operator's overview gateway %v, want the serving gateway gw-test", opView["gateway"])
	}
	if ops.get(opWorld.host, "/api/console/overview", ops.token(opWorld.users["admin"])).want(200, "").json()["gateway"] != nil {
		t.Fatal("a cluster admin's overview names the serving gateway")
	}
	plan := o["plan"].(map[string]any)
	if plan["code"] != "pro" || plan["monthly_msgs_quota"] != nil {
		t.Fatalf("plan %v", plan)
	}
	lim := o["limits"].(map[string]any)
	if lim["max_queues"] != float64(200) || len(lim) != 11 {
		t.Fatalf("limits %v", lim)
	}
	if f := o["features"].(map[string]any); f["streams"] != true || f["kv"] != true {
		t.Fatalf("features %v", f)
	}
	// Overrides: a quota number, and unlimited queues.
	e.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"monthly_msgs_quota": 5000, "max_queues": null}')`, w.clusterID)
	e.cache.InvalidateCluster(w.clusterID)
	o = e.get(w.host, "/api/console/overview", viewer).want(200, "").json()
	if o["plan"].(map[string]any)["monthly_msgs_quota"] != float64(5000) || o["limits"].(map[string]any)["max_queues"] != nil {
		t.Fatalf("overridden overview %v", o)
	}
}

func TestQueues(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	viewer := e.token(w.users["viewer"])
	r := e.get(w.host, "/api/console/queues", viewer).want(200, "").json()
	if len(r["queues"].([]any)) != 0 {
		t.Fatalf("queues %v", r)
	}
	bt := e.scalar(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE id = $1::uuid`, w.clusterID)
	push, _ := http.NewRequest("POST", e.broker.URL+"/api/v1/push",
		strings.NewReader(`{"items":[{"queue":"orders","partition":"p1","payload":{"n":1}},{"queue":"orders","partition":"p2","payload":{"n":2}}]}`))
	push.Header.Set("Content-Type", "application/json")
	push.Header.Set("x-queen-tenant", bt)
	pr, err := http.DefaultClient.Do(push)
	if err != nil {
		t.Fatal(err)
	}
	pr.Body.Close()
	r = e.get(w.host, "/api/console/queues", viewer).want(200, "").json()
	qs := r["queues"].([]any)
	if len(qs) != 1 {
		t.Fatalf("queues %v", r)
	}
	q := qs[0].(map[string]any)
	if q["name"] != "orders" || q["partitions"].(float64) < 1 || q["retained_bytes"] == nil || r["retained_bytes"] == nil {
		t.Fatalf("queue %v", q)
	}
	// Another cluster of the same cell sees none of them.
	other, otherHost := e.cluster(w.tenantID)
	_, email := e.user(w.tenantID, "")
	e.grant(other, email, "viewer")
	uid := e.scalar(`SELECT id::text FROM queen_proxy.users WHERE email = $1`, email)
	if n := len(e.get(otherHost, "/api/console/queues", e.token(uid)).want(200, "").json()["queues"].([]any)); n != 0 {
		t.Fatalf("the other cluster sees %d queues", n)
	}
	// A cell that does not answer.
	e.broker.Close()
	e.get(w.host, "/api/console/queues", viewer).want(502, "bad_gateway")
}

func TestConsoleApp(t *testing.T) {
	app := fstest.MapFS{
		"index.html":         {Data: []byte("<!doctype html><title>app</title>")},
		"assets/app-1a2b.js": {Data: []byte("console.log(1)")},
		"favicon.svg":        {Data: []byte("<svg/>")},
	}
	e := newEnv(t, func(o *Options) { o.App = app })
	w := e.world()
	tok := e.token(w.users["viewer"])
	nav := map[string]string{"Sec-Fetch-Mode": "navigate"}

	r := e.do(req{method: "GET", host: w.host, path: "/console/keys?tab=1", header: nav}).want(302, "")
	if loc := r.Header().Get("Location"); loc != "/auth/login?next=%2Fconsole%2Fkeys%3Ftab%3D1" || r.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("redirect %q %q", loc, r.Header().Get("Cache-Control"))
	}
	_, key := e.apiKey(w.clusterID)
	e.do(req{method: "GET", host: w.host, path: "/console/", bearer: key}).want(302, "")
	e.do(req{method: "GET", host: w.host, path: "/console/", cookie: "garbage", header: nav}).want(302, "")

	for path, want := range map[string]string{
		"/console": "<title>app</title>", "/console/": "<title>app</title>", "/console/members/x": "<title>app</title>",
		"/console/assets/app-1a2b.js": "console.log(1)", "/console/favicon.svg": "<svg/>",
		"/console/../console/": "<title>app</title>",
	} {
		r := e.do(req{method: "GET", host: w.host, path: path, cookie: tok, header: nav}).want(200, "")
		if !strings.Contains(r.Body.String(), want) {
			t.Fatalf("%s: %q", path, r.Body.String())
		}
		cc := r.Header().Get("Cache-Control")
		if strings.Contains(path, "/assets/") {
			if cc != "private, max-age=31536000, immutable" {
				t.Fatalf("%s: cache-control %q", path, cc)
			}
			if !strings.Contains(r.Header().Get("Content-Type"), "javascript") {
				t.Fatalf("%s: content-type %q", path, r.Header().Get("Content-Type"))
			}
		} else if cc != "private, no-cache" {
			t.Fatalf("%s: cache-control %q", path, cc)
		}
		if strings.HasSuffix(want, "</title>") && !strings.Contains(r.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("%s: CSP %q", path, r.Header().Get("Content-Security-Policy"))
		}
	}
	e.do(req{method: "GET", host: w.host, path: "/console/assets/gone.js", cookie: tok}).want(404, "not_found")
	e.do(req{method: "GET", host: w.host, path: "/console/js/gone.js", cookie: tok}).want(404, "not_found")
	e.do(req{method: "GET", host: w.host, path: "/console/keys.v2", cookie: tok}).want(404, "not_found")
	e.do(req{method: "POST", host: w.host, path: "/console/", cookie: tok, header: map[string]string{"Origin": "http://" + w.host}}).want(405, "invalid_request")
	// Without an app, a placeholder page.
	e2 := newEnv(t)
	r = e2.do(req{method: "GET", host: w.host, path: "/console/", cookie: tok}).want(200, "")
	if !strings.Contains(r.Body.String(), "not part of this build") {
		t.Fatalf("placeholder %s", r.Body.String())
	}
}

// TestOperatorAPI: off unless configured and for live operators only; the
// acting cluster's cell bounds what it sees and changes.
func TestOperatorAPI(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	op := e.token(opID)
	e.get(w.host, "/api/operator/users", op).want(404, "route_blocked") // not configured

	e = newEnv(t, func(o *Options) { o.OperatorAPI = true })
	e.get(w.host, "/api/operator/users", op).want(404, "route_blocked") // operator bits not live

	e = newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w = e.world()
	e.get(w.host, "/api/operator/users", e.token(w.users["admin"])).want(404, "route_blocked")
	e.get(w.host, "/api/operator/users", "").want(404, "route_blocked")
	_, key := e.apiKey(w.clusterID)
	e.get(w.host, "/api/operator/users", key).want(404, "route_blocked")

	list := e.get(w.host, "/api/operator/users", op).want(200, "").json()
	if list["cell"].(map[string]any)["id"] != e.cellID {
		t.Fatalf("cell %v", list["cell"])
	}
	var found map[string]any
	for _, u := range list["users"].([]any) {
		if m := u.(map[string]any); m["id"] == w.users["admin"] {
			found = m
		}
	}
	if found == nil || len(found["roles"].([]any)) != 1 || found["has_local_password"] != false {
		t.Fatalf("admin in the listing: %v", found)
	}
	// Acting on a cluster by header works on any host.
	slug := strings.TrimSuffix(w.host, "."+baseDomain)
	e.do(req{method: "GET", host: "api." + baseDomain, path: "/api/operator/users", bearer: op,
		header: map[string]string{"X-Queen-Act-Cluster": slug}}).want(200, "")

	newEmail := name("opnew") + "@acme.test"
	body := `{"tenant_id":"` + w.tenantID + `","email":"` + newEmail + `","name":"New Person","provider":"local","password":"a long enough password","cluster_id":"` + w.clusterID + `","role":"producer"}`
	created := e.write("POST", w.host, "/api/operator/users", op, body).want(201, "").json()
	newID := created["id"].(string)
	if created["role"] != "producer" || created["name"] != "New Person" {
		t.Fatalf("created %v", created)
	}
	if h := e.scalar(`SELECT password_hash FROM queen_proxy.users WHERE id = $1::uuid`, newID); !strings.HasPrefix(h, "$argon2id$") {
		t.Fatalf("stored hash %q, want argon2id", h[:12])
	}
	e.login(w.host, newEmail, "a long enough password", "/").want(303, "")
	e.write("POST", w.host, "/api/operator/users", op, body).want(409, "conflict")
	short := strings.Replace(body, "a long enough password", "short", 1)
	e.write("POST", w.host, "/api/operator/users", op, strings.Replace(short, newEmail, "x"+newEmail, 1)).want(400, "invalid_request")
	// A cluster of another tenant, or on another cell, is not found.
	otherTenant, _ := e.tenant()
	otherCluster, _ := e.cluster(otherTenant)
	bad := strings.Replace(strings.Replace(body, w.clusterID, otherCluster, 1), newEmail, "y"+newEmail, 1)
	e.write("POST", w.host, "/api/operator/users", op, bad).want(404, "not_found")

	e.write("PATCH", w.host, "/api/operator/users/"+newID, op, `{"name":"Renamed"}`).want(200, "")
	if e.scalar(`SELECT name FROM queen_proxy.users WHERE id = $1::uuid`, newID) != "Renamed" {
		t.Fatal("not renamed")
	}
	e.write("PUT", w.host, "/api/operator/users/"+newID+"/roles/"+w.clusterID, op, `{"role":"admin"}`).want(200, "")
	e.write("PUT", w.host, "/api/operator/users/"+w.users["admin"]+"/roles/"+w.clusterID, op, `{"role":"viewer"}`).want(200, "")
	e.write("DELETE", w.host, "/api/operator/users/"+newID+"/roles/"+w.clusterID, op, "").want(400, "invalid_request")
	e.write("PUT", w.host, "/api/operator/users/"+newID+"/roles/"+w.clusterID, op, `{"role":"viewer"}`).want(400, "invalid_request")
	e.write("DELETE", w.host, "/api/operator/users/"+w.users["nonmember"]+"/roles/"+w.clusterID, op, "").want(404, "not_found")
	e.write("DELETE", w.host, "/api/operator/users/"+w.users["viewer"]+"/roles/"+w.clusterID, op, "").want(200, "")
	if n := e.countOps(w.clusterID, "operator_role_granted", "user"); n != 2 {
		t.Fatalf("%d operator_role_granted rows", n)
	}
	if n := e.countOps(w.clusterID, "operator_user_created", "user"); n != 1 {
		t.Fatalf("%d operator_user_created rows", n)
	}
}

// TestBootstrapIsIdempotent: a second run finds everything and changes
// nothing; the admin logs in with the password, the known key works.
func TestBootstrapIsIdempotent(t *testing.T) {
	e := newEnv(t)
	slug := name("boot")
	known, _, err := tenancy.NewAPIKey("env")
	if err != nil {
		t.Fatal(err)
	}
	cfg := BootstrapConfig{Tenant: slug, Email: slug + "@acme.test", Password: "bootstrap password", Plan: "free", Cell: e.cell, APIKey: known}
	first, err := Bootstrap(e.ctx(), e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.GeneratedKey == "" || !first.KnownKeyIssued || !first.PasswordSet || !first.CanLogin || first.ClusterID == "" {
		t.Fatalf("first run %+v", first)
	}
	cfg.Password = "a different password"
	second, err := Bootstrap(e.ctx(), e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if second.TenantID != first.TenantID || second.ClusterID != first.ClusterID || second.UserID != first.UserID ||
		second.GeneratedKey != "" || second.KnownKeyIssued {
		t.Fatalf("second run %+v after %+v", second, first)
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid`, first.ClusterID); n != "2" {
		t.Fatalf("%s keys, want the generated and the known one", n)
	}
	k, err := e.cache.APIKey(e.ctx(), known)
	if err != nil || k.Cluster.ID != first.ClusterID || k.Scopes != tenancy.AllScopes {
		t.Fatalf("known key %+v %v", k, err)
	}
	host := slug + "." + baseDomain
	// The password is the first run's: an existing user's is never changed.
	e.login(host, slug+"@acme.test", "a different password", "/").want(401, "")
	c := sessionCookie(t, e.login(host, slug+"@acme.test", "bootstrap password", "/console/").want(303, ""))
	o := e.do(req{method: "GET", host: host, path: "/api/console/overview", cookie: c.Value}).want(200, "").json()
	if o["role"] != "admin" || o["plan"].(map[string]any)["code"] != "free" {
		t.Fatalf("overview %v", o)
	}
	// Errors: a known key of another cluster, an unknown cell.
	other := BootstrapConfig{Tenant: name("boot"), Cell: e.cell, APIKey: known}
	if _, err := Bootstrap(e.ctx(), e.pool, other); err == nil || !strings.Contains(err.Error(), "another cluster") {
		t.Fatalf("known key reused: %v", err)
	}
	if _, err := Bootstrap(e.ctx(), e.pool, BootstrapConfig{Tenant: name("boot"), Cell: "no-such-cell"}); err == nil {
		t.Fatal("unknown cell accepted")
	}
	if _, err := Bootstrap(e.ctx(), e.pool, BootstrapConfig{}); err == nil {
		t.Fatal("no tenant accepted")
	}
}
