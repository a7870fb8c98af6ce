package console

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// login posts the sign-in form the way a browser does.
func (e *env) login(host, email, password, next string) resp {
	e.t.Helper()
	form := url.Values{"email": {email}, "password": {password}, "next": {next}}
	return e.do(req{method: "POST", host: host, path: "/auth/login", body: form.Encode(), header: map[string]string{
		"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://" + host,
	}})
}

// sessionCookie returns the session cookie a response sets.
func sessionCookie(t *testing.T, r resp) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header()}).Cookies() {
		if c.Name == "queen_session" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", r.Header().Values("Set-Cookie"))
	return nil
}

func TestPasswordLogin(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	uid, email := e.user(w.tenantID, "correct horse battery")
	e.grant(w.clusterID, email, "viewer")

	page := e.do(req{method: "GET", host: w.host, path: "/auth/login?next=/console/keys"}).want(200, "")
	body := page.Body.String()
	if !strings.Contains(body, `action="/auth/login"`) || !strings.Contains(body, `value="/console/keys"`) ||
		!strings.Contains(page.Header().Get("Content-Type"), "text/html") || strings.Contains(body, "<script") {
		t.Fatalf("login page %s", body)
	}
	if !strings.Contains(page.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("login page CSP %q", page.Header().Get("Content-Security-Policy"))
	}

	r := e.login(w.host, strings.ToUpper(email), "correct horse battery", "/console/")
	r.want(http.StatusSeeOther, "")
	if loc := r.Header().Get("Location"); loc != "/console/" {
		t.Fatalf("redirect to %q", loc)
	}
	c := sessionCookie(t, r)
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.MaxAge != int(DefaultSessionTTL/time.Second) || c.Secure {
		t.Fatalf("cookie %+v", c)
	}
	claims, err := e.keys.Verify(c.Value)
	if err != nil || claims.UserID != uid || claims.SessionID != claims.TokenID || claims.Cluster != "" || claims.Role != "viewer" {
		t.Fatalf("session %+v %v", claims, err)
	}
	e.do(req{method: "GET", host: w.host, path: "/api/console/overview", cookie: c.Value}).want(200, "")
	if e.scalar(`SELECT (last_login_at IS NOT NULL)::text FROM queen_proxy.users WHERE id = $1::uuid`, uid) != "true" {
		t.Fatal("last_login_at not set")
	}
	var logins int
	_ = e.pool.QueryRow(e.ctx(), `SELECT count(*) FROM queen_proxy.operations WHERE action = 'login' AND actor_id = $1::uuid`, uid).Scan(&logins)
	if logins != 1 {
		t.Fatalf("%d login audit rows", logins)
	}
	// A second login is a second session.
	c2 := sessionCookie(t, e.login(w.host, email, "correct horse battery", "/"))
	claims2, _ := e.keys.Verify(c2.Value)
	if claims2.SessionID == claims.SessionID {
		t.Fatal("two logins share a session id")
	}
	// Over HTTPS the cookie is Secure.
	form := url.Values{"email": {email}, "password": {"correct horse battery"}}
	r = e.do(req{method: "POST", host: w.host, path: "/auth/login", https: true, body: form.Encode(),
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://" + w.host}})
	if c := sessionCookie(t, r.want(303, "")); !c.Secure {
		t.Fatal("cookie not Secure over HTTPS")
	}
	if loc := r.Header().Get("Location"); loc != "/" {
		t.Fatalf("no next: redirect to %q", loc)
	}

	for _, bad := range []struct{ email, password string }{
		{email, "wrong"}, {"nobody@acme.test", "correct horse battery"}, {email, ""}, {"", ""},
	} {
		r := e.login(w.host, bad.email, bad.password, "/console/")
		r.want(401, "")
		if !strings.Contains(r.Body.String(), "Invalid email or password.") || len(r.Header().Values("Set-Cookie")) != 0 {
			t.Fatalf("failed login answered %s", r.Body.String())
		}
	}
	// A user without a password cannot log in with any.
	_, nopw := e.user(w.tenantID, "")
	e.login(w.host, nopw, "", "/").want(401, "")
	e.login(w.host, nopw, "anything at all", "/").want(401, "")

	// Unsafe next values go to "/".
	for _, next := range []string{"//evil.test/x", "https://evil.test/", "/\\evil.test", "/a\nb", "javascript:alert(1)"} {
		_, email2 := e.user(w.tenantID, "another password")
		r := e.login(w.host, email2, "another password", next).want(303, "")
		if loc := r.Header().Get("Location"); loc != "/" {
			t.Fatalf("next %q redirected to %q", next, loc)
		}
	}
	// A gateway without session keys does not log in.
	e2 := newEnv(t, func(o *Options) { o.Sessions = nil })
	e2.login(w.host, email, "correct horse battery", "/").want(503, "not_configured")
}

// TestPasswordHashes: bcrypt hashes made by pgcrypto (as queen_proxy's
// databases hold them) and by Go, and argon2id, verify; wrong passwords
// and malformed hashes do not.
func TestPasswordHashes(t *testing.T) {
	e := newEnv(t)
	pg := e.scalar(`SELECT public.crypt('pw from pgcrypto', public.gen_salt('bf', 10))`)
	if !strings.HasPrefix(pg, "$2a$10$") {
		t.Fatalf("pgcrypto hash %q", pg)
	}
	goHash, _ := bcrypt.GenerateFromPassword([]byte("pw from go"), 4)
	argon, err := HashPassword("pw from argon")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(argon, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("argon2id hash %q", argon)
	}
	again, _ := HashPassword("pw from argon")
	if again == argon {
		t.Fatal("two hashes of one password are equal (no salt)")
	}
	for _, c := range []struct {
		hash, pw string
		ok       bool
	}{
		{pg, "pw from pgcrypto", true}, {pg, "pw from pgcrypto ", false},
		{string(goHash), "pw from go", true}, {string(goHash), "pw from Go", false},
		{argon, "pw from argon", true}, {argon, "pw from argoN", false}, {again, "pw from argon", true},
	} {
		ok, err := VerifyPassword(c.hash, c.pw)
		if err != nil || ok != c.ok {
			t.Errorf("VerifyPassword(%q, %q) = %v, %v; want %v", c.hash[:10], c.pw, ok, err, c.ok)
		}
	}
	for _, bad := range []string{"", "plaintext", "$argon2id$v=19$m=1,t=1,p=1$xx$yy", "$argon2id$v=19$m=999999999,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$2a$10$short"} {
		if ok, _ := VerifyPassword(bad, "x"); ok {
			t.Errorf("malformed hash %q verified", bad)
		}
	}
	// An argon2id user logs in like a bcrypt one.
	w := e.world()
	_, email := e.user(w.tenantID, "")
	e.exec(`UPDATE queen_proxy.users SET password_hash = $2 WHERE email = $1`, email, argon)
	e.login(w.host, email, "pw from argon", "/").want(303, "")
	e.login(w.host, email, "pw from pgcrypto", "/").want(401, "")
}

// TestLoginBruteForceGuard: an account backs off after its free failures,
// even for the right password; the address after its own; a success clears
// the account only; the wait doubles and the window resets.
func TestLoginBruteForceGuard(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Guard = NewLoginGuard(LoginGuardConfig{FreeFailuresIP: 3, FreeFailuresAccount: 2, BackoffBase: 10 * time.Second, Lockout: time.Minute, Window: 5 * time.Minute})
	})
	e.advance(0)
	w := e.world()
	_, victim := e.user(w.tenantID, "victim password")
	e.login(w.host, victim, "guess 1", "/").want(401, "")
	e.login(w.host, victim, "guess 2", "/").want(401, "")
	e.login(w.host, victim, "guess 3", "/").want(401, "") // the third failure starts the backoff
	r := e.login(w.host, victim, "victim password", "/").want(429, "")
	if ra := r.Header().Get("Retry-After"); ra != "10" {
		t.Fatalf("Retry-After %q, want 10", ra)
	}
	if len(r.Header().Values("Set-Cookie")) != 0 || !strings.Contains(r.Body.String(), "Too many sign-in attempts") {
		t.Fatalf("guarded login answered %s", r.Body.String())
	}
	e.advance(11 * time.Second)
	e.login(w.host, victim, "guess 4", "/").want(401, "") // fourth failure: 20 s now
	r = e.login(w.host, victim, "victim password", "/").want(429, "")
	if ra := r.Header().Get("Retry-After"); ra != "20" {
		t.Fatalf("Retry-After %q, want 20 (doubled)", ra)
	}
	// The address has spent its 3 free failures too: another account from
	// it waits as well.
	_, other := e.user(w.tenantID, "other password")
	e.login(w.host, other, "other password", "/").want(429, "")
	e.advance(21 * time.Second)
	e.login(w.host, victim, "victim password", "/").want(303, "")
	// Success cleared the account, not the address.
	e.login(w.host, victim, "guess 5", "/").want(401, "")
	e.login(w.host, other, "other password", "/").want(429, "")
	// After the window without failures everything is forgiven.
	e.advance(6 * time.Minute)
	e.login(w.host, other, "other password", "/").want(303, "")
}

func TestLoginGuardUnit(t *testing.T) {
	g := NewLoginGuard(LoginGuardConfig{FreeFailuresIP: 1, FreeFailuresAccount: 100, BackoffBase: time.Second, Lockout: 5 * time.Second, MaxTracked: 50})
	now := time.Unix(1_000_000, 0)
	a := netip.MustParseAddr("2001:db8:1:2::1")
	b := netip.MustParseAddr("2001:db8:1:2:ffff::9") // same /64
	c := netip.MustParseAddr("2001:db8:1:3::1")      // another /64
	g.Fail(a, "x", now)
	g.Fail(b, "y", now)
	if ok, wait := g.Check(a, "z", now); ok || wait != time.Second {
		t.Fatalf("same /64 after two failures: ok=%v wait=%v", ok, wait)
	}
	if ok, _ := g.Check(c, "z", now); !ok {
		t.Fatal("another /64 is blocked")
	}
	for i := 0; i < 10; i++ {
		g.Fail(a, "x", now)
	}
	if _, wait := g.Check(a, "z", now); wait != 5*time.Second {
		t.Fatalf("wait %v, want the 5s lockout cap", wait)
	}
	// Bounded memory: many addresses never exceed the cap.
	for i := 0; i < 500; i++ {
		g.Fail(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), "acct"+string(rune('a'+i%26)), now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := g.Tracked(); n > 50 {
		t.Fatalf("%d entries tracked, cap 50", n)
	}
	// Unknown addresses share one counter rather than escape it.
	g2 := NewLoginGuard(LoginGuardConfig{FreeFailuresIP: 1, FreeFailuresAccount: 100})
	g2.Fail(netip.Addr{}, "a", now)
	g2.Fail(netip.Addr{}, "b", now)
	if ok, _ := g2.Check(netip.Addr{}, "c", now); ok {
		t.Fatal("failures without an address are not counted")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/console/": "/console/", "/console/keys?x=1": "/console/keys?x=1", "": "/", "console": "/",
		"//evil": "/", "/\\evil": "/", "/x?u=https://evil": "/", "/a\x00": "/", "/a\x7f": "/",
	} {
		if got := SafeNext(in); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMeAndSessionToken: the session document, cookie only; a short
// bearer of the same session that logout revokes too.
func TestMeAndSessionToken(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorEnabled = true })
	w := e.world()
	uid, email := e.user(w.tenantID, "the admin password")
	e.grant(w.clusterID, email, "admin")
	other, _ := e.cluster(w.tenantID)
	e.grant(other, email, "viewer")
	cookie := sessionCookie(t, e.login(w.host, email, "the admin password", "/")).Value

	me := e.do(req{method: "GET", host: w.host, path: "/auth/me", cookie: cookie}).want(200, "").json()
	if me["user_id"] != uid || me["email"] != email || me["principal"] != "user" || me["operator_enabled"] != true ||
		me["operator_live"] != false || me["act_cluster_header"] != "x-queen-act-cluster" || me["role"] != "viewer" || me["cluster"] != nil {
		t.Fatalf("me %v", me)
	}
	acting := me["acting_cluster"].(map[string]any)
	if acting["id"] != w.clusterID || acting["role"] != "admin" {
		t.Fatalf("acting cluster %v", acting)
	}
	if cl := me["clusters"].([]any); len(cl) != 2 {
		t.Fatalf("clusters %v", cl)
	}
	// On a shared host there is no acting cluster without the header.
	me = e.do(req{method: "GET", host: "api." + baseDomain, path: "/auth/me", cookie: cookie}).want(200, "").json()
	if me["acting_cluster"] != nil {
		t.Fatalf("shared host acting cluster %v", me["acting_cluster"])
	}
	// Cookie only: a session Bearer is refused, and so is nothing.
	e.get(w.host, "/auth/me", cookie).want(401, "unauthorized")
	e.do(req{method: "GET", host: w.host, path: "/auth/me"}).want(401, "unauthorized")
	// An API key gets its own document.
	_, key := e.apiKey(w.clusterID)
	kd := e.get(w.host, "/auth/me", key).want(200, "").json()
	if kd["principal"] != "api_key" || kd["user_id"] != nil || kd["scopes"].(map[string]any)["produce"] != true ||
		kd["scopes"].(map[string]any)["consume"] != false || kd["acting_cluster"].(map[string]any)["id"] != w.clusterID {
		t.Fatalf("key document %v", kd)
	}
	_, otherHost := e.cluster(w.tenantID)
	e.get(otherHost, "/auth/me", key).want(403, "forbidden")

	st := e.do(req{method: "GET", host: w.host, path: "/auth/session-token", cookie: cookie}).want(200, "").json()
	short, _ := st["token"].(string)
	if st["expires_in"] != float64(900) || short == "" {
		t.Fatalf("session-token %v", st)
	}
	cc, _ := e.keys.Verify(cookie)
	sc, err := e.keys.Verify(short)
	if err != nil || sc.SessionID != cc.SessionID || sc.UserID != uid || sc.TokenID == cc.TokenID {
		t.Fatalf("short token %+v vs cookie %+v (%v)", sc, cc, err)
	}
	if got := sc.ExpiresAt.Sub(sc.IssuedAt); got != 900*time.Second {
		t.Fatalf("short token life %v", got)
	}
	e.get(w.host, "/api/console/keys", short).want(200, "")
	e.get(w.host, "/auth/session-token", short).want(401, "unauthorized") // cookie only
	e.do(req{method: "POST", host: w.host, path: "/auth/logout", cookie: cookie, header: map[string]string{"Origin": "http://" + w.host}}).want(200, "")
	e.get(w.host, "/api/console/keys", short).want(401, "unauthorized")
	e.do(req{method: "GET", host: w.host, path: "/auth/session-token", cookie: cookie}).want(401, "unauthorized")
	e.do(req{method: "GET", host: w.host, path: "/auth/me", cookie: cookie}).want(401, "unauthorized")
}

// TestSharedHostActAs: on a shared host the console needs
// x-queen-act-cluster; an unknown cluster and one without a role answer
// alike.
func TestSharedHostActAs(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	tok := e.token(w.users["viewer"])
	shared := "api." + baseDomain
	e.get(shared, "/api/console/overview", tok).want(403, "forbidden")
	slug := strings.TrimSuffix(w.host, "."+baseDomain)
	for _, ref := range []string{slug, w.clusterID, strings.ToUpper(w.clusterID)} {
		r := e.do(req{method: "GET", host: shared, path: "/api/console/overview", bearer: tok,
			header: map[string]string{"X-Queen-Act-Cluster": ref}}).want(200, "")
		if r.json()["slug"] != slug {
			t.Fatalf("acted on %v", r.json()["slug"])
		}
	}
	otherTenant, _ := e.tenant()
	otherCluster, _ := e.cluster(otherTenant)
	a := e.do(req{method: "GET", host: shared, path: "/api/console/overview", bearer: tok,
		header: map[string]string{"X-Queen-Act-Cluster": otherCluster}}).want(403, "forbidden")
	b := e.do(req{method: "GET", host: shared, path: "/api/console/overview", bearer: tok,
		header: map[string]string{"X-Queen-Act-Cluster": "no-such-cluster"}}).want(403, "forbidden")
	if a.json()["error"] != b.json()["error"] {
		t.Fatalf("unknown and unauthorized clusters differ: %s vs %s", a.Body.String(), b.Body.String())
	}
	// On a cluster host the console ignores the header.
	r := e.do(req{method: "GET", host: w.host, path: "/api/console/overview", bearer: tok,
		header: map[string]string{"X-Queen-Act-Cluster": otherCluster}}).want(200, "")
	if r.json()["slug"] != slug {
		t.Fatal("the console honoured x-queen-act-cluster on a cluster host")
	}
}

// TestClusterStatusGates: a suspended cluster is read-only in the console,
// a deleting one closed.
func TestClusterStatusGates(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	tok := e.token(w.users["admin"])
	e.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, w.clusterID)
	e.cache.InvalidateCluster(w.clusterID)
	r := e.get(w.host, "/api/console/overview", tok).want(200, "")
	if r.json()["status"] != "suspended" {
		t.Fatalf("status %v", r.json()["status"])
	}
	e.write("POST", w.host, "/api/console/keys", tok, `{"name":"k","scopes":["read"]}`).want(403, "cluster_suspended")
	e.exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'deleting')`, w.tenantID)
	e.cache.InvalidateCluster(w.clusterID)
	e.get(w.host, "/api/console/overview", tok).want(403, "cluster_suspended")
}

// TestLogoutFromABrowserAddressBar: a browser sent to GET /auth/logout is
// signed out and lands on the sign-in page; anything else still needs POST.
func TestLogoutFromABrowserAddressBar(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	cookie := e.token(w.users["viewer"])
	e.do(req{method: "GET", host: w.host, path: "/auth/me", cookie: cookie}).want(200, "")
	e.do(req{method: "GET", host: w.host, path: "/auth/logout", cookie: cookie}).want(405, "")
	e.do(req{method: "GET", host: w.host, path: "/auth/me", cookie: cookie}).want(200, "")

	r := e.do(req{method: "GET", host: w.host, path: "/auth/logout", cookie: cookie,
		header: map[string]string{"Accept": "text/html,application/xhtml+xml"}}).want(303, "")
	if loc := r.Header().Get("Location"); loc != "/auth/login" {
		t.Fatalf("logout from a browser goes to %q, want the sign-in page", loc)
	}
	if c := sessionCookie(t, r); c.MaxAge >= 0 {
		t.Fatalf("the session cookie is not cleared: %+v", c)
	}
	e.do(req{method: "GET", host: w.host, path: "/auth/me", cookie: cookie}).want(401, "unauthorized")
}
