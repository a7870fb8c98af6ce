package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestProductionExampleWithPebble loads Caddyfile.production.example
// verbatim, but for its CA line (the in-process Pebble ACME server instead of
// Let's Encrypt) and its DNS provider line (the test DNS provider instead of
// <provider>), with its environment variables set as an operator sets them,
// and checks what the file promises: a wildcard certificate through DNS-01
// for the first base domain, certificates on demand for live clusters of
// the second, no certificate for anything else, HTTP redirected to HTTPS,
// certificates in the state directory, password sign-in to the console
// with EdDSA sessions from the key file, the member leading its leader group,
// and the probe and metrics listeners serving only their own paths.
func TestProductionExampleWithPebble(t *testing.T) {
	dnsSrv := startTestDNS(t, "example.test")
	httpPort, httpsPort := freePort(t), freePort(t)
	pebble := startPebble(t, httpPort, httpsPort, dnsSrv.addr)

	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "prod-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	cell := startRecordingCell(t, broker, nil)
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("prod-cell", cell.srv.URL, "")
	tenant := cp.tenant("prodco")
	wild := cp.cluster(tenant, "prod-wild", cellID)
	_, wildKey := cp.key(wild.id)
	onDemand := cp.cluster(tenant, "prod-od", cellID)
	_, onDemandKey := cp.key(onDemand.id)
	const email, password = "ops@prodco.test", "a production password"
	cp.exec(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')`, tenant, email, password)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, $2, 'admin')`, onDemand.id, email)
	// The platform's operator, made as the file's header says: no
	// customer's tenant, the operator bit.
	const opEmail, opPassword = "root@ops.test", "the operator's own password"
	if r := (queenCLI{bin: caddyBinary(t), home: t.TempDir(), url: dbURL}).run(t, nil, opPassword+"\n", "user", "create", opEmail, "--operator", "--password-stdin"); r.code != 0 ||
		!strings.HasPrefix(r.stdout, `created user "root@ops.test" in tenant "platform"`) {
		t.Fatalf("user create --operator: %d %q %q", r.code, r.stdout, r.stderr)
	}
	const opHost = "ops.example.test"

	// The environment of the file's header. Base domains of their own: Caddy's
	// certificate cache is process-wide, and other tests leave certificates
	// for other names in it.
	state := t.TempDir()
	probePort, metricsPort := freePort(t), freePort(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "session-ed25519.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{
		"QUEENGATE_DATABASE_URL":    dbURL,
		"DNS_API_TOKEN":             "unused-by-the-test-provider",
		"QUEENGATE_BASE_DOMAIN":     "eu5.example.test",
		"QUEENGATE_ONDEMAND_DOMAIN": "eu6.example.test",
		"QUEENGATE_OPERATOR_HOST":   opHost,
		"QUEENGATE_ACME_EMAIL":      "ops@example.test",
		"QUEENGATE_SESSION_KEY":     keyFile,
		"QUEENGATE_STATE_DIR":       state,
		"QUEENGATE_HTTP_PORT":       fmt.Sprint(httpPort),
		"QUEENGATE_HTTPS_PORT":      fmt.Sprint(httpsPort),
		"QUEENGATE_ADMIN":           fmt.Sprintf("localhost:%d", freePort(t)),
		"QUEENGATE_GATEWAY_NAME":    "prod-gw1",
		"QUEENGATE_LEADER_GROUP":    "prod-cell-group",
		"QUEENGATE_CELL":            "prod-cell",
		"QUEENGATE_GROUP_MEMBERS":   "prod-gw1 prod-gw2",
		"QUEENGATE_PEER_LISTEN":     fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"QUEENGATE_PEER_SECRET":     "a production peer secret of at least 32 bytes",
		"QUEENGATE_PRIVATE_ADDRESS": "127.0.0.1",
		"QUEENGATE_PROBE_PORT":      fmt.Sprint(probePort),
		"QUEENGATE_METRICS_PORT":    fmt.Sprint(metricsPort),
		"QUEENGATE_LOG_LEVEL":       "ERROR",
	} {
		t.Setenv(name, value)
	}
	caddyfile := productionExample(t,
		fmt.Sprintf("\tacme_ca %s\n\tacme_ca_root %s\n", pebble.directory, pebble.apiRoot),
		fmt.Sprintf("dns queen_testdns %s\n\t\tresolvers %s", dnsSrv.addr, dnsSrv.addr))
	startGateway(t, caddyfile)

	url := func(host, path string) string { return fmt.Sprintf("https://%s:%d%s", host, httpsPort, path) }
	// through asserts a 200 relayed from the cell for the cluster and a
	// certificate from Pebble, and returns the certificate's names.
	through := func(t *testing.T, r tlsResponse, cl cluster) []string {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d body %s", cl.slug, r.status, r.body)
		}
		seen := cell.requests()
		if len(seen) == 0 || seen[len(seen)-1].tenant != cl.brokerTenant {
			t.Fatalf("%s: the cell's last request %+v is not the cluster's (x-queen-tenant %s)", cl.slug, seen, cl.brokerTenant)
		}
		if issuer := r.tls.PeerCertificates[0].Issuer.CommonName; !strings.HasPrefix(issuer, "Pebble Intermediate CA") {
			t.Fatalf("%s: issuer %q, want Pebble", cl.slug, issuer)
		}
		return r.leafNames()
	}

	t.Run("the probe listener answers with detail and nothing else", func(t *testing.T) {
		// The only member of its group: it leads once it has waited out
		// the start-up promise (leader_lease_ttl).
		probe := fmt.Sprintf("http://127.0.0.1:%d", probePort)
		eventually(t, 15*time.Second, func() error {
			r, err := http.Get(probe + "/readyz")
			if err != nil {
				return err
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			if r.StatusCode != http.StatusOK || !strings.Contains(string(b), `"role":"leader of group prod-cell-group as prod-gw1"`) {
				return fmt.Errorf("probe listener /readyz: %d %s", r.StatusCode, b)
			}
			return nil
		})
		if r := do(t, http.DefaultClient, "GET", probe+"/healthz", "", ""); r.status != http.StatusOK {
			t.Fatalf("probe listener /healthz: %d %s", r.status, r.body)
		}
		if r := do(t, http.DefaultClient, "GET", probe+"/api/v1/resources/queues", "", ""); r.status != http.StatusNotFound {
			t.Fatalf("probe listener serves %d for a data-plane path, want 404", r.status)
		}
	})

	t.Run("the metrics listener serves the gateway's metrics", func(t *testing.T) {
		metrics := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
		r := do(t, http.DefaultClient, "GET", metrics+"/metrics", "", "")
		want := `queengate_gateway_role{gateway="prod-gw1",group="prod-cell-group",role="leader"} 1`
		if r.status != http.StatusOK || !strings.Contains(string(r.body), want) {
			t.Fatalf("metrics listener: %d, want %s in:\n%s", r.status, want, r.body)
		}
		if r := do(t, http.DefaultClient, "GET", metrics+"/readyz", "", ""); r.status != http.StatusNotFound {
			t.Fatalf("metrics listener serves %d for /readyz, want 404", r.status)
		}
	})

	t.Run("a wildcard certificate through DNS-01 for the base domain", func(t *testing.T) {
		var r tlsResponse
		took := eventually(t, 90*time.Second, func() error {
			var err error
			r, err = getTLS(httpsClient(httpsPort, pebble.issued), url("prod-wild.eu5.example.test", "/api/v1/resources/queues"), wildKey)
			return err
		})
		if names := through(t, r, wild); !slices.Equal(names, []string{"*.eu5.example.test"}) {
			t.Fatalf("certificate names %v, want [*.eu5.example.test]", names)
		}
		t.Logf("wildcard *.eu5.example.test via DNS-01 served %v after the start", took.Round(time.Millisecond))
		hist := dnsSrv.history()
		if !slices.ContainsFunc(hist, func(h string) bool { return strings.HasPrefix(h, "+_acme-challenge.eu5.example.test. ") }) {
			t.Fatalf("DNS changes %v, want the challenge TXT record for eu5.example.test", hist)
		}
	})

	t.Run("certificates on demand for live clusters of the other base domain", func(t *testing.T) {
		host := "prod-od.eu6.example.test"
		r := mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host, "/api/v1/resources/queues"), onDemandKey)
		if names := through(t, r, onDemand); !slices.Equal(names, []string{host}) {
			t.Fatalf("certificate names %v, want [%s]", names, host)
		}
		for _, refused := range []string{"nosuch.eu6.example.test", "prod-od.eu7.example.test", "example.org"} {
			assertHandshakeRefused(t, refused, handshake(httpsPort, refused))
		}
		if got := pebble.ordered(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"*.eu5.example.test", opHost, host}) {
			t.Fatalf("Pebble received orders for %v, want the wildcard, the operator host and %s only", got, host)
		}
	})

	t.Run("HTTP is redirected to HTTPS", func(t *testing.T) {
		c := client(httpPort)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		r := do(t, c, "GET", fmt.Sprintf("http://prod-od.eu6.example.test:%d/api/v1/resources/queues", httpPort), "", "")
		if r.status != http.StatusPermanentRedirect || !strings.HasPrefix(r.header.Get("Location"), "https://prod-od.eu6.example.test") {
			t.Fatalf("plain HTTP: %d Location %q, want a redirect to https", r.status, r.header.Get("Location"))
		}
	})

	t.Run("certificates and the ACME account are in the state directory", func(t *testing.T) {
		var certs []string
		err := filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, ".crt") {
				certs = append(certs, filepath.Base(path))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"wildcard_.eu5.example.test.crt", "prod-od.eu6.example.test.crt"} {
			if !slices.Contains(certs, want) {
				t.Fatalf("certificates in %s: %v, want %s among them", state, certs, want)
			}
		}
	})

	t.Run("password sign-in to the console over HTTPS", func(t *testing.T) {
		c := httpsClient(httpsPort, pebble.issued)
		cc := consoleClient{t: t, c: c, origin: fmt.Sprintf("https://prod-od.eu6.example.test:%d", httpsPort)}
		if r := cc.do("GET", "/console/", "", "", ""); r.status != http.StatusFound || !strings.HasPrefix(r.header.Get("Location"), "/auth/login?next=") {
			t.Fatalf("console without a session: %d %s", r.status, r.header.Get("Location"))
		}
		session := cc.login(email, password)
		o := cc.do("GET", "/api/console/overview", session, "", "").json(t)
		if o["slug"] != "prod-od" || o["role"] != "admin" {
			t.Fatalf("console overview %v", o)
		}
		jwks := cc.do("GET", "/.well-known/jwks.json", "", "", "")
		if jwks.status != http.StatusOK || !strings.Contains(string(jwks.body), `"EdDSA"`) {
			t.Fatalf("JWKS: %d %s, want the session key file's EdDSA key", jwks.status, jwks.body)
		}
	})

	t.Run("the operator signs in on the operator host and reaches the fleet", func(t *testing.T) {
		c := httpsClient(httpsPort, pebble.issued)
		// The host's certificate is obtained at start, in the background.
		eventually(t, 90*time.Second, func() error {
			_, err := getTLS(c, url(opHost, "/auth/login"), "")
			return err
		})
		cc := consoleClient{t: t, c: c, origin: fmt.Sprintf("https://%s:%d", opHost, httpsPort)}
		// Nobody else sees the fleet there: signed out, or a cluster's admin.
		if r := cc.do("GET", "/api/operator/cells", "", "", ""); r.status != http.StatusNotFound {
			t.Fatalf("fleet signed out: %d %s", r.status, r.body)
		}
		if r := cc.do("GET", "/api/operator/cells", cc.login(email, password), "", ""); r.status != http.StatusNotFound {
			t.Fatalf("fleet for a cluster admin: %d %s", r.status, r.body)
		}
		session := cc.login(opEmail, opPassword)
		if r := cc.do("GET", "/console/fleet", session, "", ""); r.status != http.StatusOK || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("fleet page: %d %s", r.status, r.header.Get("Content-Type"))
		}
		cells := cc.do("GET", "/api/operator/cells", session, "", "").json(t)
		if cs, _ := cells["cells"].([]any); len(cs) != 1 || cs[0].(map[string]any)["slug"] != "prod-cell" {
			t.Fatalf("fleet cells %v, want prod-cell", cells)
		}
		var slugs []string
		for _, tn := range cc.do("GET", "/api/operator/tenants", session, "", "").json(t)["tenants"].([]any) {
			slugs = append(slugs, tn.(map[string]any)["slug"].(string))
		}
		if strings.Join(slugs, ",") != "platform,prodco" {
			t.Fatalf("fleet tenants %v, want platform and prodco", slugs)
		}
		// On the operator host the console names no cluster: the operator
		// picks one of every cluster.
		me := cc.do("GET", "/auth/me", session, "", "").json(t)
		if me["acting_cluster"] != nil || len(me["clusters"].([]any)) != 2 {
			t.Fatalf("/auth/me on the operator host %v, want no acting cluster and both clusters", me)
		}
		// The operator host is console_only: a live key of a cluster gets
		// no data plane there, and nothing reaches the cell.
		seen := len(cell.requests())
		r, err := getTLS(c, url(opHost, "/api/v1/resources/queues"), wildKey)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusMisdirectedRequest || !strings.Contains(string(r.body), `"code":"console_only_host"`) {
			t.Fatalf("a cluster's key on the operator host: %d %s, want 421 console_only_host", r.status, r.body)
		}
		if n := len(cell.requests()); n != seen {
			t.Fatalf("%d requests reached the cell through the operator host", n-seen)
		}
	})
}
