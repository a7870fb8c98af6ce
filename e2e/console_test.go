package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// consoleClient is a browser-like client of one cluster host: it keeps no
// cookie jar (each call names the session), never follows redirects, and
// sends the same-origin Origin on writes.
type consoleClient struct {
	t      *testing.T
	c      *http.Client
	origin string
}

func (cc consoleClient) do(method, path, cookie, contentType, body string) response {
	cc.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, cc.origin+path, rd)
	if err != nil {
		cc.t.Fatal(err)
	}
	if cookie != "" {
		req.Header.Set("Cookie", "queen_session="+cookie)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", cc.origin)
		req.Header.Set("X-Requested-With", "queengate")
	}
	resp, err := cc.c.Do(req)
	if err != nil {
		cc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// login signs in with the form and returns the session cookie's value.
func (cc consoleClient) login(email, password string) string {
	cc.t.Helper()
	form := url.Values{"email": {email}, "password": {password}, "next": {"/console/"}}
	r := cc.do("POST", "/auth/login", "", "application/x-www-form-urlencoded", form.Encode())
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/console/" {
		cc.t.Fatalf("login: %d %s %s", r.status, r.header.Get("Location"), r.body)
	}
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "queen_session" && c.HttpOnly && c.SameSite == http.SameSiteLaxMode {
			return c.Value
		}
	}
	cc.t.Fatalf("login set no HttpOnly SameSite=Lax session cookie: %v", r.header.Values("Set-Cookie"))
	return ""
}

// TestConsoleThroughCaddy drives the identity and console surfaces through
// a real Caddy: sign in with a password, read /auth/me, push through the
// data plane, create a key in the console and push with it, revoke it and
// see the next push refused within a second, log out and see the old
// cookie refused, and see the pushes in the console's usage.
func TestConsoleThroughCaddy(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "console-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("console-cell", broker.URL(), "")
	tenant := cp.tenant("consoleco")
	cl := cp.cluster(tenant, "consoleco-prod", cell)
	_, key := cp.key(cl.id)
	const email, password = "grace@consoleco.test", "a long enough password"
	cp.exec(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')`, tenant, email, password)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, $2, 'admin')`, cl.id, email)

	port := freePort(t)
	app := fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		session {
			hs256_secret 0123456789abcdef0123456789abcdef-e2e-console
		}
		identity {
		}`, t.TempDir())
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), app, ""))
	c := client(port)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	origin := fmt.Sprintf("http://%s.eu1.example.test:%d", cl.slug, port)
	cc := consoleClient{t: t, c: c, origin: origin}

	// The app wants a session.
	if r := cc.do("GET", "/console/", "", "", ""); r.status != http.StatusFound || !strings.HasPrefix(r.header.Get("Location"), "/auth/login?next=") {
		t.Fatalf("console without a session: %d %s", r.status, r.header.Get("Location"))
	}
	if r := cc.do("GET", "/auth/login?next=/console/", "", "", ""); r.status != 200 || !strings.Contains(string(r.body), "<form") ||
		r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Queen-Request-Id") == "" {
		t.Fatalf("login page: %d %v", r.status, r.header)
	}
	if r := cc.do("POST", "/auth/login", "", "application/x-www-form-urlencoded", "email="+email+"&password=wrong"); r.status != http.StatusUnauthorized ||
		!strings.Contains(string(r.body), "Invalid email or password.") {
		t.Fatalf("wrong password: %d %s", r.status, r.body)
	}
	session := cc.login(email, password)
	if r := cc.do("GET", "/console/", session, "", ""); r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("console with a session: %d", r.status)
	}
	if r := cc.do("GET", "/console/js/main.js", session, "", ""); r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("the app's script: %d %s", r.status, r.header.Get("Content-Type"))
	}
	me := cc.do("GET", "/auth/me", session, "", "")
	if me.status != 200 {
		t.Fatalf("/auth/me: %d %s", me.status, me.body)
	}
	if m := me.json(t); m["email"] != email || m["acting_cluster"].(map[string]any)["slug"] != cl.slug {
		t.Fatalf("/auth/me: %s", me.body)
	}

	// Pushes through the data plane, metered.
	pushed := int64(0)
	for i, n := range []int{2, 3} {
		items := make([]string, n)
		for j := range items {
			items[j] = fmt.Sprintf(`{"queue":"console-orders","payload":{"b":%d,"i":%d}}`, i, j)
		}
		r := do(t, c, "POST", origin+"/api/v1/push", key, `{"items":[`+strings.Join(items, ",")+`]}`)
		pushed += acceptedItems(r)
	}
	if pushed != 5 {
		t.Fatalf("%d of 5 items stored", pushed)
	}

	// A key made in the console works on the data plane at once.
	created := cc.do("POST", "/api/console/keys", session, "application/json", `{"name":"from the console","scopes":["produce"]}`)
	if created.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", created.status, created.body)
	}
	var newKey struct{ ID, Key string }
	if err := json.Unmarshal(created.body, &newKey); err != nil || !strings.HasPrefix(newKey.Key, "qk_live_") {
		t.Fatalf("created %s", created.body)
	}
	push := func() response {
		return do(t, c, "POST", origin+"/api/v1/push", newKey.Key, `{"items":[{"queue":"console-orders","payload":"with the console's key"}]}`)
	}
	if r := push(); acceptedItems(r) != 1 {
		t.Fatalf("push with the console's key: %d %s", r.status, r.body)
	}
	pushed++
	// Cross-origin writes are refused.
	req, _ := http.NewRequest("DELETE", origin+"/api/console/keys/"+newKey.ID, nil)
	req.Header.Set("Cookie", "queen_session="+session)
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin revoke: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Revoked in the console, refused on the data plane within a second.
	if r := cc.do("DELETE", "/api/console/keys/"+newKey.ID, session, "", ""); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	took := eventually(t, time.Second, func() error {
		if r := push(); r.status != http.StatusUnauthorized {
			pushed += acceptedItems(r)
			return fmt.Errorf("push answered %d", r.status)
		}
		return nil
	})
	assertRefusal(t, push(), http.StatusUnauthorized, "unauthorized")
	t.Logf("revoked key refused after %v", took)

	// Logging out refuses the old cookie; another session lives on.
	other := cc.login(email, password)
	if r := cc.do("POST", "/auth/logout", session, "", ""); r.status != 200 || !strings.Contains(string(r.body), `"ok":true`) {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	assertRefusal(t, cc.do("GET", "/api/console/overview", session, "", ""), http.StatusUnauthorized, "unauthorized")
	if r := cc.do("GET", "/console/", session, "", ""); r.status != http.StatusFound {
		t.Fatalf("console with the old cookie: %d", r.status)
	}
	if r := cc.do("GET", "/api/console/overview", other, "", ""); r.status != 200 {
		t.Fatalf("the other session: %d %s", r.status, r.body)
	}

	// The pushes are in the console's usage: at once from the meter's
	// unwritten counts, and the same once their minute is flushed.
	pushUsage := func() (msgs int64, live bool, err error) {
		r := cc.do("GET", "/api/console/usage?hours=1", other, "", "")
		if r.status != 200 {
			return 0, false, fmt.Errorf("usage: %d %s", r.status, r.body)
		}
		var u struct {
			Minutes []struct {
				Op   string
				Msgs int64
				Live bool
			}
		}
		if err := json.Unmarshal(r.body, &u); err != nil {
			return 0, false, err
		}
		for _, m := range u.Minutes {
			if m.Op == "push" {
				msgs += m.Msgs
				live = live || m.Live
			}
		}
		return msgs, live, nil
	}
	if msgs, _, err := pushUsage(); err != nil || msgs != pushed {
		t.Fatalf("usage shows %d pushed messages (%v), want %d", msgs, err, pushed)
	}
	pollEvery(t, 90*time.Second, time.Second, func() error {
		msgs, live, err := pushUsage()
		switch {
		case err != nil:
			return err
		case msgs > pushed:
			t.Fatalf("usage shows %d pushed messages, want %d (counted twice?)", msgs, pushed)
		case msgs < pushed:
			// For an instant while the meter writes a minute, the
			// minute is in neither place.
			return fmt.Errorf("usage shows %d pushed messages, want %d", msgs, pushed)
		case live:
			return fmt.Errorf("the pushes' minute is not flushed yet")
		}
		return nil
	})
	o := cc.do("GET", "/api/console/overview", other, "", "").json(t)
	if u := o["usage"].(map[string]any); u["msgs"] != float64(pushed) || o["role"] != "admin" || o["slug"] != cl.slug {
		t.Fatalf("overview %v, want %d messages this month", o, pushed)
	}
}

// pollEvery retries check every interval until it passes or within has
// gone by.
func pollEvery(t *testing.T, within, interval time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(interval)
	}
}

// TestConsoleBootstrapThroughCaddy: the identity block's bootstrap makes a
// tenant, cluster, admin and known key at start; the admin signs in, the
// key pushes; a reload runs it again and changes nothing.
func TestConsoleBootstrapThroughCaddy(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "boot-cell", Tenancy: fakebroker.TenancyRust})
	cp := newControlPlane(t, pgtest.URL(t))
	cp.cell("boot-cell", broker.URL(), "")
	const key = "qk_env_bootstrapbootstrapbootstrapbootstrap0123"
	t.Setenv("QG_E2E_BOOT_PASSWORD", "bootstrap password")
	port := freePort(t)
	app := fmt.Sprintf(`spool_dir %s
		session {
			hs256_secret 0123456789abcdef0123456789abcdef-e2e-boot
		}
		identity {
			bootstrap {
				tenant bootco
				email admin@bootco.test
				password {env.QG_E2E_BOOT_PASSWORD}
				plan free
				cell boot-cell
				api_key %s
			}
		}`, t.TempDir(), key)
	cfg := gatewayCaddyfile(port, pgtest.URL(t), app, "")
	startGateway(t, cfg)
	c := client(port)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cc := consoleClient{t: t, c: c, origin: fmt.Sprintf("http://bootco.eu1.example.test:%d", port)}
	session := cc.login("admin@bootco.test", "bootstrap password")
	o := cc.do("GET", "/api/console/overview", session, "", "").json(t)
	if o["role"] != "admin" || o["slug"] != "bootco" || o["plan"].(map[string]any)["code"] != "free" {
		t.Fatalf("overview %v", o)
	}
	if r := do(t, c, "POST", cc.origin+"/api/v1/push", key, `{"items":[{"queue":"boot","payload":1}]}`); acceptedItems(r) != 1 {
		t.Fatalf("push with the bootstrap key: %d %s", r.status, r.body)
	}
	keys := cp.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys k JOIN queen_proxy.clusters c ON c.id = k.cluster_id WHERE c.slug = 'bootco'`)
	// Again, as a reload does: nothing new.
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err != nil {
		t.Fatal(err)
	}
	if again := cp.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys k JOIN queen_proxy.clusters c ON c.id = k.cluster_id WHERE c.slug = 'bootco'`); again != keys || keys != "2" {
		t.Fatalf("keys %s then %s, want 2 both times", keys, again)
	}
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.users WHERE email = 'admin@bootco.test'`); n != "1" {
		t.Fatalf("%s admins", n)
	}
}
