package caddymodule

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/queengate/queengate/console"
	"github.com/queengate/queengate/internal/mailer"
)

// EmailConfig is the SMTP relay the console sends its own e-mail through
// (member invitations, password resets, address verification), and the
// lives of the links it sends. Without it none of those flows is offered.
type EmailConfig struct {
	// SMTPHost and SMTPPort are the relay's. Host required; the port
	// defaults to 587 (starttls), 465 (tls) or 25 (none).
	SMTPHost string `json:"smtp_host,omitempty"`
	SMTPPort int    `json:"smtp_port,omitempty"`
	// Security is starttls (default), tls (implicit TLS) or none (plain
	// text, for a relay on the same host; no authentication then).
	Security string `json:"security,omitempty"`
	// Username and Password authenticate to the relay, over TLS only
	// (placeholders are expanded).
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// Auth is the mechanism: plain (default) or login.
	Auth string `json:"auth,omitempty"`
	// From is the sender ("Queen <no-reply@example.com>"). Required.
	From string `json:"from,omitempty"`
	// Helo is the name given in EHLO. Default "localhost".
	Helo string `json:"helo,omitempty"`
	// CAFile is a PEM bundle the relay's certificate is verified with
	// instead of the system's roots.
	CAFile string `json:"ca_file,omitempty"`
	// Timeout bounds one send. Default 15s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// Templates is a directory of templates replacing the embedded ones
	// by name (<message>.subject, .txt, .html).
	Templates string `json:"templates,omitempty"`
	// InvitationTTL, ResetTTL and VerificationTTL are the links' lives.
	// Defaults 7 days, 30 minutes, 7 days.
	InvitationTTL   caddy.Duration `json:"invitation_ttl,omitempty"`
	ResetTTL        caddy.Duration `json:"reset_ttl,omitempty"`
	VerificationTTL caddy.Duration `json:"verification_ttl,omitempty"`
}

// unmarshal reads an email block of identity:
//
//	email {
//		smtp_host        <host>
//		smtp_port        <port>
//		security         starttls|tls|none
//		username         <user>
//		password         <secret>
//		auth             plain|login
//		from             <address>
//		helo             <name>
//		ca_file          <pem>
//		timeout          <duration>
//		templates        <dir>
//		invitation_ttl   <duration>
//		reset_ttl        <duration>
//		verification_ttl <duration>
//	}
func (e *EmailConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "smtp_host":
			err = parseString(d, &e.SMTPHost)
		case "smtp_port":
			err = parseCount(d, &e.SMTPPort)
		case "security":
			err = parseString(d, &e.Security)
		case "username":
			err = parseString(d, &e.Username)
		case "password":
			err = parseString(d, &e.Password)
		case "auth":
			err = parseString(d, &e.Auth)
		case "from":
			err = parseString(d, &e.From)
		case "helo":
			err = parseString(d, &e.Helo)
		case "ca_file":
			err = parseString(d, &e.CAFile)
		case "timeout":
			err = parseDuration(d, &e.Timeout)
		case "templates":
			err = parseString(d, &e.Templates)
		case "invitation_ttl":
			err = parseDuration(d, &e.InvitationTTL)
		case "reset_ttl":
			err = parseDuration(d, &e.ResetTTL)
		case "verification_ttl":
			err = parseDuration(d, &e.VerificationTTL)
		default:
			return d.Errf("queen: identity: email: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	if e.SMTPHost == "" || e.From == "" {
		return d.Err("queen: identity: email needs smtp_host and from")
	}
	return nil
}

// mailer builds the sender (checking every setting, reading the CA file
// and the templates).
func (e *EmailConfig) mailer() (*mailer.Mailer, error) {
	repl := caddy.NewReplacer()
	cfg := mailer.Config{
		Host: strings.TrimSpace(e.SMTPHost), Port: e.SMTPPort, Security: e.Security,
		Username: repl.ReplaceAll(e.Username, ""), Password: repl.ReplaceAll(e.Password, ""),
		Auth: e.Auth, From: e.From, HeloName: e.Helo, Timeout: time.Duration(e.Timeout),
	}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", e.CAFile)
		}
	}
	t, err := mailer.LoadTemplates(e.Templates)
	if err != nil {
		return nil, err
	}
	cfg.Templates = t
	for name, d := range map[string]caddy.Duration{"invitation_ttl": e.InvitationTTL, "reset_ttl": e.ResetTTL, "verification_ttl": e.VerificationTTL} {
		if d != 0 && time.Duration(d) < time.Minute {
			return nil, fmt.Errorf("%s must be at least 1m", name)
		}
	}
	return mailer.New(cfg)
}

// resetGuard limits password-reset requests; one per process, so that a
// reload does not forgive them.
var resetGuard = sync.OnceValue(func() *console.LoginGuard { return console.NewLoginGuard(console.DefaultResetRate) })
