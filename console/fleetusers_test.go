package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// accountsEnv is a surface with the operator API, a cluster world and a
// live operator of a tenant of its own.
func accountsEnv(t *testing.T) (*env, world, string, string) {
	t.Helper()
	e := newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w := e.world()
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	return e, w, opID, opEmail
}

func (e *env) account(tok, email string) map[string]any {
	e.t.Helper()
	var doc struct {
		Users []map[string]any `json:"users"`
	}
	r := e.get("ops.test", "/api/operator/accounts", tok).want(http.StatusOK, "")
	if err := json.Unmarshal(r.Body.Bytes(), &doc); err != nil {
		e.t.Fatal(err)
	}
	for _, u := range doc.Users {
		if u["email"] == email {
			return u
		}
	}
	return nil
}

// The fleet's account routes answer a live operator on any host, without
// an acting cluster, and nobody else: to a cluster's admin, a signed-out
// caller or an API key they do not exist.
func TestFleetAccountsAreTheOperatorsAlone(t *testing.T) {
	e, w, opID, _ := accountsEnv(t)
	admin := e.token(w.users["admin"])
	_, key := e.apiKey(w.clusterID)
	for _, tok := range []string{admin, "", key} {
		e.get(w.host, "/api/operator/accounts", tok).want(http.StatusNotFound, "route_blocked")
		e.write("POST", w.host, "/api/operator/accounts", tok, `{"tenant":"x","email":"a@b.test"}`).want(http.StatusNotFound, "route_blocked")
		e.write("PUT", w.host, "/api/operator/accounts/"+w.users["viewer"]+"/operator", tok, `{"operator":true}`).want(http.StatusNotFound, "route_blocked")
		e.write("PUT", w.host, "/api/operator/accounts/"+w.users["viewer"]+"/roles/"+w.clusterID, tok, `{"role":"admin"}`).want(http.StatusNotFound, "route_blocked")
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE id = $1::uuid AND is_operator`, w.users["viewer"]); n != "0" {
		t.Fatal("a refused caller made a viewer an operator")
	}
	op := e.token(opID)
	u := e.account(op, w.emails["admin"])
	roles, _ := u["roles"].([]any)
	if u == nil || u["is_operator"] != false || u["created_from"] != "control_plane" || len(roles) != 1 ||
		roles[0].(map[string]any)["role"] != "admin" || roles[0].(map[string]any)["cluster_id"] != w.clusterID {
		t.Fatalf("the admin as the fleet lists it: %v", u)
	}
	if _, ok := u["last_login_at"]; !ok {
		t.Fatalf("the listing has no last sign-in: %v", u)
	}
	e.write("POST", "ops.test", "/api/operator/accounts/x", op, `{}`).want(http.StatusNotFound, "not_found")
	e.write("DELETE", "ops.test", "/api/operator/accounts/"+w.users["viewer"]+"/operator", op, "").want(http.StatusMethodNotAllowed, "")
}

// An operator creates accounts from the fleet: a customer's user with a
// role on one of the tenant's clusters, and another operator in the
// platform tenant; each in one transaction with the operator's audit row.
func TestFleetCreatesAccounts(t *testing.T) {
	e, w, opID, opEmail := accountsEnv(t)
	op := e.token(opID)
	tenantSlug := e.scalar(`SELECT slug FROM queen_proxy.tenants WHERE id = $1::uuid`, w.tenantID)
	customer := name("cust") + "@acme.test"
	r := e.write("POST", "ops.test", "/api/operator/accounts", op, fmt.Sprintf(
		`{"tenant":%q,"email":%q,"name":"Cust","password":"a long enough password","cluster":%q,"role":"producer"}`,
		tenantSlug, customer, w.clusterID)).want(http.StatusCreated, "").json()
	if r["tenant_id"] != w.tenantID || r["role"] != "producer" || r["is_operator"] != false {
		t.Fatalf("created %v", r)
	}
	u := e.account(op, customer)
	if u["created_from"] != "operator" || u["created_by"] != opEmail || u["has_password"] != true || u["name"] != "Cust" ||
		len(u["roles"].([]any)) != 1 {
		t.Fatalf("the new customer user as the fleet lists it: %v", u)
	}
	if n := e.countOps(w.clusterID, "operator_user_created", "user"); n != 1 {
		t.Fatalf("%d operator_user_created rows on the cluster, want 1", n)
	}
	// Its password signs in.
	if _, ok, err := e.s.checkPassword(e.ctx(), customer, "a long enough password"); err != nil || !ok {
		t.Fatalf("the new user's password does not verify: %v %v", ok, err)
	}

	// Another operator, with no tenant named: the platform tenant.
	second := name("op") + "@platform.test"
	r = e.write("POST", "ops.test", "/api/operator/accounts", op, fmt.Sprintf(`{"email":%q,"operator":true}`, second)).
		want(http.StatusCreated, "").json()
	if r["tenant_slug"] != "platform" || r["is_operator"] != true {
		t.Fatalf("created operator %v", r)
	}
	secondID := r["id"].(string)
	if !e.ids.IsOperator(e.ctx(), secondID) {
		t.Fatal("the new operator is not live")
	}
	e.get("ops.test", "/api/operator/accounts", e.token(secondID)).want(http.StatusOK, "")

	// Refusals change nothing.
	for _, tc := range []struct {
		body string
		code int
	}{
		{fmt.Sprintf(`{"tenant":%q,"email":%q}`, tenantSlug, customer), http.StatusConflict},
		{fmt.Sprintf(`{"email":%q}`, name("x")+"@acme.test"), http.StatusBadRequest},
		{fmt.Sprintf(`{"tenant":%q,"email":%q,"role":"admin"}`, tenantSlug, name("x")+"@acme.test"), http.StatusBadRequest},
		{fmt.Sprintf(`{"tenant":%q,"email":%q,"cluster":%q,"role":"boss"}`, tenantSlug, name("x")+"@acme.test", w.clusterID), http.StatusBadRequest},
		{fmt.Sprintf(`{"tenant":"platform","email":%q,"cluster":%q,"role":"admin"}`, name("x")+"@acme.test", w.clusterID), http.StatusNotFound},
		{fmt.Sprintf(`{"tenant":"no-such-tenant","email":%q}`, name("x")+"@acme.test"), http.StatusNotFound},
		{fmt.Sprintf(`{"tenant":%q,"email":%q,"password":"short"}`, tenantSlug, name("x")+"@acme.test"), http.StatusBadRequest},
	} {
		e.write("POST", "ops.test", "/api/operator/accounts", op, tc.body).want(tc.code, "")
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email LIKE 'x%@acme.test'`); n != "0" {
		t.Fatalf("%s users created by refused requests", n)
	}
}

// Roles on any cluster of the user's tenant, under the last-admin rule;
// the operator bit granted and withdrawn (never one's own), each audited.
func TestFleetSetsRolesAndTheOperatorBit(t *testing.T) {
	e, w, opID, _ := accountsEnv(t)
	op := e.token(opID)
	viewer := w.users["viewer"]
	rolePath := "/api/operator/accounts/" + viewer + "/roles/" + w.clusterID
	e.write("PUT", "ops.test", rolePath, op, `{"role":"consumer"}`).want(http.StatusOK, "")
	if got := e.scalar(`SELECT role FROM queen_proxy.cluster_roles WHERE user_id = $1::uuid AND cluster_id = $2::uuid`, viewer, w.clusterID); got != "consumer" {
		t.Fatalf("role after the grant: %s", got)
	}
	e.write("DELETE", "ops.test", rolePath, op, "").want(http.StatusOK, "")
	e.write("DELETE", "ops.test", rolePath, op, "").want(http.StatusNotFound, "not_found")
	e.write("DELETE", "ops.test", "/api/operator/accounts/"+w.users["admin"]+"/roles/"+w.clusterID, op, "").want(http.StatusBadRequest, "")
	if n := e.countOps(w.clusterID, "operator_role_granted", "user") + e.countOps(w.clusterID, "operator_role_revoked", "user"); n != 2 {
		t.Fatalf("%d role audit rows, want 2", n)
	}
	// A user of another tenant gets no role on this cluster.
	otherTenant, _ := e.tenant()
	stranger, _ := e.user(otherTenant, "")
	e.write("PUT", "ops.test", "/api/operator/accounts/"+stranger+"/roles/"+w.clusterID, op, `{"role":"viewer"}`).want(http.StatusNotFound, "not_found")

	bit := func(id string) string {
		return e.scalar(`SELECT is_operator::text FROM queen_proxy.users WHERE id = $1::uuid`, id)
	}
	opAudits := func(action, target string) string {
		return e.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE actor = 'user' AND actor_id = $1::uuid
			AND action = $2 AND target = $3`, opID, action, target)
	}
	r := e.write("PUT", "ops.test", "/api/operator/accounts/"+viewer+"/operator", op, `{"operator":true}`).want(http.StatusOK, "").json()
	if r["changed"] != true || bit(viewer) != "true" || opAudits("operator_bit_granted", viewer) != "1" {
		t.Fatalf("grant: %v, bit %s", r, bit(viewer))
	}
	if !e.ids.IsOperator(e.ctx(), viewer) {
		t.Fatal("the granted bit is not live at once")
	}
	r = e.write("PUT", "ops.test", "/api/operator/accounts/"+viewer+"/operator", op, `{"operator":true}`).want(http.StatusOK, "").json()
	if r["changed"] != false || opAudits("operator_bit_granted", viewer) != "1" {
		t.Fatalf("a grant of a bit held: %v", r)
	}
	e.write("PUT", "ops.test", "/api/operator/accounts/"+viewer+"/operator", op, `{"operator":false}`).want(http.StatusOK, "")
	if bit(viewer) != "false" || opAudits("operator_bit_revoked", viewer) != "1" || e.ids.IsOperator(e.ctx(), viewer) {
		t.Fatalf("withdrawal: bit %s", bit(viewer))
	}
	e.write("PUT", "ops.test", "/api/operator/accounts/"+opID+"/operator", op, `{"operator":false}`).want(http.StatusConflict, "conflict")
	e.write("PUT", "ops.test", "/api/operator/accounts/"+viewer+"/operator", op, `{}`).want(http.StatusBadRequest, "")
	if bit(opID) != "true" {
		t.Fatal("an operator withdrew their own bit")
	}
}

// The database refuses an operator whose bit was withdrawn where this
// gateway has not heard of it yet: 403, and nothing of the act remains.
// Browser writes need the CSRF rule like every other write.
func TestFleetAccountsAuthorityAndCSRF(t *testing.T) {
	e, w, opID, _ := accountsEnv(t)
	op := e.token(opID)
	e.get("ops.test", "/api/operator/accounts", op).want(http.StatusOK, "")
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("the cache dropped the bit without a notification; the test shows nothing")
	}
	victim := name("v") + "@acme.test"
	e.write("POST", "ops.test", "/api/operator/accounts", op, fmt.Sprintf(`{"email":%q,"operator":true}`, victim)).want(http.StatusForbidden, "forbidden")
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, victim); n != "0" {
		t.Fatal("a withdrawn operator created an account")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = true WHERE id = $1::uuid`, opID)
	e.ids.InvalidateAll()
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("operator bit not cached")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	e.write("PUT", "ops.test", "/api/operator/accounts/"+w.users["viewer"]+"/operator", op, `{"operator":true}`).want(http.StatusForbidden, "forbidden")
	if n := e.scalar(`SELECT is_operator::text FROM queen_proxy.users WHERE id = $1::uuid`, w.users["viewer"]); n != "false" {
		t.Fatal("a withdrawn operator granted the bit")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = true WHERE id = $1::uuid`, opID)
	e.ids.InvalidateAll()

	// A cookie session from a browser: without the console's header and
	// with another origin the write is refused; with them it passes.
	body := fmt.Sprintf(`{"email":%q,"operator":true}`, victim)
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts", cookie: op, body: body}).want(http.StatusForbidden, "csrf_rejected")
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts", cookie: op, body: body,
		header: map[string]string{"Origin": "https://evil.test", "X-Requested-With": "queengate"}}).want(http.StatusForbidden, "csrf_rejected")
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts", cookie: op, body: body,
		header: map[string]string{"Origin": "http://ops.test", "X-Requested-With": "queengate"}}).want(http.StatusCreated, "")
}

// Two operators withdrawing each other's bit at the same moment: one
// withdrawal lands, the other is refused because its caller no longer
// holds the bit, and neither ends in a database error (a deadlock of the
// two transactions, each holding the row the other checks, was a 500).
func TestOperatorsWithdrawingEachOtherAtOnce(t *testing.T) {
	e, _, aID, _ := accountsEnv(t)
	platform := e.scalar(`SELECT tenant_id::text FROM queen_proxy.users WHERE id = $1::uuid`, aID)
	bID, _ := e.user(platform, "")
	aTok, bTok := e.token(aID), e.token(bID)
	for round := 0; round < 20; round++ {
		e.exec(`SELECT queen_proxy.set_operator(email, true) FROM queen_proxy.users WHERE id IN ($1::uuid, $2::uuid)`, aID, bID)
		e.ids.InvalidateUsers()
		codes := make(chan int, 2)
		withdraw := func(tok, target string) {
			codes <- e.do(req{method: http.MethodPut, host: "ops.test", path: "/api/operator/accounts/" + target + "/operator",
				bearer: tok, body: `{"operator":false}`}).Code
		}
		go withdraw(aTok, bID)
		go withdraw(bTok, aID)
		c1, c2 := <-codes, <-codes
		if c1 > c2 {
			c1, c2 = c2, c1
		}
		// The loser is refused by the database (403) or, when the
		// winner's change reached the gateway first, no longer finds the
		// operator routes (404).
		if c1 != http.StatusOK || (c2 != http.StatusForbidden && c2 != http.StatusNotFound) {
			t.Fatalf("round %d: statuses %d and %d, want one 200 and one 403 or 404", round, c1, c2)
		}
		if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE id IN ($1::uuid, $2::uuid) AND is_operator`, aID, bID); n != "1" {
			t.Fatalf("round %d: %s of the two still operators, want 1", round, n)
		}
	}
}
