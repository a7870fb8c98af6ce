package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// world is one tenant with a cluster, an admin, and a member of each role.
type world struct {
	tenantID, clusterID, host string
	users                     map[string]string // role -> user id
	emails                    map[string]string // role -> e-mail
}

func (e *env) world() world {
	e.t.Helper()
	w := world{users: map[string]string{}, emails: map[string]string{}}
	w.tenantID, _ = e.tenant()
	w.clusterID, w.host = e.cluster(w.tenantID)
	for _, role := range []string{"admin", "producer", "consumer", "viewer"} {
		id, email := e.user(w.tenantID, "")
		e.grant(w.clusterID, email, role)
		w.users[role], w.emails[role] = id, email
	}
	id, email := e.user(w.tenantID, "")
	w.users["nonmember"], w.emails["nonmember"] = id, email
	return w
}

// TestConsoleRoleMatrix calls every console route as every kind of
// caller: reads are for any member, keys and members for admins, nothing
// for non-members; a live operator is admin everywhere, an operator bit
// without operator_enabled is nothing.
func TestConsoleRoleMatrix(t *testing.T) {
	for _, operatorEnabled := range []bool{true, false} {
		e := newEnv(t, func(o *Options) { o.OperatorEnabled = operatorEnabled })
		w := e.world()
		otherTenant, _ := e.tenant()
		opID, opEmail := e.user(otherTenant, "")
		e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
		callers := map[string]string{"operator": opID}
		for role, id := range w.users {
			callers[role] = id
		}
		type route struct {
			name        string
			adminOnly   bool
			call        func(tok string) resp
			successCode int
		}
		routes := []route{
			{"GET overview", false, func(tok string) resp { return e.get(w.host, "/api/console/overview", tok) }, 200},
			{"GET connect", false, func(tok string) resp { return e.get(w.host, "/api/console/connect", tok) }, 200},
			{"GET usage", false, func(tok string) resp { return e.get(w.host, "/api/console/usage?hours=2", tok) }, 200},
			{"GET queues", false, func(tok string) resp { return e.get(w.host, "/api/console/queues", tok) }, 200},
			{"GET requests", false, func(tok string) resp { return e.get(w.host, "/api/console/requests?hours=2", tok) }, 200},
			{"GET keys", true, func(tok string) resp { return e.get(w.host, "/api/console/keys", tok) }, 200},
			{"POST keys", true, func(tok string) resp {
				return e.write("POST", w.host, "/api/console/keys", tok, `{"name":"k","scopes":["read"]}`)
			}, 201},
			{"DELETE keys", true, func(tok string) resp {
				id, _ := e.apiKey(w.clusterID)
				return e.write("DELETE", w.host, "/api/console/keys/"+id, tok, "")
			}, 200},
			{"GET members", true, func(tok string) resp { return e.get(w.host, "/api/console/members", tok) }, 200},
			{"POST members", true, func(tok string) resp {
				_, email := e.user(w.tenantID, "")
				return e.write("POST", w.host, "/api/console/members", tok, `{"email":"`+email+`","role":"viewer"}`)
			}, 200},
			{"PATCH members", true, func(tok string) resp {
				_, email := e.user(w.tenantID, "")
				e.grant(w.clusterID, email, "viewer")
				return e.write("PATCH", w.host, "/api/console/members", tok, `{"email":"`+email+`","role":"consumer"}`)
			}, 200},
			{"DELETE members", true, func(tok string) resp {
				_, email := e.user(w.tenantID, "")
				e.grant(w.clusterID, email, "viewer")
				return e.write("DELETE", w.host, "/api/console/members", tok, `{"email":"`+email+`"}`)
			}, 200},
		}
		for who, userID := range callers {
			tok := e.token(userID)
			for _, rt := range routes {
				var want int
				var code string
				switch {
				case who == "nonmember" || (who == "operator" && !operatorEnabled):
					want, code = 403, "forbidden"
				case who == "admin" || who == "operator" || !rt.adminOnly:
					want = rt.successCode
				default:
					want, code = 403, "forbidden"
				}
				r := rt.call(tok)
				if r.Code != want {
					t.Fatalf("operator_enabled=%v %s as %s: status %d, want %d; %s", operatorEnabled, rt.name, who, r.Code, want, r.Body.String())
				}
				if code != "" {
					r.want(want, code)
				}
			}
		}
	}
}

func TestConsoleRefusesAPIKeysAndStrangers(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	_, key := e.apiKey(w.clusterID)
	r := e.get(w.host, "/api/console/overview", key).want(403, "forbidden")
	if !strings.Contains(r.json()["error"].(string), "api keys cannot access the console") {
		t.Fatalf("message %s", r.Body.String())
	}
	e.get(w.host, "/api/console/overview", "qk_live_unknown").want(403, "forbidden")
	e.get(w.host, "/api/console/overview", "").want(401, "unauthorized")
	e.get(w.host, "/api/console/overview", "not-a-jwt").want(401, "unauthorized")
	e.get("nope."+baseDomain, "/api/console/overview", e.token(w.users["admin"])).want(421, "cluster_unknown")
	e.get("elsewhere.example", "/api/console/overview", e.token(w.users["admin"])).want(421, "cluster_unknown")
	// A member of another cluster of the same tenant has no role here.
	other, otherHost := e.cluster(w.tenantID)
	_, email := e.user(w.tenantID, "")
	e.grant(other, email, "admin")
	e.get(w.host, "/api/console/overview", e.token(w.users["nonmember"])).want(403, "forbidden")
	e.get(otherHost, "/api/console/overview", e.token(w.users["admin"])).want(403, "forbidden")
	// A user deleted while its session lives: the session is no longer valid.
	uid, uemail := e.user(w.tenantID, "")
	e.grant(w.clusterID, uemail, "viewer")
	tok := e.token(uid)
	e.get(w.host, "/api/console/overview", tok).want(200, "")
	e.exec(`DELETE FROM queen_proxy.users WHERE id = $1::uuid`, uid)
	e.ids.InvalidateCluster(w.clusterID)
	e.get(w.host, "/api/console/overview", tok).want(401, "unauthorized")
	// Unknown routes and methods.
	e.get(w.host, "/api/console/nope", e.token(w.users["admin"])).want(404, "not_found")
	e.write("PUT", w.host, "/api/console/overview", e.token(w.users["admin"]), "").want(405, "invalid_request")
	// The session needs keys to exist at all.
	e2 := newEnv(t, func(o *Options) { o.Sessions = nil })
	e2.get(w.host, "/api/console/overview", "x").want(503, "not_configured")
}

// TestConsoleLastAdmin: the only admin cannot demote or remove itself (or
// be demoted or removed); with a second admin it can.
func TestConsoleLastAdmin(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	admin := e.token(w.users["admin"])
	me := w.emails["admin"]
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"`+me+`","role":"viewer"}`).want(400, "invalid_request")
	e.write("PATCH", w.host, "/api/console/members", admin, `{"email":"`+me+`","role":"producer"}`).want(400, "invalid_request")
	r := e.write("DELETE", w.host, "/api/console/members", admin, `{"email":"`+me+`"}`).want(400, "invalid_request")
	if !strings.Contains(r.json()["error"].(string), "last admin") {
		t.Fatalf("message %s", r.Body.String())
	}
	// Re-granting admin to the last admin is fine.
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"`+me+`","role":"admin"}`).want(200, "")
	// A second admin; now the first may step down, and then the second
	// is the last one.
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"`+w.emails["viewer"]+`","role":"admin"}`).want(200, "")
	e.write("PATCH", w.host, "/api/console/members", admin, `{"email":"`+me+`","role":"viewer"}`).want(200, "")
	second := e.token(w.users["viewer"])
	e.write("DELETE", w.host, "/api/console/members", second, `{"email":"`+w.emails["viewer"]+`"}`).want(400, "invalid_request")
	e.write("DELETE", w.host, "/api/console/members", second, `{"email":"`+me+`"}`).want(200, "")
	// The demoted first admin is gone from the cluster and cannot act.
	e.get(w.host, "/api/console/members", admin).want(403, "forbidden")
	var admins int
	if err := e.pool.QueryRow(e.ctx(), `SELECT count(*) FROM queen_proxy.cluster_roles WHERE cluster_id = $1::uuid AND role = 'admin'`,
		w.clusterID).Scan(&admins); err != nil || admins != 1 {
		t.Fatalf("admins = %d (%v), want 1", admins, err)
	}
}

// TestConsoleKeys: create (plaintext once), list (no hash), revoke; a key
// of another cluster cannot be revoked from here; every write audited.
func TestConsoleKeys(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	admin := e.token(w.users["admin"])
	r := e.write("POST", w.host, "/api/console/keys", admin, `{"name":"  ingest ","scopes":["produce","consume","produce"]}`).want(201, "")
	created := r.json()
	key, _ := created["key"].(string)
	if !strings.HasPrefix(key, "qk_live_") || len(key) != len("qk_live_")+43 || created["name"] != "ingest" {
		t.Fatalf("created %v", created)
	}
	if got := created["scopes"].([]any); len(got) != 2 {
		t.Fatalf("scopes %v, want produce and consume once each", got)
	}
	id := created["id"].(string)
	// The key works at once (the cache reads it from the database).
	k, err := e.cache.APIKey(e.ctx(), key)
	if err != nil || k.ID != id || k.Cluster.ID != w.clusterID {
		t.Fatalf("issued key not found: %v %v", k, err)
	}
	list := e.get(w.host, "/api/console/keys", admin).want(200, "").list()
	if len(list) != 1 || list[0]["id"] != id || list[0]["revoked_at"] != nil || list[0]["last_used_at"] != nil {
		t.Fatalf("list %v", list)
	}
	if strings.Contains(e.get(w.host, "/api/console/keys", admin).Body.String(), "hash") {
		t.Fatal("the key list mentions a hash")
	}
	for _, body := range []string{`{"name":"","scopes":["read"]}`, `{"name":"x","scopes":[]}`, `{"name":"x","scopes":["root"]}`, `nope`, ``} {
		e.write("POST", w.host, "/api/console/keys", admin, body).want(400, "invalid_request")
	}

	// Another cluster's key: not revocable from here, and left alive.
	otherTenant, _ := e.tenant()
	otherCluster, otherHost := e.cluster(otherTenant)
	otherKeyID, otherKey := e.apiKey(otherCluster)
	e.write("DELETE", w.host, "/api/console/keys/"+otherKeyID, admin, "").want(404, "not_found")
	if k, err := e.cache.APIKey(e.ctx(), otherKey); err != nil || k.ID != otherKeyID {
		t.Fatalf("the other cluster's key was revoked: %v", err)
	}
	// Same tenant, other cluster: also refused.
	sibling, _ := e.cluster(w.tenantID)
	siblingKeyID, _ := e.apiKey(sibling)
	e.write("DELETE", w.host, "/api/console/keys/"+siblingKeyID, admin, "").want(404, "not_found")
	// And the other cluster's admin cannot revoke ours through its host.
	_, otherAdmin := e.user(otherTenant, "")
	e.grant(otherCluster, otherAdmin, "admin")
	otherAdminID := e.scalar(`SELECT id::text FROM queen_proxy.users WHERE email = $1`, otherAdmin)
	e.write("DELETE", otherHost, "/api/console/keys/"+id, e.token(otherAdminID), "").want(404, "not_found")

	e.write("DELETE", w.host, "/api/console/keys/not-a-uuid", admin, "").want(400, "invalid_request")
	e.write("DELETE", w.host, "/api/console/keys/"+id, admin, "").want(200, "")
	e.write("DELETE", w.host, "/api/console/keys/"+id, admin, "").want(404, "not_found")
	if _, err := e.cache.APIKey(e.ctx(), key); err == nil {
		t.Fatal("revoked key still found")
	}
	list = e.get(w.host, "/api/console/keys", admin).want(200, "").list()
	if list[0]["revoked_at"] == nil {
		t.Fatalf("list after revoke %v", list)
	}
	for action, actor := range map[string]string{
		"api_key_issued": "control_plane", "console_api_key_issued": "user",
		"api_key_revoked": "control_plane", "console_api_key_revoked": "user",
	} {
		if n := e.countOps(w.clusterID, action, actor); n != 1 {
			t.Errorf("%d %s rows by %s, want 1", n, action, actor)
		}
	}
	var actorID string
	if err := e.pool.QueryRow(e.ctx(), `SELECT actor_id::text FROM queen_proxy.operations WHERE cluster_id = $1::uuid
		AND action = 'console_api_key_issued'`, w.clusterID).Scan(&actorID); err != nil || actorID != w.users["admin"] {
		t.Fatalf("audit actor %q (%v), want the admin", actorID, err)
	}
}

// TestConsoleMembers: list, invite (creating the user), change role,
// remove; other tenants' users are refused; every write audited.
func TestConsoleMembers(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorEnabled = true })
	w := e.world()
	admin := e.token(w.users["admin"])
	list := e.get(w.host, "/api/console/members", admin).want(200, "").list()
	if len(list) != 4 {
		t.Fatalf("members %v", list)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1]["email"].(string) > list[i]["email"].(string) {
			t.Fatalf("not ordered by e-mail: %v", list)
		}
	}
	if strings.Contains(e.get(w.host, "/api/console/members", admin).Body.String(), "password") {
		t.Fatal("the member list mentions passwords")
	}
	newcomer := name("new") + "@Acme.test"
	// An admin cannot create an account for an address no account has:
	// its owner would land in this tenant.
	e.write("POST", w.host, "/api/console/members", admin, `{"email":" `+newcomer+` ","role":"producer"}`).want(403, "invitation_required")
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, strings.ToLower(newcomer)); n != "0" {
		t.Fatalf("%s accounts for the refused address, want 0", n)
	}
	// A live operator, acting as admin, can.
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	r := e.write("POST", w.host, "/api/console/members", e.token(opID), `{"email":" `+newcomer+` ","role":"producer"}`).want(200, "").json()
	if r["created"] != true || r["email"] != strings.ToLower(newcomer) || r["role"] != "producer" {
		t.Fatalf("invite %v", r)
	}
	var tenant, from, by string
	var hash *string
	if err := e.pool.QueryRow(e.ctx(), `SELECT tenant_id::text, password_hash, created_from, coalesce(created_by::text, '') FROM queen_proxy.users WHERE email = $1`,
		strings.ToLower(newcomer)).Scan(&tenant, &hash, &from, &by); err != nil || tenant != w.tenantID || hash != nil || from != "operator" || by != opID {
		t.Fatalf("invited user: tenant %s hash %v origin %s by %s err %v", tenant, hash, from, by, err)
	}
	r = e.write("POST", w.host, "/api/console/members", admin, `{"email":"`+newcomer+`","role":"consumer"}`).want(200, "").json()
	if r["created"] != false || r["role"] != "consumer" {
		t.Fatalf("re-grant %v", r)
	}
	e.write("PATCH", w.host, "/api/console/members", admin, `{"email":"`+w.emails["nonmember"]+`","role":"viewer"}`).want(404, "not_found")
	e.write("PATCH", w.host, "/api/console/members", admin, `{"email":"nobody@acme.test","role":"viewer"}`).want(404, "not_found")
	e.write("DELETE", w.host, "/api/console/members", admin, `{"email":"`+w.emails["nonmember"]+`"}`).want(404, "not_found")
	otherTenant, _ := e.tenant()
	_, stranger := e.user(otherTenant, "")
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"`+stranger+`","role":"viewer"}`).want(409, "conflict")
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"no-at-sign","role":"viewer"}`).want(400, "invalid_request")
	e.write("POST", w.host, "/api/console/members", admin, `{"email":"a@b.test","role":"owner"}`).want(400, "invalid_request")
	e.do(req{method: "DELETE", host: w.host, path: "/api/console/members?email=" + strings.ToLower(newcomer), bearer: admin}).want(200, "")
	if n := e.countOps(w.clusterID, "console_member_granted", "user"); n != 2 {
		t.Errorf("%d console_member_granted rows, want 2", n)
	}
	if n := e.countOps(w.clusterID, "console_member_revoked", "user"); n != 1 {
		t.Errorf("%d console_member_revoked rows, want 1", n)
	}
	if n := e.countOps(w.clusterID, "console_user_invited", "user"); n != 1 {
		t.Errorf("%d console_user_invited rows, want 1", n)
	}
	// A removal bites at once: the removed member's session is refused.
	uid := e.scalar(`SELECT id::text FROM queen_proxy.users WHERE email = $1`, strings.ToLower(newcomer))
	e.get(w.host, "/api/console/overview", e.token(uid)).want(403, "forbidden")
}

// TestConsoleCSRF: cookie-authenticated writes need an allowed Origin (or
// Referer, or Sec-Fetch-Site same-origin); Bearer callers without browser
// headers pass.
func TestConsoleCSRF(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.PublicURL = "https://login." + baseDomain
		o.CORSOrigins = []string{"https://app.partner.test"}
	})
	w := e.world()
	tok := e.token(w.users["admin"])
	body := `{"name":"k","scopes":["read"]}`
	post := func(hdr map[string]string, viaCookie bool) resp {
		q := req{method: "POST", host: w.host, path: "/api/console/keys", body: body, header: hdr}
		if viaCookie {
			q.cookie = tok
		} else {
			q.bearer = tok
		}
		return e.do(q)
	}
	self := "http://" + w.host
	refused := []map[string]string{
		{"Origin": "https://evil.test"},
		{"Origin": "null"},
		{"Origin": "https://" + w.host}, // another scheme is another origin
		{"Origin": self + ":8080"},
		{"Referer": "https://evil.test/page"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{},
	}
	for _, h := range refused {
		post(h, true).want(403, "csrf_rejected")
	}
	// An evil Origin is refused whatever the credential.
	post(map[string]string{"Origin": "https://evil.test"}, false).want(403, "csrf_rejected")
	allowed := []map[string]string{
		{"Origin": self, "X-Requested-With": "queengate"},
		{"Origin": self + ":80"},
		{"Origin": "HTTP://" + strings.ToUpper(w.host)},
		{"Origin": "https://login." + baseDomain},
		{"Origin": "https://app.partner.test"},
		{"Referer": self + "/console/keys"},
		{"Sec-Fetch-Site": "same-origin"},
	}
	for _, h := range allowed {
		post(h, true).want(201, "")
	}
	post(nil, false).want(201, "") // a script with a Bearer token
	// Reads are never refused.
	e.do(req{method: "GET", host: w.host, path: "/api/console/overview", cookie: tok,
		header: map[string]string{"Origin": "https://evil.test"}}).want(200, "")
	// Logout and login are writes too.
	e.do(req{method: "POST", host: w.host, path: "/auth/logout", cookie: tok,
		header: map[string]string{"Origin": "https://evil.test"}}).want(403, "csrf_rejected")
	e.do(req{method: "POST", host: w.host, path: "/auth/login", body: "email=a@b&password=x",
		header: map[string]string{"Origin": "https://evil.test", "Content-Type": "application/x-www-form-urlencoded"}}).want(403, "csrf_rejected")
}

func TestConsoleCORS(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.CORSOrigins = []string{"https://app.partner.test"} })
	w := e.world()
	pre := e.do(req{method: "OPTIONS", host: w.host, path: "/api/console/keys", header: map[string]string{
		"Origin": "https://app.partner.test", "Access-Control-Request-Method": "POST"}})
	pre.want(204, "")
	h := pre.Header()
	if h.Get("Access-Control-Allow-Origin") != "https://app.partner.test" || h.Get("Access-Control-Allow-Credentials") != "true" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "DELETE") || h.Get("Access-Control-Max-Age") != "600" {
		t.Fatalf("preflight headers %v", h)
	}
	e.do(req{method: "OPTIONS", host: w.host, path: "/api/console/keys", header: map[string]string{
		"Origin": "https://evil.test", "Access-Control-Request-Method": "POST"}}).want(403, "")
	r := e.do(req{method: "GET", host: w.host, path: "/api/console/overview", bearer: e.token(w.users["viewer"]),
		header: map[string]string{"Origin": "https://app.partner.test"}}).want(200, "")
	if r.Header().Get("Access-Control-Allow-Origin") != "https://app.partner.test" || !strings.Contains(r.Header().Get("Access-Control-Expose-Headers"), "retry-after") {
		t.Fatalf("actual-response CORS headers %v", r.Header())
	}
	r = e.do(req{method: "GET", host: w.host, path: "/api/console/overview", bearer: e.token(w.users["viewer"]),
		header: map[string]string{"Origin": "https://evil.test"}})
	if r.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("an unlisted origin got CORS headers")
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	for _, q := range []req{
		{method: "GET", host: w.host, path: "/api/console/overview", bearer: e.token(w.users["viewer"])},
		{method: "GET", host: w.host, path: "/api/console/overview"},
		{method: "GET", host: w.host, path: "/auth/login"},
		{method: "GET", host: w.host, path: "/.well-known/jwks.json"},
		{method: "GET", host: w.host, path: "/console/"},
		{method: "GET", host: w.host, path: "/api/operator/users"},
	} {
		for _, https := range []bool{false, true} {
			q.https = https
			h := e.do(q).Header()
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
				!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
				h.Get("Referrer-Policy") != "same-origin" {
				t.Fatalf("%s: headers %v", q.path, h)
			}
			if hsts := h.Get("Strict-Transport-Security"); (hsts != "") != https {
				t.Fatalf("%s over https=%v: HSTS %q", q.path, https, hsts)
			}
		}
	}
}

// TestLogoutRevokesEveryTokenOfTheSession: two tokens of one login
// session; logging out with one refuses both, here and on any other
// gateway reading the same database.
func TestLogoutRevokesEveryTokenOfTheSession(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	uid := w.users["viewer"]
	first, claims, err := e.keys.Mint(uid, "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := e.keys.Mint(uid, claims.SessionID, "viewer", "", 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	unrelated := e.token(uid)
	for _, tok := range []string{first, second, unrelated} {
		e.get(w.host, "/api/console/overview", tok).want(200, "")
	}
	// Another gateway on the same database, which has seen the tokens.
	other := newEnv(t)
	for _, tok := range []string{first, second} {
		other.get(w.host, "/api/console/overview", tok).want(200, "")
	}
	r := e.do(req{method: "POST", host: w.host, path: "/auth/logout", bearer: second}).want(200, "")
	if r.json()["ok"] != true {
		t.Fatalf("logout answered %s", r.Body.String())
	}
	if sc := strings.Join(r.Header().Values("Set-Cookie"), "\n"); !strings.Contains(sc, "queen_session=;") || !strings.Contains(sc, "Max-Age=0") {
		t.Fatalf("logout did not clear the cookie: %s", sc)
	}
	for _, tok := range []string{first, second} {
		e.get(w.host, "/api/console/overview", tok).want(401, "unauthorized")
	}
	e.get(w.host, "/api/console/overview", unrelated).want(200, "")
	// The other gateway's cached "not revoked" answers go with the
	// notification; here, as in the gateway, the listener drops them.
	other.ids.InvalidateRevocations()
	for _, tok := range []string{first, second} {
		other.get(w.host, "/api/console/overview", tok).want(401, "unauthorized")
	}
	var expires time.Time
	if err := e.pool.QueryRow(e.ctx(), `SELECT expires_at FROM queen_proxy.revoked_tokens WHERE jti = $1`, claims.SessionID).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	if expires.Before(claims.ExpiresAt) {
		t.Fatalf("deny-list row expires %v, before the session's token %v", expires, claims.ExpiresAt)
	}
	// Logging out again, or without a session, still answers ok.
	e.do(req{method: "POST", host: w.host, path: "/auth/logout", bearer: first}).want(200, "")
	e.do(req{method: "POST", host: w.host, path: "/auth/logout"}).want(200, "")
}

func TestJWKS(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{method: "GET", host: "x." + baseDomain, path: "/.well-known/jwks.json"}).want(200, "")
	if strings.TrimSpace(r.Body.String()) != `{"keys":[]}` {
		t.Fatalf("HS256 JWKS %s", r.Body.String())
	}
	ed, err := tenancyKeys(ed25519PEM(t))
	if err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t, func(o *Options) { o.Sessions = ed })
	r = e2.do(req{method: "GET", host: "x." + baseDomain, path: "/.well-known/jwks.json"}).want(200, "")
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("EdDSA JWKS %s", r.Body.String())
	}
	k := set.Keys[0]
	if k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["alg"] != "EdDSA" || k["kid"] != ed.KeyID() || k["x"] == "" {
		t.Fatalf("jwk %v", k)
	}
	if cc := r.Header().Get("Cache-Control"); !strings.Contains(cc, "max-age") {
		t.Fatalf("cache-control %q", cc)
	}
	e2.do(req{method: "POST", host: "x." + baseDomain, path: "/.well-known/jwks.json"}).want(http.StatusMethodNotAllowed, "invalid_request")
}
