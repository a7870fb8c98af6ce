package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// pebbleCA is a Pebble ACME server running inside the test process.
type pebbleCA struct {
	directory string         // ACME directory URL
	apiRoot   string         // PEM file of the certificate of Pebble's HTTPS API, for acme_ca_root
	issued    *x509.CertPool // the root the certificates Pebble issues chain to

	mu     sync.Mutex
	orders []string // the identifiers of every new order, in order
}

// startPebble runs Pebble's CA, validation authority and ACME front end in
// this process. Its validation authority checks HTTP-01 on httpPort,
// TLS-ALPN-01 on httpsPort and resolves names (and DNS-01 TXT records)
// through the DNS server at dnsAddr.
func startPebble(t *testing.T, httpPort, httpsPort int, dnsAddr string) *pebbleCA {
	t.Helper()
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")      // no random validation delays
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0") // no deliberately rejected nonces
	t.Setenv("PEBBLE_AUTHZREUSE", "0")      // every order is validated afresh
	out := io.Discard
	if os.Getenv("QUEENGATE_TEST_PEBBLE_LOG") != "" {
		out = os.Stderr
	}
	logger := log.New(out, "pebble ", log.Lmicroseconds)
	store := db.NewMemoryStore()
	profiles := map[string]ca.Profile{"default": {Description: "queengate tests"}}
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, profiles)
	validator := va.New(logger, httpPort, httpsPort, false, dnsAddr, store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 1, 1)

	p := &pebbleCA{}
	handler := front.Handler()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/order-plz" {
			p.recordOrder(r)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	p.directory = srv.URL + "/dir"
	p.apiRoot = filepath.Join(t.TempDir(), "pebble-api.pem")
	if err := os.WriteFile(p.apiRoot, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	p.issued = x509.NewCertPool()
	if !p.issued.AppendCertsFromPEM(authority.GetRootCert(0).PEM()) {
		t.Fatal("pebble root is not PEM")
	}
	return p
}

// recordOrder notes the identifiers of a new-order request (a JWS whose
// payload is {"identifiers":[{"type":"dns","value":...}]}) and leaves the
// body for Pebble to read.
func (p *pebbleCA) recordOrder(r *http.Request) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	var jws struct {
		Payload string `json:"payload"`
	}
	var order struct {
		Identifiers []struct {
			Value string `json:"value"`
		} `json:"identifiers"`
	}
	if json.Unmarshal(body, &jws) != nil {
		return
	}
	payload, err := base64.RawURLEncoding.DecodeString(jws.Payload)
	if err != nil || json.Unmarshal(payload, &order) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range order.Identifiers {
		p.orders = append(p.orders, id.Value)
	}
}

func (p *pebbleCA) ordered() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.orders...)
}

// acmeCaddyfile is a gateway whose certificates come from the Pebble ACME
// server: on demand for cluster hostnames the permission module allows,
// and, with wildcardSite, a wildcard certificate for *.eu3.example.test
// through DNS-01 with the test DNS provider.
func acmeCaddyfile(httpPort, httpsPort int, storage string, p *pebbleCA, databaseURL, wildcardSite string) string {
	return fmt.Sprintf(`{
	admin off
	persist_config off
	skip_install_trust
	http_port %d
	https_port %d
	default_bind 127.0.0.1
	storage file_system %s
	acme_ca %s
	acme_ca_root %s
	email ops@example.test
	log {
		level ERROR
	}
	on_demand_tls {
		permission queen
	}
	queen {
		database_url %s
		base_domain eu2.example.test eu3.example.test
	}
}
%s
https:// {
	tls {
		on_demand
	}
	queen_gateway
}
`, httpPort, httpsPort, storage, p.directory, p.apiRoot, databaseURL, wildcardSite)
}

// reloadGateway replaces the running configuration, as `caddy reload`
// does: the process (and Caddy's certificate cache) stays.
func reloadGateway(t *testing.T, caddyfile string) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapt Caddyfile: %v\n%s", err, caddyfile)
	}
	if err := caddy.Load(cfg, false); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// TestPebbleOnDemandAndWildcardCertificates runs real ACME flows against an
// in-process Pebble: on-demand certificates for cluster hostnames (HTTP-01
// or TLS-ALPN-01, whichever Caddy picks), a wildcard certificate through
// DNS-01 with a test DNS provider, and what is served when both cover a
// name.
func TestPebbleOnDemandAndWildcardCertificates(t *testing.T) {
	dnsSrv := startTestDNS(t, "example.test")
	httpPort, httpsPort := freePort(t), freePort(t)
	pebble := startPebble(t, httpPort, httpsPort, dnsSrv.addr)

	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "acme-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	cell := startRecordingCell(t, broker, nil)
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("acme-cell", cell.srv.URL, "")
	tenant := cp.tenant("pebble")
	keys := map[string]string{}
	tenants := map[string]string{}
	for _, slug := range []string{"pebble-od", "pebble-both", "wild-a", "wild-b"} {
		cl := cp.cluster(tenant, slug, cellID)
		_, keys[slug] = cp.key(cl.id)
		tenants[slug] = cl.brokerTenant
	}
	cp.exec(`SELECT queen_proxy.set_cluster_status((SELECT id FROM queen_proxy.clusters WHERE slug = 'wild-b'), 'deleting')`)

	storage := t.TempDir()
	wildcardSite := fmt.Sprintf(`*.eu3.example.test {
	tls {
		dns queen_testdns %s
		resolvers %s
	}
	queen_gateway
}`, dnsSrv.addr, dnsSrv.addr)
	onDemandOnly := acmeCaddyfile(httpPort, httpsPort, storage, pebble, dbURL, "")
	withWildcard := acmeCaddyfile(httpPort, httpsPort, storage, pebble, dbURL, wildcardSite)
	url := func(host string) string {
		return fmt.Sprintf("https://%s:%d/api/v1/resources/queues", host, httpsPort)
	}
	// through asserts a 200 relayed from the cell for the cluster and
	// returns the certificate's serial and names.
	through := func(t *testing.T, r tlsResponse, slug string) (serial string, names []string) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d body %s", slug, r.status, r.body)
		}
		seen := cell.requests()
		if len(seen) == 0 || seen[len(seen)-1].tenant != tenants[slug] {
			t.Fatalf("%s: the cell's last request %+v is not the cluster's (x-queen-tenant %s)", slug, seen, tenants[slug])
		}
		leaf := r.tls.PeerCertificates[0]
		if !strings.HasPrefix(leaf.Issuer.CommonName, "Pebble Intermediate CA") {
			t.Fatalf("%s: issuer %q, want Pebble", slug, leaf.Issuer.CommonName)
		}
		return leaf.SerialNumber.String(), leaf.DNSNames
	}
	serials := map[string]string{}

	startGateway(t, onDemandOnly)

	t.Run("on-demand issuance for a cluster hostname", func(t *testing.T) {
		host := "pebble-od.eu2.example.test"
		first := mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-od"])
		serial, names := through(t, first, "pebble-od")
		if !slices.Equal(names, []string{host}) {
			t.Fatalf("certificate names %v, want [%s]", names, host)
		}
		serials[host] = serial
		warm := mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-od"])
		through(t, warm, "pebble-od")
		ttfbLine(t, "Pebble ACME on loopback, first order: includes registering the ACME account", host, first.ttfb, warm.ttfb)
	})

	t.Run("no ACME order for names that are not live clusters", func(t *testing.T) {
		for _, host := range []string{"nosuch.eu2.example.test", "wild-b.eu2.example.test", "x.pebble-od.eu2.example.test", "pebble-od.eu1.example.test"} {
			assertHandshakeRefused(t, host, handshake(httpsPort, host))
		}
		if got := pebble.ordered(); !slices.Equal(got, []string{"pebble-od.eu2.example.test"}) {
			t.Fatalf("Pebble received orders for %v, want only pebble-od.eu2.example.test", got)
		}
	})

	t.Run("on-demand issuance under a base domain that will get a wildcard", func(t *testing.T) {
		host := "pebble-both.eu3.example.test"
		first := mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-both"])
		serial, names := through(t, first, "pebble-both")
		if !slices.Equal(names, []string{host}) {
			t.Fatalf("certificate names %v, want [%s]", names, host)
		}
		serials[host] = serial
		t.Logf("TTFB never-seen cluster hostname (Pebble ACME on loopback, second order): %s first request %v",
			host, first.ttfb.Round(100*time.Microsecond))
	})

	reloadGateway(t, withWildcard)

	t.Run("a wildcard certificate through DNS-01", func(t *testing.T) {
		host := "wild-a.eu3.example.test"
		var r tlsResponse
		took := eventually(t, 90*time.Second, func() error {
			var err error
			r, err = getTLS(httpsClient(httpsPort, pebble.issued), url(host), keys["wild-a"])
			return err
		})
		_, names := through(t, r, "wild-a")
		if !slices.Equal(names, []string{"*.eu3.example.test"}) {
			t.Fatalf("certificate names %v, want [*.eu3.example.test]", names)
		}
		t.Logf("wildcard *.eu3.example.test via DNS-01 served %v after the reload", took.Round(time.Millisecond))
		challenge := "_acme-challenge.eu3.example.test."
		hist := dnsSrv.history()
		set := slices.IndexFunc(hist, func(h string) bool { return strings.HasPrefix(h, "+"+challenge+" ") })
		cleared := slices.Index(hist, "-"+challenge)
		if set < 0 || cleared < set {
			t.Fatalf("DNS changes %v, want the challenge TXT record at %s set and then removed", hist, challenge)
		}
		if got := pebble.ordered(); !slices.Contains(got, "*.eu3.example.test") {
			t.Fatalf("Pebble orders %v have no *.eu3.example.test", got)
		}
	})

	t.Run("the wildcard covers every name under its base domain", func(t *testing.T) {
		ordersBefore := len(pebble.ordered())
		// A cluster being deleted, and a slug with no cluster, complete the
		// handshake with the wildcard: it is the gateway that refuses them.
		r := mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url("wild-b.eu3.example.test"), keys["wild-b"])
		assertRefusal(t, r.response, http.StatusForbidden, "cluster_suspended")
		if names := r.leafNames(); !slices.Equal(names, []string{"*.eu3.example.test"}) {
			t.Fatalf("wild-b: certificate names %v", names)
		}
		r = mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url("nosuch.eu3.example.test"), keys["wild-a"])
		assertRefusal(t, r.response, http.StatusMisdirectedRequest, "cluster_unknown")
		if n := len(pebble.ordered()); n != ordersBefore {
			t.Fatalf("names under the wildcard caused %d new orders", n-ordersBefore)
		}
	})

	t.Run("an exact on-demand certificate in memory wins over the wildcard", func(t *testing.T) {
		host := "pebble-both.eu3.example.test"
		serial, names := through(t, mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-both"]), "pebble-both")
		if !slices.Equal(names, []string{host}) || serial != serials[host] {
			t.Fatalf("served %v (serial %s), want the exact on-demand certificate (serial %s)", names, serial, serials[host])
		}
	})

	t.Run("after a restart the wildcard serves its base domain and on-demand certificates load from storage", func(t *testing.T) {
		ordersBefore := len(pebble.ordered())
		if err := caddy.Stop(); err != nil {
			t.Fatal(err)
		}
		startGateway(t, withWildcard)
		host := "pebble-both.eu3.example.test"
		var r tlsResponse
		eventually(t, 30*time.Second, func() error {
			var err error
			r, err = getTLS(httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-both"])
			return err
		})
		if _, names := through(t, r, "pebble-both"); !slices.Equal(names, []string{"*.eu3.example.test"}) {
			t.Fatalf("%s after restart: certificate names %v, want the wildcard", host, names)
		}
		host = "pebble-od.eu2.example.test"
		serial, names := through(t, mustGetTLS(t, httpsClient(httpsPort, pebble.issued), url(host), keys["pebble-od"]), "pebble-od")
		if !slices.Equal(names, []string{host}) || serial != serials[host] {
			t.Fatalf("%s after restart: %v (serial %s), want the stored on-demand certificate (serial %s)", host, names, serial, serials[host])
		}
		if got := pebble.ordered(); len(got) != ordersBefore {
			t.Fatalf("the restart caused new orders: %v", got[ordersBefore:])
		}
	})
}
