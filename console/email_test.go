package console

import (
	"bytes"
	"crypto/sha256"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/mailer"
	"github.com/queengate/queengate/internal/mailpit"
)

const publicURL = "https://login.eu1.test"

// mailEnv is an env whose surface sends through a real Mailpit.
type mailEnv struct {
	*env
	mp *mailpit.Server
}

func newMailEnv(t *testing.T, configure ...func(*Options)) *mailEnv {
	t.Helper()
	mp := mailpit.Start(t, mailpit.Options{})
	m, err := mailer.New(mailer.Config{Host: mp.SMTPHost, Port: mp.SMTPPort, Security: mailer.SecurityNone,
		From: "Queen <no-reply@queen.test>"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, append([]func(*Options){func(o *Options) { o.Mail = m; o.PublicURL = publicURL }}, configure...)...)
	return &mailEnv{env: e, mp: mp}
}

var linkRE = regexp.MustCompile(`https://login\.eu1\.test(/auth/[a-z]+)\?token=([A-Za-z0-9_-]+)`)

// mailWorld is a world with the tokens and names the e-mail tests use.
type mailWorld struct {
	world
	adminID, adminEmail, adminTok, viewerTok, slug string
}

func (e *env) mailWorld() mailWorld {
	e.t.Helper()
	w := mailWorld{world: e.world()}
	w.adminID, w.adminEmail = w.users["admin"], w.emails["admin"]
	w.adminTok, w.viewerTok = e.token(w.adminID), e.token(w.users["viewer"])
	w.slug = strings.TrimSuffix(w.host, "."+baseDomain)
	return w
}

// linkIn returns the path and token of the one link in a message, checking
// that both bodies carry it.
func linkIn(t *testing.T, m mailpit.Message) (path, token string) {
	t.Helper()
	got := linkRE.FindStringSubmatch(m.Text)
	if got == nil {
		t.Fatalf("no link to %s in the message's text:\n%s", publicURL, m.Text)
	}
	if !strings.Contains(m.HTML, got[0]) {
		t.Fatalf("the HTML body does not carry the text's link %s:\n%s", got[0], m.HTML)
	}
	return got[1], got[2]
}

// form posts a form to the surface, as a browser on the public origin does.
func (e *env) form(path string, values url.Values, cookie string) resp {
	e.t.Helper()
	r := e.do(req{method: http.MethodPost, host: "login.eu1.test", path: path, cookie: cookie, https: true,
		header: map[string]string{"Origin": publicURL, "Content-Type": "application/x-www-form-urlencoded"},
		body:   values.Encode()})
	return r
}

func (e *env) page(path string) resp {
	e.t.Helper()
	return e.do(req{method: http.MethodGet, host: "login.eu1.test", path: path, https: true,
		header: map[string]string{"Accept": "text/html"}})
}

// setSession is the session cookie a response set ("" for none).
func setSession(r resp) string {
	for _, c := range r.Result().Cookies() {
		if c.Name == "queen_session" && c.MaxAge >= 0 && c.Value != "" {
			return c.Value
		}
	}
	return ""
}

func (e *env) signIn(email, password string) resp {
	e.t.Helper()
	return e.form("/auth/login", url.Values{"email": {email}, "password": {password}, "next": {"/console"}}, "")
}

// The whole invitation: a cluster admin invites an address no account
// has, the message arrives, opening its link spends nothing, a password
// that breaks the rule keeps it live, accepting creates the account in the
// cluster's tenant with the role and signs it in, and the link is spent.
func TestInvitationByEmail(t *testing.T) {
	e := newMailEnv(t)
	w := e.mailWorld()
	invitee := name("new") + "@elsewhere.test"
	r := e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"`+strings.ToUpper(invitee)+`","role":"producer"}`).want(202, "").json()
	if r["invited"] != true || r["created"] != false || r["email"] != invitee || r["invitation_id"] == "" {
		t.Fatalf("invitation answer %v", r)
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, invitee); n != "0" {
		t.Fatal("an invitation created the account before it was accepted")
	}
	msg := e.mp.Wait(t, invitee, 1, 15*time.Second)
	if !strings.Contains(msg.Subject, w.slug) || !strings.Contains(msg.Text, "producer") {
		t.Errorf("invitation subject %q text %q", msg.Subject, msg.Text)
	}
	path, tok := linkIn(t, msg)
	if path != "/auth/invitation" {
		t.Fatalf("invitation link path %s", path)
	}
	// Stored as the hash of purpose and token, never the token.
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens WHERE token_hash = $1`, linkHash(purposeInvitation, tok)); n != "1" {
		t.Fatalf("%s rows hold the purpose-bound hash of the token", n)
	}
	plain := sha256.Sum256([]byte(tok))
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens t WHERE token_hash = $1 OR t::text LIKE '%' || $2 || '%'`,
		plain[:], tok); n != "0" {
		t.Fatal("the token, or its bare hash, is stored")
	}
	list := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list()
	if len(list) != 1 || list[0]["email"] != invitee || list[0]["role"] != "producer" || list[0]["invited_by"] != w.adminEmail {
		t.Fatalf("pending invitations %v", list)
	}
	if strings.Contains(e.get(w.host, "/api/console/invitations", w.adminTok).Body.String(), tok) {
		t.Fatal("the listing shows the token")
	}
	e.get(w.host, "/api/console/invitations", w.viewerTok).want(403, "forbidden")
	for range 2 { // a mail scanner's fetch does not spend it
		p := e.page(path+"?token="+tok).want(200, "")
		if !strings.Contains(p.Body.String(), w.slug) || !strings.Contains(p.Body.String(), invitee) {
			t.Fatalf("invitation page: %s", p.Body.String())
		}
	}
	e.form(path, url.Values{"token": {tok}, "password": {"short"}}, "").want(400, "")
	ok := e.form(path, url.Values{"token": {tok}, "password": {"a good long password"}}, "").want(303, "")
	if ok.Header().Get("Location") != "/console" || setSession(ok) == "" {
		t.Fatalf("acceptance went to %q with cookie %q", ok.Header().Get("Location"), setSession(ok))
	}
	me := e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: setSession(ok), https: true}).want(200, "").json()
	if me["email"] != invitee || me["tenant_id"] != w.tenantID {
		t.Fatalf("the new session is %v, want %s in tenant %s", me, invitee, w.tenantID)
	}
	members := e.get(w.host, "/api/console/members", w.adminTok).want(200, "").list()
	found := false
	for _, m := range members {
		if m["email"] == invitee {
			found = m["role"] == "producer" && m["email_verified"] == true && m["can_login"] == true
		}
	}
	if !found {
		t.Fatalf("the invitee is not a verified producer: %v", members)
	}
	if origin := e.scalar(`SELECT created_from || ' ' || coalesce(created_by::text, '') FROM queen_proxy.users WHERE email = $1`, invitee); origin != "console "+w.adminID {
		t.Errorf("the account's origin is %q", origin)
	}
	e.form(path, url.Values{"token": {tok}, "password": {"another long password"}}, "").want(400, "")
	e.page(path+"?token="+tok).want(400, "")
	if l := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list(); len(l) != 0 {
		t.Fatalf("an accepted invitation is still pending: %v", l)
	}
	e.signIn(invitee, "a good long password").want(303, "")
	if n := e.countOps(w.clusterID, "console_member_invited", "user"); n != 1 {
		t.Errorf("%d console_member_invited rows", n)
	}
}

// A revoked invitation's link stops working; only an admin revokes; a
// new invitation of the same address replaces the old one.
func TestInvitationRevokedAndReplaced(t *testing.T) {
	e := newMailEnv(t)
	w := e.mailWorld()
	invitee := name("rv") + "@elsewhere.test"
	first := e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"`+invitee+`","role":"viewer"}`).want(202, "").json()
	_, tok1 := linkIn(t, e.mp.Wait(t, invitee, 1, 15*time.Second))
	second := e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"`+invitee+`","role":"consumer"}`).want(202, "").json()
	_, tok2 := linkIn(t, e.mp.Wait(t, invitee, 2, 15*time.Second))
	if tok1 == tok2 {
		t.Fatal("two invitations carried the same token")
	}
	e.page("/auth/invitation?token="+tok1).want(400, "")
	list := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list()
	if len(list) != 1 || list[0]["id"] != second["invitation_id"] || list[0]["role"] != "consumer" {
		t.Fatalf("pending after a re-invitation: %v (first %v)", list, first["invitation_id"])
	}
	id := second["invitation_id"].(string)
	e.write("DELETE", w.host, "/api/console/invitations/"+id, w.viewerTok, "").want(403, "forbidden")
	e.write("DELETE", w.host, "/api/console/invitations/not-a-uuid", w.adminTok, "").want(404, "not_found")
	e.write("DELETE", w.host, "/api/console/invitations/"+id, w.adminTok, "").want(200, "")
	e.write("DELETE", w.host, "/api/console/invitations/"+id, w.adminTok, "").want(404, "not_found")
	e.page("/auth/invitation?token="+tok2).want(400, "")
	e.form("/auth/invitation", url.Values{"token": {tok2}, "password": {"a good long password"}}, "").want(400, "")
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = $1`, invitee); n != "0" {
		t.Fatal("a revoked invitation created an account")
	}
}

// When the relay does not take the invitation, the caller hears it and no
// invitation is left pending.
func TestInvitationNotSent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	m, err := mailer.New(mailer.Config{Host: "127.0.0.1", Port: port, Security: mailer.SecurityNone, From: "no-reply@queen.test"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Mail = m; o.PublicURL = publicURL })
	w := e.mailWorld()
	e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"lost@elsewhere.test","role":"viewer"}`).want(502, "email_not_sent")
	if l := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list(); len(l) != 0 {
		t.Fatalf("an unsent invitation is pending: %v", l)
	}
}

// "Forgot password": the same answer whether or not an account has the
// address, a message only for the account, a single-use link bound to its
// purpose that ends every session and sets the password.
func TestForgotPasswordReset(t *testing.T) {
	e := newMailEnv(t)
	tenantID, _ := e.tenant()
	userID, email := e.user(tenantID, "the old password")
	before := e.token(userID)
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: before, https: true}).want(200, "")
	if !strings.Contains(e.page("/auth/login").Body.String(), `href="/auth/forgot"`) {
		t.Error("the sign-in page does not offer a reset")
	}
	nobody := name("nobody") + "@acme.test"
	a := e.form("/auth/forgot", url.Values{"email": {nobody}}, "").want(200, "")
	b := e.form("/auth/forgot", url.Values{"email": {email}}, "").want(200, "")
	if !bytes.Equal(a.Body.Bytes(), b.Body.Bytes()) {
		t.Fatalf("the answers differ:\n%s\n%s", a.Body.String(), b.Body.String())
	}
	msg := e.mp.Wait(t, email, 1, 15*time.Second)
	if n := len(e.mp.To(t, nobody)); n != 0 {
		t.Fatalf("%d messages to an address no account has", n)
	}
	path, tok := linkIn(t, msg)
	if path != "/auth/reset" {
		t.Fatalf("reset link path %s", path)
	}
	if n := e.scalar(`SELECT count(*)::text FROM queen_proxy.email_tokens WHERE user_id = $1::uuid AND purpose = 'password_reset'
		AND expires_at BETWEEN clock_timestamp() + interval '29 minutes' AND clock_timestamp() + interval '30 minutes'`, userID); n != "1" {
		t.Fatalf("%s reset links of about 30 minutes", n)
	}
	// Bound to its purpose.
	e.page("/auth/invitation?token="+tok).want(400, "")
	e.form("/auth/verify", url.Values{"token": {tok}}, "").want(400, "")
	e.page(path+"?token="+tok).want(200, "")
	e.form(path, url.Values{"token": {tok}, "password": {"too short"}}, "").want(400, "")
	done := e.form(path, url.Values{"token": {tok}, "password": {"the brand new password"}}, "").want(303, "")
	if loc := done.Header().Get("Location"); !strings.HasPrefix(loc, "/auth/login?done=reset") {
		t.Fatalf("after the reset: %s", loc)
	}
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: before, https: true}).want(401, "unauthorized")
	e.form(path, url.Values{"token": {tok}, "password": {"yet another password"}}, "").want(400, "")
	e.signIn(email, "the old password").want(401, "")
	in := e.signIn(email, "the brand new password").want(303, "")
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: setSession(in), https: true}).want(200, "")
	if v := e.scalar(`SELECT (email_verified_at IS NOT NULL)::text FROM queen_proxy.users WHERE id = $1::uuid`, userID); v != "true" {
		t.Error("a used reset link did not count the address as proven")
	}
}

// An expired link, and an older link after a newer one was sent, do not
// work; a malformed token never reaches the database.
func TestResetLinkExpiresAndIsReplaced(t *testing.T) {
	e := newMailEnv(t)
	tenantID, _ := e.tenant()
	userID, email := e.user(tenantID, "the old password")
	e.form("/auth/forgot", url.Values{"email": {email}}, "").want(200, "")
	_, tok1 := linkIn(t, e.mp.Wait(t, email, 1, 15*time.Second))
	e.form("/auth/forgot", url.Values{"email": {email}}, "").want(200, "")
	_, tok2 := linkIn(t, e.mp.Wait(t, email, 2, 15*time.Second))
	e.page("/auth/reset?token="+tok1).want(400, "")
	e.page("/auth/reset?token="+tok2).want(200, "")
	e.exec(`UPDATE queen_proxy.email_tokens SET expires_at = clock_timestamp() - interval '1 second' WHERE user_id = $1::uuid`, userID)
	e.page("/auth/reset?token="+tok2).want(400, "")
	e.form("/auth/reset", url.Values{"token": {tok2}, "password": {"the brand new password"}}, "").want(400, "")
	for _, bad := range []string{"", "x", tok2 + "=", strings.Repeat("A", 43) + "A", "%00"} {
		e.page("/auth/reset?token="+url.QueryEscape(bad)).want(400, "")
	}
}

// Reset requests are limited per address typed, whether or not an account
// has it, and per client address.
func TestForgotRateLimited(t *testing.T) {
	e := newMailEnv(t, func(o *Options) {
		o.ClientIP = func(r *http.Request) netip.Addr {
			if r.Header.Get("X-Test-Peer") != "" {
				return netip.MustParseAddr("198.51.100.7")
			}
			return peerAddr(r)
		}
	})
	tenantID, _ := e.tenant()
	_, email := e.user(tenantID, "the old password")
	nobody := name("nobody") + "@acme.test"
	for _, addr := range []string{email, nobody} {
		for range 3 {
			e.form("/auth/forgot", url.Values{"email": {addr}}, "").want(200, "")
		}
		r := e.form("/auth/forgot", url.Values{"email": {addr}}, "").want(429, "")
		if r.Header().Get("Retry-After") == "" {
			t.Errorf("%s: a 429 without Retry-After", addr)
		}
	}
	// The client address: six requests so far; four more reach its ten.
	for range 4 {
		e.form("/auth/forgot", url.Values{"email": {name("x") + "@acme.test"}}, "").want(200, "")
	}
	e.form("/auth/forgot", url.Values{"email": {name("y") + "@acme.test"}}, "").want(429, "")
	// From another client address, the same address typed is still
	// limited: the account's count is its own.
	r := e.do(req{method: http.MethodPost, host: "login.eu1.test", path: "/auth/forgot", https: true,
		header: map[string]string{"Origin": publicURL, "Content-Type": "application/x-www-form-urlencoded", "X-Test-Peer": "1"},
		body:   url.Values{"email": {email}}.Encode()})
	r.want(429, "")
	// Three messages reached the account, no more.
	e.mp.Wait(t, email, 3, 15*time.Second)
	time.Sleep(500 * time.Millisecond)
	if n := len(e.mp.To(t, email)); n != 3 {
		t.Fatalf("%d reset messages, want 3", n)
	}
}

// The answer does not wait for the relay: a relay that never answers does
// not slow it.
func TestForgotAnswersBeforeSending(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	m, err := mailer.New(mailer.Config{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, Security: mailer.SecurityNone,
		From: "no-reply@queen.test", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Mail = m; o.PublicURL = publicURL })
	tenantID, _ := e.tenant()
	_, email := e.user(tenantID, "the old password")
	start := time.Now()
	e.form("/auth/forgot", url.Values{"email": {email}}, "").want(200, "")
	took := time.Since(start)
	t.Logf("answered in %v while the relay hangs (its send times out after 20s)", took)
	if took > 10*time.Second {
		t.Fatalf("the answer waited for the relay: %v", took)
	}
}

// An account an operator creates for a typed address gets a verification
// link; following it proves the address.
func TestOperatorCreatedAccountVerifies(t *testing.T) {
	e := newMailEnv(t, func(o *Options) { o.OperatorEnabled = true })
	w := e.mailWorld()
	opTenant, _ := e.tenant()
	opID, opEmail := e.user(opTenant, "")
	e.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	addr := name("typed") + "@elsewhere.test"
	r := e.write("POST", w.host, "/api/console/members", e.token(opID), `{"email":"`+addr+`","role":"viewer"}`).want(200, "").json()
	if r["created"] != true || r["verification_email"] != "sent" {
		t.Fatalf("operator grant answer %v", r)
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
	e.page(path+"?token="+tok).want(200, "")
	if verified() != "false" {
		t.Fatal("opening the link (GET) verified the address")
	}
	e.form(path, url.Values{"token": {tok}}, "").want(200, "")
	if verified() != "true" {
		t.Fatal("the verification link did not verify")
	}
	e.form(path, url.Values{"token": {tok}}, "").want(400, "")
}

// Change password: the current one is required, the rule applies, every
// other session ends and the caller keeps a fresh one; the cross-site
// rule applies.
func TestChangePassword(t *testing.T) {
	e := newMailEnv(t)
	tenantID, _ := e.tenant()
	userID, email := e.user(tenantID, "the old password")
	other := e.token(userID)
	in := e.signIn(email, "the old password").want(303, "")
	cookie := setSession(in)
	change := func(body string, origin string) resp {
		return e.do(req{method: "POST", host: "login.eu1.test", path: "/auth/password", cookie: cookie, https: true, body: body,
			header: map[string]string{"Origin": origin}})
	}
	change(`{"current_password":"the old password","new_password":"the brand new password"}`, "https://evil.test").want(403, "csrf_rejected")
	change(`{"current_password":"not the password","new_password":"the brand new password"}`, publicURL).want(403, "forbidden")
	change(`{"current_password":"the old password","new_password":"short"}`, publicURL).want(400, "invalid_request")
	e.signIn(email, "the old password").want(303, "")
	ok := change(`{"current_password":"the old password","new_password":"the brand new password"}`, publicURL).want(200, "")
	fresh := setSession(ok)
	if fresh == "" || fresh == cookie {
		t.Fatal("the caller got no fresh session")
	}
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: other, https: true}).want(401, "unauthorized")
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: cookie, https: true}).want(401, "unauthorized")
	e.do(req{method: "GET", host: "login.eu1.test", path: "/auth/me", cookie: fresh, https: true}).want(200, "")
	e.signIn(email, "the old password").want(401, "")
	e.signIn(email, "the brand new password").want(303, "")
}

// Without e-mail configured the pages are not there and the console still
// refuses unknown addresses.
func TestMailOff(t *testing.T) {
	e := newEnv(t)
	w := e.mailWorld()
	e.page("/auth/forgot").want(404, "")
	e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"x@elsewhere.test","role":"viewer"}`).want(403, "invitation_required")
	if strings.Contains(e.page("/auth/login").Body.String(), "/auth/forgot") {
		t.Error("the sign-in page offers a reset without e-mail")
	}
}

// An invitation accepted through a provider sign-in: only for the address
// the provider verified (another address leaves it pending), creating the
// account linked to the identity, with the role.
func TestInvitationAcceptedWithGitHub(t *testing.T) {
	p := newFakeProvider(t)
	e := newMailEnv(t, func(o *Options) { o.GitHub = p.config() })
	w := e.mailWorld()
	invitee := name("gh") + "@elsewhere.test"
	e.write("POST", w.host, "/api/console/members", w.adminTok, `{"email":"`+invitee+`","role":"consumer"}`).want(202, "")
	_, tok := linkIn(t, e.mp.Wait(t, invitee, 1, 15*time.Second))
	if !strings.Contains(e.page("/auth/invitation?token="+tok).Body.String(), `data-testid="accept-with-github"`) {
		t.Fatal("the invitation page offers no GitHub acceptance")
	}
	start := e.form("/auth/invitation", url.Values{"token": {tok}, "provider": {"github"}}, "").want(303, "")
	if loc := start.Header().Get("Location"); loc != "/auth/github?next=%2Fconsole%2F" {
		t.Fatalf("accepting with GitHub went to %q", loc)
	}
	var carried string
	for _, c := range start.Result().Cookies() {
		if c.Name == invitationCookie && c.HttpOnly && c.MaxAge > 0 && c.Path == "/auth/" {
			carried = c.Name + "=" + c.Value
		}
	}
	if carried == "" {
		t.Fatalf("no invitation cookie: %v", start.Header().Values("Set-Cookie"))
	}
	e.form("/auth/invitation", url.Values{"token": {tok}, "provider": {"google"}}, "").want(400, "invalid_request")

	// GitHub verifies another address: refused, the invitation stays.
	f := e.oauthStart(w.host, "github", "/console/")
	p.codes["inv1"] = grant{challenge: f.challenge, redirect: f.redirect, sub: "7001", githubEmails: []map[string]any{
		{"email": name("other") + "@elsewhere.test", "primary": true, "verified": true}}}
	e.callback(w.host, "github", "inv1", f.state, f.cookie+"; "+carried).want(403, "forbidden")
	if l := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list(); len(l) != 1 {
		t.Fatalf("a refused provider acceptance spent the invitation: %v", l)
	}
	// Without the invitation cookie, the right address is not provisioned.
	f = e.oauthStart(w.host, "github", "/console/")
	p.codes["inv2"] = grant{challenge: f.challenge, redirect: f.redirect, sub: "7002", githubEmails: []map[string]any{
		{"email": invitee, "primary": true, "verified": true}}}
	e.callback(w.host, "github", "inv2", f.state, f.cookie).want(403, "not_provisioned")
	// With it, the account is made.
	f = e.oauthStart(w.host, "github", "/console/")
	p.codes["inv3"] = grant{challenge: f.challenge, redirect: f.redirect, sub: "7003", githubEmails: []map[string]any{
		{"email": invitee, "primary": true, "verified": true}}}
	r := e.callback(w.host, "github", "inv3", f.state, f.cookie+"; "+carried).want(303, "")
	claims, err := e.keys.Verify(sessionCookie(t, r).Value)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.scalar(`SELECT u.email || ' ' || cr.role || ' ' || (u.email_verified_at IS NOT NULL)::text || ' ' || i.provider_id
		FROM queen_proxy.users u JOIN queen_proxy.cluster_roles cr ON cr.user_id = u.id AND cr.cluster_id = $2::uuid
		JOIN queen_proxy.identities i ON i.user_id = u.id WHERE u.id = $1::uuid`, claims.UserID, w.clusterID); got != invitee+" consumer true "+p.subject("7003") {
		t.Fatalf("the account the provider acceptance made: %q", got)
	}
	if l := e.get(w.host, "/api/console/invitations", w.adminTok).want(200, "").list(); len(l) != 0 {
		t.Fatalf("the accepted invitation is still pending: %v", l)
	}
}

// TestForgotTiming measures the reset request's answer for an address an
// account has and for addresses none has (the lookup happens after the
// answer), and prints both; the answers must be the same.
func TestForgotTiming(t *testing.T) {
	e := newMailEnv(t, func(o *Options) {
		o.ResetGuard = NewLoginGuard(LoginGuardConfig{FreeFailuresIP: 1000, FreeFailuresAccount: 1000})
	})
	tenantID, _ := e.tenant()
	_, email := e.user(tenantID, "the old password")
	const n = 40
	var known, unknown []time.Duration
	var body []byte
	for i := range 2 * n {
		addr := email
		if i%2 == 1 {
			addr = name("nobody") + "@acme.test"
		}
		start := time.Now()
		r := e.form("/auth/forgot", url.Values{"email": {addr}}, "").want(200, "")
		took := time.Since(start)
		if body == nil {
			body = r.Body.Bytes()
		} else if !bytes.Equal(body, r.Body.Bytes()) {
			t.Fatalf("answer %d differs:\n%s\n%s", i, body, r.Body.String())
		}
		if addr == email {
			known = append(known, took)
		} else {
			unknown = append(unknown, took)
		}
	}
	median := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		for i := range s {
			for j := i + 1; j < len(s); j++ {
				if s[j] < s[i] {
					s[i], s[j] = s[j], s[i]
				}
			}
		}
		return s[len(s)/2]
	}
	t.Logf("reset request answered in (median of %d): %v for an address an account has, %v for addresses none has", n, median(known), median(unknown))
	e.mp.Wait(t, email, 1, 30*time.Second)
}
