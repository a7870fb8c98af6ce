package console

import (
	"testing"
)

// TestWithdrawnOperatorRefusedByTheDatabase: a gateway that has not (yet)
// heard of a withdrawal still holds the operator bit in its cache; the
// database refuses the act when it commits, the answer is 403, nothing of
// the act remains, and the gateway drops the stale bit.
func TestWithdrawnOperatorRefusedByTheDatabase(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w := e.world()
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	op := e.token(opID)
	keys := func() string {
		return e.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid`, w.clusterID)
	}
	fleetKey := func() resp {
		return e.write("POST", w.host, "/api/operator/clusters/"+w.clusterID+"/keys", op, `{"name":"fleet","scopes":["admin"]}`)
	}
	consoleKey := func() resp {
		return e.write("POST", w.host, "/api/console/keys", op, `{"name":"acting","scopes":["admin"]}`)
	}
	fleetKey().want(201, "")
	consoleKey().want(201, "")
	before := keys()

	// This test's cache hears no notification: the bit stays cached.
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("the cache dropped the bit without a notification; the test shows nothing")
	}
	r := fleetKey().want(403, "forbidden")
	if s := r.json()["error"].(string); s != errStandingWithdrawn.Message {
		t.Fatalf("refusal %q", s)
	}
	if got := keys(); got != before {
		t.Fatalf("%s keys after the refused mint, want %s", got, before)
	}
	if e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("the refusal left the stale operator bit cached")
	}
	// Cached once more as an operator, as acting admin in the console.
	e.exec(`UPDATE queen_proxy.users SET is_operator = true WHERE id = $1::uuid`, opID)
	e.ids.InvalidateAll()
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("operator bit not cached")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	consoleKey().want(403, "forbidden")
	e.write("POST", w.host, "/api/operator/clusters/"+w.clusterID+"/suspend", op, "").want(404, "route_blocked")
	if got := keys(); got != before {
		t.Fatalf("%s keys after the refused console mint, want %s", got, before)
	}
	if st := e.scalar(`SELECT status FROM queen_proxy.clusters WHERE id = $1::uuid`, w.clusterID); st != "active" {
		t.Fatalf("cluster %s after the refused suspend", st)
	}
}

// TestAdminMayStepDown: the database checks an admin's role where the
// change is audited, before the change, so an admin can still demote or
// remove themselves while another admin remains.
func TestAdminMayStepDown(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	second, secondEmail := e.user(w.tenantID, "")
	e.grant(w.clusterID, secondEmail, "admin")
	tok := e.token(second)
	e.write("PATCH", w.host, "/api/console/members", tok, `{"email":"`+secondEmail+`","role":"viewer"}`).want(200, "")
	e.grant(w.clusterID, secondEmail, "admin")
	e.write("DELETE", w.host, "/api/console/members", tok, `{"email":"`+secondEmail+`"}`).want(200, "")
	if n := e.countOps(w.clusterID, "console_member_revoked", "user"); n != 1 {
		t.Fatalf("%d console_member_revoked rows, want 1", n)
	}
	// Demoted, the next change is refused by the gateway and would be by
	// the database.
	e.write("PATCH", w.host, "/api/console/members", tok, `{"email":"`+w.emails["viewer"]+`","role":"consumer"}`).want(403, "forbidden")
}
