package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// inviteEnv is a surface with the operator API and e-mail through a real
// Mailpit, a cluster world and a live operator of a tenant of its own.
func inviteEnv(t *testing.T) (*mailEnv, mailWorld, string, string) {
	t.Helper()
	e := newMailEnv(t, func(o *Options) { o.OperatorAPI = true; o.OperatorEnabled = true })
	w := e.mailWorld()
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	return e, w, opID, opEmail
}

// fleetInvitations are the fleet's pending invitations to one cluster
// (other tests share the database).
func (e *env) fleetInvitations(tok, clusterID string) []map[string]any {
	e.t.Helper()
	var doc struct {
		Invitations []map[string]any `json:"invitations"`
	}
	r := e.get("ops.test", "/api/operator/accounts/invitations", tok).want(http.StatusOK, "")
	if err := json.Unmarshal(r.Body.Bytes(), &doc); err != nil || doc.Invitations == nil {
		e.t.Fatalf("fleet invitations %s: %v", r.Body.String(), err)
	}
	var out []map[string]any
	for _, i := range doc.Invitations {
		if i["cluster_id"] == clusterID {
			out = append(out, i)
		}
	}
	return out
}

// An operator invites an address to a customer's cluster from the fleet:
// the message arrives, accepting its link makes the account in the
// cluster's tenant with the role, audited as the operator's act.
func TestFleetInvitesByEmail(t *testing.T) {
	e, w, opID, opEmail := inviteEnv(t)
	op := e.token(opID)
	tenantSlug := e.scalar(`SELECT slug FROM queen_proxy.tenants WHERE id = $1::uuid`, w.tenantID)
	invitee := name("fi") + "@elsewhere.test"
	r := e.write("POST", "ops.test", "/api/operator/accounts/invitations", op,
		fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"producer"}`, invitee, w.slug)).want(http.StatusAccepted, "").json()
	if r["invited"] != true || r["email"] != invitee || r["cluster_id"] != w.clusterID || r["invitation_id"] == "" {
		t.Fatalf("fleet invitation answer %v", r)
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, invitee); n != "0" {
		t.Fatal("the invitation created the account before it was accepted")
	}
	list := e.fleetInvitations(op, w.clusterID)
	if len(list) != 1 || list[0]["id"] != r["invitation_id"] || list[0]["cluster_slug"] != w.slug ||
		list[0]["tenant_slug"] != tenantSlug || list[0]["invited_by"] != opEmail || list[0]["role"] != "producer" {
		t.Fatalf("fleet pending invitations %v", list)
	}
	// The cluster's admin sees the same invitation among the cluster's.
	if l := e.get(w.host, "/api/console/invitations", w.adminTok).want(http.StatusOK, "").list(); len(l) != 1 || l[0]["email"] != invitee {
		t.Fatalf("the cluster's pending invitations %v", l)
	}
	if n := e.countOps(w.clusterID, "operator_member_invited", "user"); n != 1 {
		t.Fatalf("%d operator_member_invited rows", n)
	}

	path, tok := linkIn(t, e.mp.Wait(t, invitee, 1, 15*time.Second))
	if path != "/auth/invitation" {
		t.Fatalf("invitation link path %s", path)
	}
	ok := e.form(path, url.Values{"token": {tok}, "password": {"a good long password"}}, "").want(http.StatusSeeOther, "")
	me := e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: setSession(ok), https: true}).want(http.StatusOK, "").json()
	if me["email"] != invitee || me["tenant_id"] != w.tenantID {
		t.Fatalf("the new session is %v, want %s in tenant %s", me, invitee, w.tenantID)
	}
	if role := e.scalar(`SELECT cr.role FROM queen_proxy.cluster_roles cr JOIN queen_proxy.users u ON u.id = cr.user_id
		WHERE u.email = $1 AND cr.cluster_id = $2::uuid`, invitee, w.clusterID); role != "producer" {
		t.Fatalf("the invitee's role is %q", role)
	}
	if l := e.fleetInvitations(op, w.clusterID); len(l) != 0 {
		t.Fatalf("an accepted invitation is still pending: %v", l)
	}

	// Refusals, like the member route's; none sends or keeps anything.
	for _, tc := range []struct {
		body, code string
		status     int
	}{
		{fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"viewer"}`, invitee, w.clusterID), "conflict", http.StatusConflict},
		{fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"viewer"}`, w.emails["viewer"], w.clusterID), "conflict", http.StatusConflict},
		{fmt.Sprintf(`{"email":"not-an-address","cluster":%q,"role":"viewer"}`, w.clusterID), "", http.StatusBadRequest},
		{fmt.Sprintf(`{"email":"x@elsewhere.test","cluster":%q,"role":"boss"}`, w.clusterID), "", http.StatusBadRequest},
		{`{"email":"x@elsewhere.test","role":"viewer"}`, "", http.StatusBadRequest},
		{`{"email":"x@elsewhere.test","cluster":"no-such-cluster","role":"viewer"}`, "not_found", http.StatusNotFound},
	} {
		e.write("POST", "ops.test", "/api/operator/accounts/invitations", op, tc.body).want(tc.status, tc.code)
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens WHERE purpose = 'invitation' AND cluster_id = $1::uuid`, w.clusterID); n != "1" {
		t.Fatalf("%s invitations stored, want the one accepted", n)
	}
}

// Only a live operator invites, lists and revokes from the fleet; a
// revoked invitation's link stops working, whoever sent it.
func TestFleetRevokesInvitations(t *testing.T) {
	e, w, opID, _ := inviteEnv(t)
	op := e.token(opID)
	body := fmt.Sprintf(`{"email":"nobody@elsewhere.test","cluster":%q,"role":"viewer"}`, w.clusterID)
	for _, tok := range []string{w.adminTok, w.viewerTok, ""} {
		e.write("POST", w.host, "/api/operator/accounts/invitations", tok, body).want(http.StatusNotFound, "route_blocked")
		e.get(w.host, "/api/operator/accounts/invitations", tok).want(http.StatusNotFound, "route_blocked")
	}
	// One sent by the cluster's admin, one by the operator.
	byAdmin := name("ba") + "@elsewhere.test"
	a := e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"`+byAdmin+`","role":"viewer"}`).want(http.StatusAccepted, "").json()
	byOp := name("bo") + "@elsewhere.test"
	o := e.write("POST", "ops.test", "/api/operator/accounts/invitations", op,
		fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"admin"}`, byOp, w.clusterID)).want(http.StatusAccepted, "").json()
	_, tokA := linkIn(t, e.mp.Wait(t, byAdmin, 1, 15*time.Second))
	_, tokO := linkIn(t, e.mp.Wait(t, byOp, 1, 15*time.Second))
	if l := e.fleetInvitations(op, w.clusterID); len(l) != 2 {
		t.Fatalf("fleet pending invitations %v", l)
	}
	for _, tok := range []string{w.adminTok, ""} {
		e.write("DELETE", w.host, "/api/operator/accounts/invitations/"+o["invitation_id"].(string), tok, "").want(http.StatusNotFound, "route_blocked")
	}
	e.page("/auth/invitation?token="+tokO).want(http.StatusOK, "")
	for _, inv := range []map[string]any{a, o} {
		e.write("DELETE", "ops.test", "/api/operator/accounts/invitations/"+inv["invitation_id"].(string), op, "").want(http.StatusOK, "")
		e.write("DELETE", "ops.test", "/api/operator/accounts/invitations/"+inv["invitation_id"].(string), op, "").want(http.StatusNotFound, "not_found")
	}
	e.write("DELETE", "ops.test", "/api/operator/accounts/invitations/not-a-uuid", op, "").want(http.StatusNotFound, "not_found")
	e.write("PUT", "ops.test", "/api/operator/accounts/invitations", op, "{}").want(http.StatusMethodNotAllowed, "")
	for _, tok := range []string{tokA, tokO} {
		e.page("/auth/invitation?token="+tok).want(http.StatusBadRequest, "")
		e.form("/auth/invitation", url.Values{"token": {tok}, "password": {"a good long password"}}, "").want(http.StatusBadRequest, "")
	}
	if l := e.fleetInvitations(op, w.clusterID); len(l) != 0 {
		t.Fatalf("revoked invitations pending: %v", l)
	}
	if n := e.countOps(w.clusterID, "operator_invitation_revoked", "user"); n != 2 {
		t.Fatalf("%d operator_invitation_revoked rows, want 2", n)
	}
}

// The database refuses an operator whose bit was withdrawn where this
// gateway has not heard of it yet: nothing is stored or sent. A browser's
// invitation needs the CSRF rule.
func TestFleetInviteAuthorityAndCSRF(t *testing.T) {
	e, w, opID, _ := inviteEnv(t)
	op := e.token(opID)
	kept := name("kept") + "@elsewhere.test"
	inv := e.write("POST", "ops.test", "/api/operator/accounts/invitations", op,
		fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"viewer"}`, kept, w.clusterID)).want(http.StatusAccepted, "").json()
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("the cache dropped the bit without a notification; the test shows nothing")
	}
	victim := name("v") + "@elsewhere.test"
	e.write("POST", "ops.test", "/api/operator/accounts/invitations", op,
		fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"admin"}`, victim, w.clusterID)).want(http.StatusForbidden, "forbidden")
	// The refusal dropped the cached bit; cache it again, then withdraw it
	// behind the cache's back once more.
	e.exec(`UPDATE queen_proxy.users SET is_operator = true WHERE id = $1::uuid`, opID)
	e.ids.InvalidateAll()
	if !e.ids.IsOperator(e.ctx(), opID) {
		t.Fatal("operator bit not cached")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = false WHERE id = $1::uuid`, opID)
	e.write("DELETE", "ops.test", "/api/operator/accounts/invitations/"+inv["invitation_id"].(string), op, "").want(http.StatusForbidden, "forbidden")
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens WHERE email = $1`, victim); n != "0" {
		t.Fatal("a withdrawn operator stored an invitation")
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens WHERE email = $1 AND revoked_at IS NULL`, kept); n != "1" {
		t.Fatal("a withdrawn operator revoked an invitation")
	}
	e.exec(`UPDATE queen_proxy.users SET is_operator = true WHERE id = $1::uuid`, opID)
	e.ids.InvalidateAll()
	// An invitation is sent before it is answered: a refused one sent nothing.
	if got := len(e.mp.To(t, victim)); got != 0 {
		t.Fatalf("%d messages to the refused invitation's address", got)
	}

	body := fmt.Sprintf(`{"email":%q,"cluster":%q,"role":"viewer"}`, victim, w.clusterID)
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts/invitations", cookie: op, body: body}).want(http.StatusForbidden, "csrf_rejected")
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts/invitations", cookie: op, body: body,
		header: map[string]string{"Origin": "https://evil.test", "X-Requested-With": "queengate"}}).want(http.StatusForbidden, "csrf_rejected")
	e.do(req{method: "POST", host: "ops.test", path: "/api/operator/accounts/invitations", cookie: op, body: body,
		header: map[string]string{"Origin": "http://ops.test", "X-Requested-With": "queengate"}}).want(http.StatusAccepted, "")
}

// An account an operator creates from the fleet (or the cell's user
// routes) for a typed address gets the verification link, as one created
// from a cluster's members does.
func TestFleetCreatedAccountVerifies(t *testing.T) {
	e, w, opID, _ := inviteEnv(t)
	tenantSlug := e.scalar(`SELECT slug FROM queen_proxy.tenants WHERE id = $1::uuid`, w.tenantID)
	addr := name("typed") + "@elsewhere.test"
	r := e.write("POST", "ops.test", "/api/operator/accounts", e.token(opID),
		fmt.Sprintf(`{"tenant":%q,"email":%q,"cluster":%q,"role":"viewer"}`, tenantSlug, addr, w.clusterID)).want(http.StatusCreated, "").json()
	if r["verification_email"] != "sent" {
		t.Fatalf("fleet create answer %v", r)
	}
	cellAddr := name("cell") + "@elsewhere.test"
	r = e.write("POST", w.host, "/api/operator/users", e.token(opID),
		fmt.Sprintf(`{"tenant_id":%q,"email":%q,"cluster_id":%q,"role":"viewer"}`, w.tenantID, cellAddr, w.clusterID)).want(http.StatusCreated, "").json()
	if r["verification_email"] != "sent" {
		t.Fatalf("cell user create answer %v", r)
	}
	if p, _ := linkIn(t, e.mp.Wait(t, cellAddr, 1, 15*time.Second)); p != "/auth/verify" {
		t.Fatalf("verification link path %s", p)
	}
	verified := func() string {
		return e.scalar(`SELECT (email_verified_at IS NOT NULL)::text FROM queen_proxy.users WHERE email = $1`, addr)
	}
	if verified() != "false" {
		t.Fatal("a typed address counts as verified")
	}
	path, tok := linkIn(t, e.mp.Wait(t, addr, 1, 15*time.Second))
	if path != "/auth/verify" {
		t.Fatalf("verification link path %s", path)
	}
	e.form(path, url.Values{"token": {tok}}, "").want(http.StatusOK, "")
	if verified() != "true" {
		t.Fatal("the verification link did not verify")
	}
}

// Without e-mail the fleet's invitation is refused with a clear code, and
// a created account is answered as sent no verification.
func TestFleetInviteMailOff(t *testing.T) {
	e, w, opID, _ := accountsEnv(t)
	op := e.token(opID)
	e.write("POST", "ops.test", "/api/operator/accounts/invitations", op,
		fmt.Sprintf(`{"email":"x@elsewhere.test","cluster":%q,"role":"viewer"}`, w.clusterID)).want(http.StatusServiceUnavailable, "not_configured")
	if l := e.fleetInvitations(op, w.clusterID); len(l) != 0 {
		t.Fatalf("pending invitations without e-mail: %v", l)
	}
	r := e.write("POST", "ops.test", "/api/operator/accounts", op, fmt.Sprintf(`{"email":%q,"operator":true}`, name("o")+"@platform.test")).
		want(http.StatusCreated, "").json()
	if r["verification_email"] != "off" {
		t.Fatalf("fleet create answer without e-mail %v", r)
	}
}
