package mailer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/queengate/queengate/internal/mailer"
	"github.com/queengate/queengate/internal/mailpit"
)

// selfSigned writes a certificate for 127.0.0.1 and returns the files and
// a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mail.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func authFile(t *testing.T, user, pass string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(p, []byte(user+":"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func send(t *testing.T, cfg mailer.Config, to string) error {
	t.Helper()
	m, err := mailer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.Send(context.Background(), mailer.Message{To: to, Template: mailer.TemplatePasswordReset,
		Data: mailer.Data{Link: "https://login.example.com/auth/reset?token=abc", Email: to, ExpiresIn: "30 minutes"}})
}

// Every way of reaching the relay delivers a multipart/alternative
// message with both bodies, and credentials go only where TLS is.
func TestSendThroughMailpit(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	auth := authFile(t, "queen", "relay-secret")
	plain := mailpit.Start(t, mailpit.Options{})
	starttls := mailpit.Start(t, mailpit.Options{TLSCert: certFile, TLSKey: keyFile, RequireSTARTTLS: true, AuthFile: auth})
	implicit := mailpit.Start(t, mailpit.Options{TLSCert: certFile, TLSKey: keyFile, RequireTLS: true, AuthFile: auth})

	cases := []struct {
		name string
		srv  *mailpit.Server
		cfg  mailer.Config
	}{
		{"none", plain, mailer.Config{Security: mailer.SecurityNone}},
		{"starttls plain auth", starttls, mailer.Config{Security: mailer.SecuritySTARTTLS, Username: "queen", Password: "relay-secret", RootCAs: pool}},
		{"tls login auth", implicit, mailer.Config{Security: mailer.SecurityTLS, Username: "queen", Password: "relay-secret", Auth: mailer.AuthLogin, RootCAs: pool}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Host, c.cfg.Port, c.cfg.From = c.srv.SMTPHost, c.srv.SMTPPort, "Queen <no-reply@queen.example>"
			to := "user" + string(rune('a'+i)) + "@example.com"
			if err := send(t, c.cfg, to); err != nil {
				t.Fatalf("send: %v", err)
			}
			got := c.srv.Wait(t, to, 1, 10*time.Second)
			if got.Subject != "Reset your Queen password" || got.From.Address != "no-reply@queen.example" {
				t.Errorf("subject %q from %q", got.Subject, got.From.Address)
			}
			if !strings.Contains(got.Text, "https://login.example.com/auth/reset?token=abc") ||
				!strings.Contains(got.HTML, `href="https://login.example.com/auth/reset?token=abc"`) {
				t.Errorf("the link is not in both bodies:\ntext: %s\nhtml: %s", got.Text, got.HTML)
			}
			raw := c.srv.Raw(t, got.ID)
			if !strings.Contains(raw, "multipart/alternative") || !strings.Contains(raw, "text/plain; charset=utf-8") ||
				!strings.Contains(raw, "text/html; charset=utf-8") {
				t.Errorf("not a multipart/alternative of text and HTML:\n%s", raw)
			}
		})
	}

	t.Run("wrong password refused", func(t *testing.T) {
		err := send(t, mailer.Config{Host: starttls.SMTPHost, Port: starttls.SMTPPort, From: "no-reply@queen.example",
			Username: "queen", Password: "wrong-secret", RootCAs: pool}, "nobody@example.com")
		if err == nil || !strings.Contains(err.Error(), "authentication") {
			t.Fatalf("send with a wrong password: %v", err)
		}
	})
	t.Run("starttls required but not offered", func(t *testing.T) {
		err := send(t, mailer.Config{Host: plain.SMTPHost, Port: plain.SMTPPort, From: "no-reply@queen.example"}, "nobody@example.com")
		if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
			t.Fatalf("starttls against a relay without it: %v", err)
		}
		if n := len(plain.To(t, "nobody@example.com")); n != 0 {
			t.Fatalf("%d messages delivered in plain text although STARTTLS was required", n)
		}
	})
	t.Run("untrusted certificate refused", func(t *testing.T) {
		err := send(t, mailer.Config{Host: implicit.SMTPHost, Port: implicit.SMTPPort, From: "no-reply@queen.example",
			Security: mailer.SecurityTLS}, "nobody@example.com")
		if err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("send to a relay with an untrusted certificate: %v", err)
		}
	})
}

// A relay that accepts the connection and never answers costs at most
// the configured timeout.
func TestSendTimesOut(t *testing.T) {
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
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	err = send(t, mailer.Config{Host: "127.0.0.1", Port: port, Security: mailer.SecurityNone, From: "a@queen.example",
		Timeout: 300 * time.Millisecond}, "b@example.com")
	took := time.Since(start)
	t.Logf("a silent relay failed the send after %v (timeout 300ms)", took)
	if err == nil {
		t.Fatal("a silent relay did not fail the send")
	}
	if took > 10*time.Second {
		t.Fatalf("the send took %v, past its 300ms timeout", took)
	}
}

func TestConfigRefusals(t *testing.T) {
	for name, cfg := range map[string]mailer.Config{
		"no host":               {From: "a@b.example"},
		"credentials in clear":  {Host: "h", From: "a@b.example", Security: mailer.SecurityNone, Username: "u", Password: "p"},
		"user without password": {Host: "h", From: "a@b.example", Username: "u"},
		"bad from":              {Host: "h", From: "not an address"},
		"from with newline":     {Host: "h", From: "a@b.example\r\nBcc: c@d.example"},
		"bad security":          {Host: "h", From: "a@b.example", Security: "ssl"},
		"bad auth":              {Host: "h", From: "a@b.example", Auth: "cram-md5"},
	} {
		if _, err := mailer.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m, err := mailer.New(mailer.Config{Host: "127.0.0.1", Port: 1, Security: mailer.SecurityNone, From: "a@b.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"x@example.com\r\nBcc: y@example.com", "Name <x@example.com>", "nobody"} {
		if err := m.Send(context.Background(), mailer.Message{To: to, Template: mailer.TemplateInvitation}); err == nil ||
			!strings.Contains(err.Error(), "recipient") {
			t.Errorf("recipient %q: %v", to, err)
		}
	}
}

// An operator's file replaces the default of its name; the others stay;
// a file naming no template, or one that does not parse, is refused.
func TestTemplateOverride(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "invitation.subject"), []byte("Join {{.Cluster}} at Acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "invitation.html"), []byte(`<p>Acme: <a href="{{.Link}}">{{.Email}}</a></p>`), 0o600); err != nil {
		t.Fatal(err)
	}
	tpl, err := mailer.LoadTemplates(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tpl.Render(mailer.TemplateInvitation, mailer.Data{Link: "https://x.example/?a=1&b=2", Email: "<b>@x", Cluster: "prod", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Subject != "Join prod at Acme" {
		t.Errorf("subject %q", r.Subject)
	}
	if !strings.Contains(r.HTML, "&lt;b&gt;@x") || strings.Contains(r.HTML, "<b>@x") {
		t.Errorf("the HTML template did not escape the data: %s", r.HTML)
	}
	if !strings.Contains(r.Text, "prod as viewer") {
		t.Errorf("the default text body was not kept: %s", r.Text)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "invitaton.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mailer.LoadTemplates(bad); err == nil {
		t.Error("a misspelt template file was accepted")
	}
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "password_reset.txt"), []byte("{{.Nope}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mailer.LoadTemplates(broken); err == nil {
		t.Error("a template with an unknown field was accepted")
	}
}
