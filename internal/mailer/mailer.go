package mailer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Security is how the connection to the relay is protected.
const (
	// SecuritySTARTTLS connects in plain text and upgrades with STARTTLS,
	// which the relay must offer (port 587).
	SecuritySTARTTLS = "starttls"
	// SecurityTLS speaks TLS from the first byte (port 465).
	SecurityTLS = "tls"
	// SecurityNone sends in plain text, for a relay on the same host or
	// network; it allows no authentication.
	SecurityNone = "none"
)

// Authentication mechanisms.
const (
	AuthPlain = "plain"
	AuthLogin = "login"
)

// DefaultTimeout bounds one whole send: connection, TLS, dialogue and
// message.
const DefaultTimeout = 15 * time.Second

// Config configures the sender.
type Config struct {
	// Host and Port are the relay's. Host is required; Port defaults to
	// 587 (starttls), 465 (tls) or 25 (none).
	Host string
	Port int
	// Security is starttls (default), tls or none.
	Security string
	// Username and Password authenticate, over TLS only. Empty: none.
	Username string
	Password string
	// Auth is plain (default) or login.
	Auth string
	// From is the sender, an address with an optional display name
	// ("Queen <no-reply@example.com>"). Required.
	From string
	// HeloName is the name the gateway gives in EHLO. Default "localhost".
	HeloName string
	// RootCAs verify the relay's certificate; nil: the system's.
	RootCAs *x509.CertPool
	// Timeout bounds one send. Default DefaultTimeout.
	Timeout time.Duration
	// Templates are the message templates. Default: the embedded ones.
	Templates *Templates
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Mailer sends messages through one relay. It is safe for concurrent use;
// each send is a connection of its own.
type Mailer struct {
	cfg  Config
	from *mail.Address
}

// New checks cfg and returns a mailer.
func New(cfg Config) (*Mailer, error) {
	if strings.TrimSpace(cfg.Host) == "" {
		return nil, errors.New("mailer: host is required")
	}
	switch cfg.Security {
	case "":
		cfg.Security = SecuritySTARTTLS
	case SecuritySTARTTLS, SecurityTLS, SecurityNone:
	default:
		return nil, fmt.Errorf("mailer: security must be starttls, tls or none, got %q", cfg.Security)
	}
	if cfg.Port == 0 {
		cfg.Port = map[string]int{SecuritySTARTTLS: 587, SecurityTLS: 465, SecurityNone: 25}[cfg.Security]
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("mailer: port %d out of range", cfg.Port)
	}
	switch cfg.Auth {
	case "":
		cfg.Auth = AuthPlain
	case AuthPlain, AuthLogin:
	default:
		return nil, fmt.Errorf("mailer: auth must be plain or login, got %q", cfg.Auth)
	}
	if cfg.Username != "" && cfg.Security == SecurityNone {
		return nil, errors.New("mailer: a username and password are sent over TLS only; set security starttls or tls")
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("mailer: username and password go together")
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil || strings.ContainsAny(cfg.From, "\r\n") {
		return nil, fmt.Errorf("mailer: from %q is not an e-mail address", cfg.From)
	}
	if cfg.HeloName == "" {
		cfg.HeloName = "localhost"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Templates == nil {
		if cfg.Templates, err = LoadTemplates(""); err != nil {
			return nil, err
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Mailer{cfg: cfg, from: from}, nil
}

// Message is one message to send.
type Message struct {
	// To is the recipient's address (a bare address).
	To string
	// Template names the template; Data fills it.
	Template string
	Data     Data
}

// Send renders m and hands it to the relay. It returns when the relay
// accepted the message, or with the first failure; ctx and the configured
// timeout bound it.
func (m *Mailer) Send(ctx context.Context, msg Message) error {
	to, err := mail.ParseAddress(msg.To)
	if err != nil || to.Name != "" || strings.ContainsAny(msg.To, "\r\n<>") {
		return fmt.Errorf("mailer: recipient %q is not a bare e-mail address", msg.To)
	}
	r, err := m.cfg.Templates.Render(msg.Template, msg.Data)
	if err != nil {
		return err
	}
	body, err := m.compose(to, r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	return m.deliver(ctx, to.Address, body)
}

// compose builds the RFC 5322 message: a multipart/alternative of the
// text and HTML bodies, both quoted-printable.
func (m *Mailer) compose(to *mail.Address, r Rendered) ([]byte, error) {
	var b bytes.Buffer
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("mailer: message id: %w", err)
	}
	domain := m.from.Address[strings.LastIndexByte(m.from.Address, '@')+1:]
	mw := multipart.NewWriter(&b)
	hdr := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	hdr("From", m.from.String())
	hdr("To", to.String())
	hdr("Subject", mime.QEncoding.Encode("utf-8", r.Subject))
	hdr("Date", m.cfg.Now().UTC().Format(time.RFC1123Z))
	hdr("Message-ID", "<"+hex.EncodeToString(id[:])+"@"+domain+">")
	hdr("MIME-Version", "1.0")
	hdr("Auto-Submitted", "auto-generated")
	hdr("Content-Type", "multipart/alternative; boundary=\""+mw.Boundary()+"\"")
	b.WriteString("\r\n")
	for _, part := range []struct{ ctype, body string }{{"text/plain", r.Text}, {"text/html", r.HTML}} {
		pw, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.ctype + "; charset=utf-8"},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, fmt.Errorf("mailer: compose: %w", err)
		}
		qp := quotedprintable.NewWriter(pw)
		if _, err := qp.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(part.body, "\r\n", "\n"), "\n", "\r\n"))); err != nil {
			return nil, fmt.Errorf("mailer: compose: %w", err)
		}
		if err := qp.Close(); err != nil {
			return nil, fmt.Errorf("mailer: compose: %w", err)
		}
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("mailer: compose: %w", err)
	}
	return b.Bytes(), nil
}

// deliver runs the SMTP dialogue.
func (m *Mailer) deliver(ctx context.Context, rcpt string, body []byte) error {
	addr := net.JoinHostPort(m.cfg.Host, strconv.Itoa(m.cfg.Port))
	tlsConf := &tls.Config{ServerName: m.cfg.Host, RootCAs: m.cfg.RootCAs, MinVersion: tls.VersionTLS12}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("mailer: connect %s: %w", addr, err)
	}
	// The deadline bounds every read and write of the dialogue; a context
	// cancelled early closes the connection.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if m.cfg.Security == SecurityTLS {
		tc := tls.Client(conn, tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return fmt.Errorf("mailer: TLS with %s: %w", addr, err)
		}
		conn = tc
	}
	c, err := smtp.NewClient(conn, m.cfg.Host)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("mailer: %s: %w", addr, err)
	}
	defer c.Close()
	if err := c.Hello(m.cfg.HeloName); err != nil {
		return fmt.Errorf("mailer: EHLO: %w", err)
	}
	if m.cfg.Security == SecuritySTARTTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return fmt.Errorf("mailer: %s does not offer STARTTLS; nothing was sent", addr)
		}
		if err := c.StartTLS(tlsConf); err != nil {
			return fmt.Errorf("mailer: STARTTLS: %w", err)
		}
	}
	if m.cfg.Username != "" {
		var a smtp.Auth
		if m.cfg.Auth == AuthLogin {
			a = loginAuth{user: m.cfg.Username, pass: m.cfg.Password, host: m.cfg.Host}
		} else {
			a = smtp.PlainAuth("", m.cfg.Username, m.cfg.Password, m.cfg.Host)
		}
		if err := c.Auth(a); err != nil {
			return fmt.Errorf("mailer: authentication: %w", err)
		}
	}
	if err := c.Mail(m.from.Address); err != nil {
		return fmt.Errorf("mailer: MAIL FROM: %w", err)
	}
	if err := c.Rcpt(rcpt); err != nil {
		return fmt.Errorf("mailer: RCPT TO: %w", err)
	}
	wc, err := c.Data()
	if err != nil {
		return fmt.Errorf("mailer: DATA: %w", err)
	}
	if _, err := wc.Write(body); err != nil {
		return fmt.Errorf("mailer: message: %w", err)
	}
	if err := wc.Close(); err != nil {
		return fmt.Errorf("mailer: message not accepted: %w", err)
	}
	// The relay has accepted the message; a failed QUIT changes nothing.
	_ = c.Quit()
	return nil
}

// loginAuth is the LOGIN mechanism, which some relays offer instead of
// PLAIN. Like smtp.PlainAuth it refuses to send credentials without TLS.
type loginAuth struct{ user, pass, host string }

func (a loginAuth) Start(server *smtp.ServerInfo) (string, []byte, error) {
	if !server.TLS {
		return "", nil, errors.New("mailer: refusing LOGIN authentication without TLS")
	}
	if server.Name != a.host {
		return "", nil, errors.New("mailer: wrong host name")
	}
	return "LOGIN", nil, nil
}

func (a loginAuth) Next(fromServer []byte, more bool) ([]byte, error) {
	if !more {
		return nil, nil
	}
	switch strings.ToLower(strings.TrimSpace(string(fromServer))) {
	case "username:":
		return []byte(a.user), nil
	case "password:":
		return []byte(a.pass), nil
	}
	return nil, fmt.Errorf("mailer: unexpected LOGIN challenge %q", fromServer)
}
