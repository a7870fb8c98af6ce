package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// httpsClient verifies server certificates against roots and sends every
// request to 127.0.0.1:port, keeping the URL's host as the SNI, so cluster
// hostnames need no DNS. Each client has its own connections: a new client
// means a new TLS handshake. Redirects are not followed.
func httpsClient(port int, roots *x509.CertPool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
			},
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// tlsResponse is a response received over TLS, with what the handshake
// negotiated and how long the first byte took.
type tlsResponse struct {
	response
	proto string // "HTTP/2.0", ...
	tls   *tls.ConnectionState
	ttfb  time.Duration // from sending (dial and handshake included) to the first response byte
}

// leafNames returns the DNS names of the certificate the server presented.
func (r tlsResponse) leafNames() []string { return r.tls.PeerCertificates[0].DNSNames }

// getTLS sends GET url with an API key and reads the whole response; err is
// what the client reported when no response came (a failed handshake).
func getTLS(c *http.Client, url, key string) (tlsResponse, error) {
	var firstByte time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { firstByte = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	if err != nil {
		return tlsResponse{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return tlsResponse{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return tlsResponse{}, err
	}
	out := tlsResponse{
		response: response{status: resp.StatusCode, header: resp.Header, body: body},
		proto:    resp.Proto,
		tls:      resp.TLS,
		ttfb:     firstByte.Sub(start),
	}
	if out.tls == nil || len(out.tls.PeerCertificates) == 0 {
		return out, fmt.Errorf("GET %s: response not over TLS", url)
	}
	return out, nil
}

// mustGetTLS is getTLS that fails the test when no response came.
func mustGetTLS(t *testing.T, c *http.Client, url, key string) tlsResponse {
	t.Helper()
	r, err := getTLS(c, url, key)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// handshake runs a bare TLS handshake with the given SNI ("" sends none)
// against 127.0.0.1:port, trusting nothing: it only asks whether the server
// presents a certificate at all.
func handshake(port int, serverName string) error {
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config:    &tls.Config{ServerName: serverName, InsecureSkipVerify: true},
	}
	conn, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	return conn.Close()
}

// assertHandshakeRefused checks that err is the server aborting the TLS
// handshake (an alert), not a connection failure or a certificate the
// client merely did not trust.
func assertHandshakeRefused(t *testing.T, what string, err error) {
	t.Helper()
	var alert tls.AlertError
	if err == nil {
		t.Fatalf("%s: the server completed the TLS handshake; want it refused", what)
	}
	if !errors.As(err, &alert) && !strings.Contains(err.Error(), "remote error: tls") {
		t.Fatalf("%s: %v; want the server to abort the handshake with a TLS alert", what, err)
	}
}

// certPool reads PEM certificates into a pool.
func certPool(t *testing.T, pemFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no PEM certificate", pemFile)
	}
	return pool
}

// localCARoot is the root certificate of Caddy's local CA in a storage
// folder; it exists as soon as a config using `tls internal` is loaded.
func localCARoot(t *testing.T, storage string) *x509.CertPool {
	t.Helper()
	return certPool(t, filepath.Join(storage, "pki", "authorities", "local", "root.crt"))
}

// cellSeen is one request as a cell's HTTP server received it.
type cellSeen struct {
	proto, remote, tenant, auth string
	tls                         bool
}

// recordingCell serves a handler (the fake broker) and records, for every
// request, the protocol, the client connection and the headers the
// gateway sent. With serverTLS it serves https (HTTP/2 offered by ALPN).
type recordingCell struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []cellSeen
}

func startRecordingCell(t *testing.T, h http.Handler, serverTLS *tls.Config) *recordingCell {
	t.Helper()
	c := &recordingCell{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Queen-Request-Id") == "" {
			// The gateway's own inventory reads are not client traffic.
			h.ServeHTTP(w, r)
			return
		}
		c.mu.Lock()
		c.seen = append(c.seen, cellSeen{
			proto: r.Proto, remote: r.RemoteAddr, tls: r.TLS != nil,
			tenant: r.Header.Get("X-Queen-Tenant"), auth: r.Header.Get("Authorization"),
		})
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	if serverTLS != nil {
		c.srv.TLS = serverTLS
		c.srv.EnableHTTP2 = true
		c.srv.StartTLS()
	} else {
		c.srv.Start()
	}
	t.Cleanup(c.srv.Close)
	return c
}

func (c *recordingCell) requests() []cellSeen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cellSeen(nil), c.seen...)
}

func (c *recordingCell) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = nil
}

// ttfbLine is the one line per measurement the lead quotes.
func ttfbLine(t *testing.T, ca, host string, first, warm time.Duration) {
	t.Helper()
	t.Logf("TTFB never-seen cluster hostname (%s): %s first request %v (TCP + TLS handshake with issuance + gateway + cell), next new connection %v",
		ca, host, first.Round(100*time.Microsecond), warm.Round(100*time.Microsecond))
}

// testPKI is a private certificate authority for cells reached over https.
type testPKI struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "queengate test cells CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{cert: cert, key: key}
}

// writeCA writes the CA certificate as PEM and returns the file name.
func (p *testPKI) writeCA(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "cells-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// leaf issues a server certificate for one DNS name.
func (p *testPKI) leaf(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
