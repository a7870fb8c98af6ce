package caddymodule

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestEmailUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url x
		identity {
			public_url https://login.example.com
			email {
				smtp_host smtp.example.com
				smtp_port 465
				security tls
				username relay
				password {env.SMTP_PASSWORD}
				auth login
				from "Queen <no-reply@example.com>"
				helo gw1.example.com
				ca_file /etc/ssl/relay.pem
				timeout 20s
				templates /etc/queengate/mail
				invitation_ttl 72h
				reset_ttl 20m
				verification_ttl 48h
			}
		}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	e := a.Identity.Email
	if e == nil || e.SMTPHost != "smtp.example.com" || e.SMTPPort != 465 || e.Security != "tls" || e.Username != "relay" ||
		e.Password != "{env.SMTP_PASSWORD}" || e.Auth != "login" || e.From != "Queen <no-reply@example.com>" ||
		e.Helo != "gw1.example.com" || e.CAFile != "/etc/ssl/relay.pem" || e.Timeout != caddy.Duration(20*time.Second) ||
		e.Templates != "/etc/queengate/mail" || e.InvitationTTL != caddy.Duration(72*time.Hour) ||
		e.ResetTTL != caddy.Duration(20*time.Minute) || e.VerificationTTL != caddy.Duration(48*time.Hour) {
		t.Fatalf("email %+v", e)
	}
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"email"`, `"smtp_host"`, `"reset_ttl"`, `"templates"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("JSON lacks %s: %s", field, raw)
		}
	}
}

func TestEmailConfigRefusals(t *testing.T) {
	for input, want := range map[string]string{
		`identity { email { from a@b.c } }`:                                                 "needs smtp_host and from",
		`identity { email { smtp_host h; colour blue } }`:                                   `email: unknown option "colour"`,
		`identity { email { smtp_host h; from a@b.c; smtp_port 0 } }`:                       "not a positive integer",
		`identity { email { smtp_host h; from a@b.c }; email { smtp_host h; from a@b.c } }`: "email given twice",
	} {
		text := strings.NewReplacer("; ", "\n", "{ ", "{\n", " }", "\n}").Replace(input)
		d := caddyfile.NewTestDispenser("queen {\n database_url x\n " + text + "\n}")
		var a App
		err := a.UnmarshalCaddyfile(d)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", input, err, want)
		}
	}
	a := &App{Sessions: &SessionConfig{HS256Secret: "x"}}
	if err := (&IdentityConfig{Email: &EmailConfig{SMTPHost: "h", From: "a@b.c"}}).validate(a); err == nil ||
		!strings.Contains(err.Error(), "public_url") {
		t.Fatalf("email without public_url: %v", err)
	}
	if err := (&IdentityConfig{PublicURL: "https://x.example", Email: &EmailConfig{SMTPHost: "h", From: "a@b.c"}}).validate(&App{}); err == nil ||
		!strings.Contains(err.Error(), "session keys") {
		t.Fatalf("email without sessions: %v", err)
	}
	tpl := t.TempDir()
	if err := os.WriteFile(filepath.Join(tpl, "reset.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]*EmailConfig{
		"credentials in clear": {SMTPHost: "h", From: "a@b.c", Security: "none", Username: "u", Password: "p"},
		"unknown template":     {SMTPHost: "h", From: "a@b.c", Templates: tpl},
		"missing ca file":      {SMTPHost: "h", From: "a@b.c", CAFile: filepath.Join(tpl, "none.pem")},
		"short reset ttl":      {SMTPHost: "h", From: "a@b.c", ResetTTL: caddy.Duration(time.Second)},
		"bad security":         {SMTPHost: "h", From: "a@b.c", Security: "ssl"},
	} {
		if _, err := e.mailer(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := (&EmailConfig{SMTPHost: "h", From: "Queen <a@b.c>"}).mailer(); err != nil {
		t.Fatalf("a minimal email block: %v", err)
	}
}
