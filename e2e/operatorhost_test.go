package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestOperatorHostServesOnlyTheConsole runs a real Caddy with three kinds
// of site: cluster hostnames under the base domain, a shared data-plane
// host (api.), and the operators' host with console_only. A live key of a
// cluster is served on its own hostname and on the shared host, and
// refused on the operators' host with 421 console_only_host before
// anything reaches the cell, on every data-plane route and whether or not
// a credential is shown; the console, identity and operator routes answer
// there as before, and the host's root leads to the console.
func TestOperatorHostServesOnlyTheConsole(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "ops-cell", Tenancy: fakebroker.TenancyRust})
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	cell := cp.cell("ops-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("opsco"), "opsco-prod", cell)
	_, key := cp.key(cl.id)
	const opEmail, opPassword = "op@platform.test", "operator horse battery staple"
	if _, err := controlplane.CreateUser(context.Background(), cp.pool,
		controlplane.NewUser{Email: opEmail, Password: opPassword, Operator: true}); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	const opsHost, apiHost = "ops.example.test", "api.example.test"
	startGateway(t, fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	log {
		level ERROR
	}
	queen {
		database_url %s
		base_domain eu1.example.test
		spool_dir %s
		operator_enabled
		session {
			hs256_secret 0123456789abcdef0123456789abcdef-e2e-opshost
		}
		identity {
			operator_api
		}
	}
}
http://%s {
	queen_gateway {
		shared_hosts %s
		console_only
	}
}
http://%s {
	queen_gateway {
		shared_hosts %s
	}
}
http:// {
	queen_gateway
}
`, port, url, t.TempDir(), opsHost, opsHost, apiHost, apiHost))

	c := client(port)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	push := func(host string) response {
		return do(t, c, "POST", fmt.Sprintf("http://%s:%d/api/v1/push", host, port), key,
			`{"items":[{"queue":"orders","payload":{"n":1}}]}`)
	}
	pushesSeen := func() int {
		n := 0
		for _, r := range forwarded(broker) {
			if r.Path == "/api/v1/push" {
				n++
			}
		}
		return n
	}

	// The key is live: served on its cluster's hostname and on the shared
	// data-plane host.
	for _, host := range []string{cl.slug + ".eu1.example.test", apiHost} {
		if r := push(host); acceptedItems(r) != 1 {
			t.Fatalf("push with a live key on %s: %d %s", host, r.status, r.body)
		}
	}
	before := pushesSeen()

	// On the operators' host every data-plane route is refused, with a key,
	// a bad key or none, and nothing reaches the cell.
	opsURL := fmt.Sprintf("http://%s:%d", opsHost, port)
	for _, tc := range []struct{ method, path, key, body string }{
		{"POST", "/api/v1/push", key, `{"items":[{"queue":"orders","payload":{}}]}`},
		{"GET", "/api/v1/pop/queue/orders?batch=1&wait=false", key, ""},
		{"GET", "/api/v1/resources/queues", key, ""},
		{"POST", "/api/v1/push", "qk_test_not_a_key", `{"items":[]}`},
		{"GET", "/api/v1/resources/queues", "", ""},
		{"GET", "/health", "", ""},
		{"GET", "/metrics", key, ""},
	} {
		r := do(t, c, tc.method, opsURL+tc.path, tc.key, tc.body)
		assertRefusal(t, r, http.StatusMisdirectedRequest, "console_only_host")
		if !strings.Contains(r.json(t)["error"].(string), "cluster's own hostname") {
			t.Fatalf("%s %s on the operators' host: the refusal does not say where to go: %s", tc.method, tc.path, r.body)
		}
	}
	if after := pushesSeen(); after != before {
		t.Fatalf("%d pushes reached the cell through the operators' host", after-before)
	}

	// The operators' surface answers there: the root leads to the console,
	// sign-in, /auth/me, the fleet.
	cc := consoleClient{t: t, c: c, origin: opsURL}
	if r := cc.do("GET", "/", "", "", ""); r.status != http.StatusFound || r.header.Get("Location") != "/console/" {
		t.Fatalf("GET / on the operators' host: %d %q, want 302 to /console/", r.status, r.header.Get("Location"))
	}
	if r := cc.do("GET", "/console/", "", "", ""); r.status != http.StatusFound || !strings.HasPrefix(r.header.Get("Location"), "/auth/login?next=") {
		t.Fatalf("GET /console/ without a session: %d %q", r.status, r.header.Get("Location"))
	}
	cookie := cc.login(opEmail, opPassword)
	if r := cc.do("GET", "/auth/me", cookie, "", ""); r.status != http.StatusOK || r.json(t)["fleet_view"] != true {
		t.Fatalf("/auth/me of the operator on the operators' host: %d %s", r.status, r.body)
	}
	r := cc.do("GET", "/api/operator/tenants", cookie, "", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"opsco-prod"`) {
		t.Fatalf("the fleet on the operators' host: %d %s", r.status, r.body)
	}
	if r := cc.do("GET", "/readyz", "", "", ""); r.status != http.StatusOK {
		t.Fatalf("/readyz on the operators' host: %d %s", r.status, r.body)
	}

	// console_only without the identity surface is a configuration error,
	// not a host that refuses everything.
	cfg := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\thttp_port %d\n\tqueen {\n\t\tdatabase_url %s\n\t}\n}\nhttp://%s {\n\tqueen_gateway {\n\t\tconsole_only\n\t}\n}\n",
		freePort(t), url, opsHost)
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(adapted, true); err == nil {
		_ = caddy.Stop()
		t.Fatal("console_only without an identity block loaded")
	} else if !strings.Contains(err.Error(), "console_only") {
		t.Fatalf("console_only without an identity block: %v", err)
	}
}
