package e2e

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// tlsExample reads one of examples/tls/, loaded as the file is: only the
// environment it names differs.
func tlsExample(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "examples", "tls", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestTLSExamplesWithoutPublicACME loads each certificate path of
// docs/tls.md that needs no public ACME CA verbatim, with its environment
// set as an operator sets it, and checks that a cluster hostname is served
// over HTTPS with a certificate from that source, reaching its cell, and
// that a name that is no live cluster gets none. Each uses a base domain of
// its own: Caddy's certificate cache is process-wide.
func TestTLSExamplesWithoutPublicACME(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := fakebroker.New(fakebroker.Options{Name: "tls-examples-cell", RequireTenant: true})
	t.Cleanup(func() { _ = broker.Close() })
	cell := startRecordingCell(t, broker, nil)
	cp := newControlPlane(t, dbURL)
	cellID := cp.cell("tls-examples-cell", cell.srv.URL, "")
	tenant := cp.tenant("tlsexamples")
	prod := cp.cluster(tenant, "acme-prod", cellID)
	_, key := cp.key(prod.id)
	const queues = "/api/v1/resources/queues"

	// common sets what every example reads and returns the ports.
	common := func(t *testing.T, baseDomain string) (httpPort, httpsPort int, state string) {
		httpPort, httpsPort, state = freePort(t), freePort(t), t.TempDir()
		for name, value := range map[string]string{
			"QUEENGATE_DATABASE_URL": dbURL,
			"QUEENGATE_BASE_DOMAIN":  baseDomain,
			"QUEENGATE_STATE_DIR":    state,
			"QUEENGATE_HTTP_PORT":    fmt.Sprint(httpPort),
			"QUEENGATE_HTTPS_PORT":   fmt.Sprint(httpsPort),
			"QUEENGATE_ADMIN":        fmt.Sprintf("localhost:%d", freePort(t)),
		} {
			t.Setenv(name, value)
		}
		return httpPort, httpsPort, state
	}
	// served asserts the cluster's request reaches its cell over HTTPS and
	// returns the certificate presented.
	served := func(t *testing.T, httpsPort int, roots *x509.CertPool, host string) *x509.Certificate {
		t.Helper()
		cell.reset()
		r := mustGetTLS(t, httpsClient(httpsPort, roots), fmt.Sprintf("https://%s:%d%s", host, httpsPort, queues), key)
		if r.status != 200 {
			t.Fatalf("%s: status %d body %s", host, r.status, r.body)
		}
		if seen := cell.requests(); len(seen) != 1 || seen[0].tenant != prod.brokerTenant {
			t.Fatalf("%s: the cell saw %+v, want the cluster's request", host, seen)
		}
		return r.tls.PeerCertificates[0]
	}
	refused := func(t *testing.T, httpsPort int, roots *x509.CertPool, host string) {
		t.Helper()
		_, err := getTLS(httpsClient(httpsPort, roots), fmt.Sprintf("https://%s:%d%s", host, httpsPort, queues), key)
		assertHandshakeRefused(t, host, err)
	}

	t.Run("an internal ACME server", func(t *testing.T) {
		dnsSrv := startTestDNS(t, "example.test")
		httpPort, httpsPort, _ := common(t, "eu7.example.test")
		pebble := startPebble(t, httpPort, httpsPort, dnsSrv.addr)
		t.Setenv("QUEENGATE_ACME_CA", pebble.directory)
		t.Setenv("QUEENGATE_ACME_CA_ROOT", pebble.apiRoot)
		t.Setenv("QUEENGATE_ACME_EMAIL", "ops@example.test")
		startGateway(t, tlsExample(t, "Caddyfile.internal-acme"))
		leaf := served(t, httpsPort, pebble.issued, "acme-prod.eu7.example.test")
		if !strings.HasPrefix(leaf.Issuer.CommonName, "Pebble Intermediate CA") || !slices.Equal(leaf.DNSNames, []string{"acme-prod.eu7.example.test"}) {
			t.Fatalf("certificate for %v from %q, want the cluster hostname from the ACME server", leaf.DNSNames, leaf.Issuer.CommonName)
		}
		refused(t, httpsPort, pebble.issued, "nosuch.eu7.example.test")
	})

	t.Run("files the operator provides", func(t *testing.T) {
		_, httpsPort, _ := common(t, "eu8.example.test")
		pki := newTestPKI(t)
		cert := pki.leaf(t, "*.eu8.example.test")
		keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "wildcard.crt"), filepath.Join(dir, "wildcard.key")
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("QUEENGATE_TLS_CERT", certFile)
		t.Setenv("QUEENGATE_TLS_KEY", keyFile)
		startGateway(t, tlsExample(t, "Caddyfile.files"))
		roots := certPool(t, pki.writeCA(t))
		leaf := served(t, httpsPort, roots, "acme-prod.eu8.example.test")
		if !slices.Equal(leaf.DNSNames, []string{"*.eu8.example.test"}) || leaf.Issuer.CommonName != pki.cert.Subject.CommonName {
			t.Fatalf("certificate for %v from %q, want the operator's wildcard", leaf.DNSNames, leaf.Issuer.CommonName)
		}
	})

	t.Run("Caddy's local CA", func(t *testing.T) {
		_, httpsPort, state := common(t, "eu9.example.test")
		startGateway(t, tlsExample(t, "Caddyfile.local-ca"))
		roots := localCARoot(t, state)
		leaf := served(t, httpsPort, roots, "acme-prod.eu9.example.test")
		if !strings.Contains(leaf.Issuer.CommonName, "Caddy Local Authority") || !slices.Equal(leaf.DNSNames, []string{"acme-prod.eu9.example.test"}) {
			t.Fatalf("certificate for %v from %q, want the cluster hostname from Caddy's local CA", leaf.DNSNames, leaf.Issuer.CommonName)
		}
		refused(t, httpsPort, roots, "nosuch.eu9.example.test")
	})
}

// TestTLSInternalBesideProductionSitesIsRefused: what docs/tls.md warns
// against, `tls internal { on_demand }` in the production example's
// catch-all site, does not adapt, so the warning stays true (and the
// examples' global issuer options are what to use).
func TestTLSInternalBesideProductionSitesIsRefused(t *testing.T) {
	for _, v := range []string{"QUEENGATE_BASE_DOMAIN", "QUEENGATE_ONDEMAND_DOMAIN", "QUEENGATE_STATE_DIR"} {
		unsetEnv(t, v)
	}
	t.Setenv("QUEENGATE_GATEWAY_NAME", "eu1-a-gw1")
	t.Setenv("QUEENGATE_PEER_LISTEN", "192.0.2.11:7946")
	caddyfile := productionExample(t, "", "dns queen_testdns 127.0.0.1:1")
	const catchAll = "https:// {\n\ttls {\n\t\ton_demand\n\t}"
	if strings.Count(caddyfile, catchAll) != 1 {
		t.Fatalf("the production example has no catch-all site %q", catchAll)
	}
	internal := strings.Replace(caddyfile, catchAll, "https:// {\n\ttls internal {\n\t\ton_demand\n\t}", 1)
	adapt := func(c string) error {
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c), map[string]any{"filename": "Caddyfile"})
		return err
	}
	if err := adapt(caddyfile); err != nil {
		t.Fatalf("the production example itself does not adapt: %v", err)
	}
	if err := adapt(internal); err == nil || !strings.Contains(err.Error(), "in conflict") {
		t.Fatalf("tls internal in the catch-all site beside the others: %v, want the automation policy conflict docs/tls.md names", err)
	}
}
