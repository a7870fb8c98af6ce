package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// tlsInternalCaddyfile is a gateway that obtains a certificate from Caddy's
// local CA during the TLS handshake for any name the queen permission
// module allows.
func tlsInternalCaddyfile(httpPort, httpsPort int, storage, databaseURL string) string {
	return fmt.Sprintf(`{
	admin off
	persist_config off
	skip_install_trust
	http_port %d
	https_port %d
	default_bind 127.0.0.1
	storage file_system %s
	log {
		level ERROR
	}
	on_demand_tls {
		permission queen
	}
	queen {
		database_url %s
		base_domain eu1.example.test
	}
}
https:// {
	tls internal {
		on_demand
	}
	queen_gateway
}
`, httpPort, httpsPort, storage, databaseURL)
}

// TestTLSInternalOnDemandForClusterHostnames loads `tls internal` with
// on-demand issuance gated by the queen permission module, and checks who
// gets a certificate, what HTTPS looks like to clients, and what the cell
// sees.
func TestTLSInternalOnDemandForClusterHostnames(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "tls-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	cell := startRecordingCell(t, broker, nil)

	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("tls-cell", cell.srv.URL, "")
	tenant := cp.tenant("tls-tenant")
	prod := cp.cluster(tenant, "acme-prod", cellID)
	paused := cp.cluster(tenant, "acme-paused", cellID)
	doomed := cp.cluster(tenant, "acme-doomed", cellID)
	closing := cp.cluster(tenant, "acme-closing", cellID)
	cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, paused.id)
	cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'deleting')`, doomed.id)
	_, prodKey := cp.key(prod.id)
	_, pausedKey := cp.key(paused.id)
	_, closingKey := cp.key(closing.id)

	httpPort, httpsPort := freePort(t), freePort(t)
	storage := t.TempDir()
	startGateway(t, tlsInternalCaddyfile(httpPort, httpsPort, storage, dbURL))
	roots := localCARoot(t, storage)
	url := func(host, path string) string { return fmt.Sprintf("https://%s:%d%s", host, httpsPort, path) }
	const queues = "/api/v1/resources/queues"

	t.Run("a cluster hostname gets a certificate at handshake time and reaches its cell", func(t *testing.T) {
		host := "acme-prod.eu1.example.test"
		first := mustGetTLS(t, httpsClient(httpsPort, roots), url(host, queues), prodKey)
		if first.status != http.StatusOK {
			t.Fatalf("status %d body %s", first.status, first.body)
		}
		if names := first.leafNames(); !slices.Equal(names, []string{host}) {
			t.Fatalf("certificate names %v, want exactly [%s]", names, host)
		}
		seen := cell.requests()
		if len(seen) != 1 || seen[0].tenant != prod.brokerTenant {
			t.Fatalf("cell saw %+v, want one request with x-queen-tenant %s", seen, prod.brokerTenant)
		}
		if first.header.Get("X-Queen-Request-Id") == "" {
			t.Error("no x-queen-request-id on the relayed response")
		}
		warm := mustGetTLS(t, httpsClient(httpsPort, roots), url(host, queues), prodKey)
		if warm.status != http.StatusOK {
			t.Fatalf("second connection: status %d", warm.status)
		}
		ttfbLine(t, "Caddy local CA, tls internal", host, first.ttfb, warm.ttfb)
	})

	t.Run("HTTP/2 to clients, HTTP/1.1 keep-alive to the cell", func(t *testing.T) {
		cell.reset()
		c := httpsClient(httpsPort, roots)
		for range 3 {
			r := mustGetTLS(t, c, url("acme-prod.eu1.example.test", queues), prodKey)
			if r.status != http.StatusOK || r.proto != "HTTP/2.0" || r.tls.NegotiatedProtocol != "h2" {
				t.Fatalf("status %d proto %s alpn %q, want 200 over h2", r.status, r.proto, r.tls.NegotiatedProtocol)
			}
		}
		seen := cell.requests()
		if len(seen) != 3 {
			t.Fatalf("cell saw %d requests, want 3", len(seen))
		}
		for _, s := range seen {
			if s.proto != "HTTP/1.1" || s.tls {
				t.Fatalf("cell request %+v, want plain HTTP/1.1", s)
			}
			if s.remote != seen[0].remote {
				t.Fatalf("cell requests came on connections %s and %s, want one kept-alive connection", seen[0].remote, s.remote)
			}
		}
	})

	t.Run("HTTP/3 is offered and served", func(t *testing.T) {
		r := mustGetTLS(t, httpsClient(httpsPort, roots), url("acme-prod.eu1.example.test", queues), prodKey)
		if alt := r.header.Get("Alt-Svc"); !strings.Contains(alt, fmt.Sprintf(`h3=":%d"`, httpsPort)) {
			t.Fatalf("Alt-Svc %q does not offer h3 on port %d", alt, httpsPort)
		}
		h3 := &http3.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				return quic.DialAddrEarly(ctx, fmt.Sprintf("127.0.0.1:%d", httpsPort), tlsCfg, cfg)
			},
		}
		t.Cleanup(func() { _ = h3.Close() })
		r = mustGetTLS(t, &http.Client{Transport: h3, Timeout: 30 * time.Second}, url("acme-prod.eu1.example.test", queues), prodKey)
		if r.status != http.StatusOK || r.proto != "HTTP/3.0" {
			t.Fatalf("over QUIC: status %d proto %s, want 200 over HTTP/3.0", r.status, r.proto)
		}
	})

	t.Run("plain HTTP redirects to HTTPS", func(t *testing.T) {
		c := client(httpPort)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		r := do(t, c, "GET", fmt.Sprintf("http://acme-prod.eu1.example.test:%d/api/v1/pop/queue/q?batch=2", httpPort), prodKey, "")
		// Caddy treats https_port as the port it listens on behind a port
		// mapping, not one clients use: the redirect names the standard
		// port 443, so no port appears in the Location.
		want := "https://acme-prod.eu1.example.test/api/v1/pop/queue/q?batch=2"
		if r.status != http.StatusPermanentRedirect || r.header.Get("Location") != want {
			t.Fatalf("status %d Location %q, want 308 to %s", r.status, r.header.Get("Location"), want)
		}
	})

	t.Run("a suspended cluster keeps its certificate and gets 403 over TLS", func(t *testing.T) {
		r := mustGetTLS(t, httpsClient(httpsPort, roots), url("acme-paused.eu1.example.test", queues), pausedKey)
		assertRefusal(t, r.response, http.StatusForbidden, "cluster_suspended")
		if names := r.leafNames(); !slices.Equal(names, []string{"acme-paused.eu1.example.test"}) {
			t.Fatalf("certificate names %v", names)
		}
	})

	t.Run("no certificate for names that are not live clusters", func(t *testing.T) {
		c := httpsClient(httpsPort, roots)
		for _, host := range []string{
			"nosuch.eu1.example.test",          // no such cluster
			"acme-doomed.eu1.example.test",     // being deleted
			"x.acme-prod.eu1.example.test",     // extra label
			"acme-prod.eu2.example.test",       // another base domain
			"acme-prod.example.test",           // the parent domain
			"eu1.example.test",                 // the base domain itself
			"acme-prod.eu1.example.test.other", // a suffix added
		} {
			_, err := getTLS(c, url(host, queues), prodKey)
			assertHandshakeRefused(t, host, err)
		}
		assertHandshakeRefused(t, "wildcard SNI", handshake(httpsPort, "*.eu1.example.test"))
		assertHandshakeRefused(t, "no SNI (the IP address)", handshake(httpsPort, ""))
		if seen := cell.requests(); slices.ContainsFunc(seen, func(s cellSeen) bool { return s.tenant != prod.brokerTenant && s.tenant != paused.brokerTenant }) {
			t.Fatalf("a refused name reached the cell: %+v", seen)
		}
	})

	t.Run("a cluster created after a refusal gets its certificate at once", func(t *testing.T) {
		host := "acme-late.eu1.example.test"
		assertHandshakeRefused(t, host+" before it exists", handshake(httpsPort, host))
		late := cp.cluster(tenant, "acme-late", cellID)
		_, lateKey := cp.key(late.id)
		// The refusal is remembered until the creation's NOTIFY reaches the
		// gateway, a few milliseconds after the commit.
		took := eventually(t, time.Second, func() error {
			r, err := getTLS(httpsClient(httpsPort, roots), url(host, queues), lateKey)
			if err != nil {
				return err
			}
			if r.status != http.StatusOK {
				return fmt.Errorf("status %d body %s", r.status, r.body)
			}
			return nil
		})
		t.Logf("a certificate for a cluster created after its name was refused, %v after the creation", took.Round(time.Millisecond))
	})

	// Caddy asks the permission module before it obtains (or renews) a
	// certificate, not on every handshake: a certificate already in its
	// cache keeps being served until renewal. The gateway's status gate
	// still refuses the cluster's requests.
	t.Run("a cluster deleted after issuance keeps its cached certificate until renewal but is refused", func(t *testing.T) {
		host := "acme-closing.eu1.example.test"
		if r := mustGetTLS(t, httpsClient(httpsPort, roots), url(host, queues), closingKey); r.status != http.StatusOK {
			t.Fatalf("before deletion: status %d", r.status)
		}
		cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'deleting')`, closing.id)
		var last tlsResponse
		eventually(t, 5*time.Second, func() error {
			r, err := getTLS(httpsClient(httpsPort, roots), url(host, queues), closingKey)
			if err != nil {
				return fmt.Errorf("handshake: %w", err)
			}
			last = r
			if r.status != http.StatusForbidden {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
		assertRefusal(t, last.response, http.StatusForbidden, "cluster_suspended")
	})
}

// TestTLSCellOverHTTPSWithCustomCA reaches a cell over https whose
// certificate comes from a private CA, configured with the cell_tls option
// of queen_gateway; HTTP/1.1 is used even though the cell offers HTTP/2.
func TestTLSCellOverHTTPSWithCustomCA(t *testing.T) {
	const cellName = "cell-1.cells.queen.internal"
	pki := newTestPKI(t)
	caFile := pki.writeCA(t)
	serverCert := pki.leaf(t, cellName)

	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	broker := fakebroker.New(fakebroker.Options{Name: "tls-cell-https", RequireTenant: true, Token: "cell-secret"})
	t.Cleanup(func() { _ = broker.Close() })
	cell := startRecordingCell(t, broker, &tls.Config{Certificates: []tls.Certificate{serverCert}})
	plainBroker := fakebroker.New(fakebroker.Options{Name: "tls-cell-plain"})
	t.Cleanup(func() { _ = plainBroker.Close() })
	plainCell := startRecordingCell(t, plainBroker, nil)

	cp := newControlPlane(t, dbURL)
	tenant := cp.tenant("celltls")
	httpsCell := cp.cell("https-cell", cell.srv.URL, "cell-secret") // https://127.0.0.1:port
	httpCell := cp.cell("http-cell", plainCell.srv.URL, "")
	onHTTPS := cp.cluster(tenant, "on-https", httpsCell)
	onHTTP := cp.cluster(tenant, "on-http", httpCell)
	_, httpsKey := cp.key(onHTTPS.id)
	_, httpKey := cp.key(onHTTP.id)

	// gateway loads a gateway with the given queen_gateway options and
	// returns a GET for cluster hostnames through it.
	gateway := func(t *testing.T, gatewayOptions string) func(slug, key string) response {
		port := freePort(t)
		startGateway(t, gatewayCaddyfile(port, dbURL, "", gatewayOptions))
		cell.reset()
		plainCell.reset()
		c := client(port)
		return func(slug, key string) response {
			return do(t, c, "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port), key, "")
		}
	}
	cellTLS := func(lines ...string) string {
		return "cell_tls {\n\t\t\t" + strings.Join(lines, "\n\t\t\t") + "\n\t\t}"
	}

	t.Run("cell_tls with the private CA and the cell's name", func(t *testing.T) {
		get := gateway(t, cellTLS("ca "+caFile, "server_name "+cellName))
		for range 2 {
			if r := get("on-https", httpsKey); r.status != http.StatusOK {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
		}
		seen := cell.requests()
		if len(seen) != 2 {
			t.Fatalf("cell saw %d requests, want 2", len(seen))
		}
		for _, s := range seen {
			if !s.tls || s.proto != "HTTP/1.1" || s.tenant != onHTTPS.brokerTenant || s.auth != "Bearer cell-secret" {
				t.Fatalf("cell saw %+v, want HTTP/1.1 over TLS with the cluster's tenant and the cell secret", s)
			}
		}
		if seen[0].remote != seen[1].remote {
			t.Errorf("two requests on connections %s and %s, want one kept-alive TLS connection", seen[0].remote, seen[1].remote)
		}
		// With cell_tls every cell is reached over TLS: an http:// cell
		// is refused rather than spoken to with the wrong protocol.
		assertRefusal(t, get("on-http", httpKey), http.StatusBadGateway, "bad_gateway")
		if n := len(plainCell.requests()); n != 0 {
			t.Fatalf("the http:// cell saw %d requests", n)
		}
	})

	t.Run("without the private CA the cell's certificate is not trusted", func(t *testing.T) {
		get := gateway(t, cellTLS("server_name "+cellName))
		assertRefusal(t, get("on-https", httpsKey), http.StatusBadGateway, "bad_gateway")
		if n := len(cell.requests()); n != 0 {
			t.Fatalf("the cell answered %d requests over an untrusted connection", n)
		}
	})

	t.Run("without server_name the certificate must name the cell URL's host", func(t *testing.T) {
		get := gateway(t, cellTLS("ca "+caFile))
		assertRefusal(t, get("on-https", httpsKey), http.StatusBadGateway, "bad_gateway")
		if n := len(cell.requests()); n != 0 {
			t.Fatalf("the cell answered %d requests though its certificate names %s, not 127.0.0.1", n, cellName)
		}
	})

	t.Run("without cell_tls an https cell is refused and never sent its secret in clear", func(t *testing.T) {
		get := gateway(t, "")
		assertRefusal(t, get("on-https", httpsKey), http.StatusBadGateway, "bad_gateway")
		if n := len(cell.requests()); n != 0 {
			t.Fatalf("the https cell saw %d requests", n)
		}
		if r := get("on-http", httpKey); r.status != http.StatusOK {
			t.Fatalf("http:// cell without cell_tls: status %d body %s", r.status, r.body)
		}
		if seen := plainCell.requests(); len(seen) != 1 || seen[0].proto != "HTTP/1.1" || seen[0].tls {
			t.Fatalf("http:// cell saw %+v, want one plain HTTP/1.1 request", seen)
		}
	})
}

// TestTLSPermissionModuleNeedsBaseDomains: the permission module refuses to
// load without a queen app that has base domains, naming what is missing,
// rather than loading and refusing (or allowing) every name at run time.
func TestTLSPermissionModuleNeedsBaseDomains(t *testing.T) {
	for _, tc := range []struct{ name, app, want string }{
		{"no base_domain", fmt.Sprintf("queen {\n\t\tdatabase_url %s\n\t}", pgtest.URL(t)), "the queen app has no base_domain"},
		{"no queen app", "", "permission queen needs the queen app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
	skip_install_trust
	http_port %d
	https_port %d
	default_bind 127.0.0.1
	storage file_system %s
	on_demand_tls {
		permission queen
	}
	%s
}
https:// {
	tls internal {
		on_demand
	}
	respond "unreachable"
}
`, freePort(t), freePort(t), t.TempDir(), tc.app)
			cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			err = caddy.Load(cfg, true)
			if err == nil {
				_ = caddy.Stop()
				t.Fatal("the config loaded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
