package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/mailpit"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestBrowserEmail walks the console's e-mail flows in a real browser
// against a real gateway and a real SMTP server (Mailpit): a cluster admin
// invites an address no account has, the invitee follows the e-mailed
// link, sets a password and is signed in; then asks for a reset link,
// follows it, sets a new password and signs in; then changes the password
// in the console and signs in with it (e2e/browser/email.spec.mjs). The
// database must then hold what the browser did.
func TestBrowserEmail(t *testing.T) {
	browserPrerequisites(t) // before the setup, so a machine without a browser fails fast
	mp := mailpit.Start(t, mailpit.Options{})

	broker := startBroker(t, fakebroker.Options{Name: "mail-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("mail-cell", broker.URL(), "")
	tenant := cp.tenant("mailbrowser")
	cl := cp.cluster(tenant, "mail-acme", cell)
	const admin, adminPassword = "ada@mailbrowser.test", "correct horse battery staple"
	cp.exec(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')`,
		tenant, admin, adminPassword)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, $2, 'admin')`, cl.id, admin)
	const invitee = "newcomer@elsewhere.test"

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	port := freePort(t)
	origin := fmt.Sprintf("http://%s.eu1.example.test:%d", cl.slug, port)
	app := fmt.Sprintf(`session {
			hs256_secret %s
		}
		identity {
			public_url %s
			email {
				smtp_host %s
				smtp_port %d
				security none
				from "Queen <no-reply@mailbrowser.test>"
			}
		}`, hex.EncodeToString(secret), origin, mp.SMTPHost, mp.SMTPPort)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), app, ""))

	results := runBrowserSpec(t, "email.spec.mjs",
		"QG_CONSOLE_URL="+origin,
		fmt.Sprintf("QG_GATEWAY_ADDR=127.0.0.1:%d", port),
		"QG_EMAIL="+admin,
		"QG_PASSWORD="+adminPassword,
		"QG_INVITEE="+invitee,
		"QG_MAILPIT_API="+mp.API,
	)
	for _, k := range []string{"invitee_signed_in", "reset_signed_in", "changed_signed_in"} {
		if results[k] != "1" {
			t.Fatalf("email.spec.mjs printed no RESULT %s=1", k)
		}
	}

	// The account is the invitee's, in the cluster's tenant, a producer,
	// its address proven, created from the admin's invitation.
	if got := cp.scalar(`SELECT u.tenant_id::text || ' ' || cr.role || ' ' || (u.email_verified_at IS NOT NULL)::text || ' ' ||
			u.created_from || ' ' || (u.created_by = (SELECT id FROM queen_proxy.users WHERE email = $3))::text
		FROM queen_proxy.users u JOIN queen_proxy.cluster_roles cr ON cr.user_id = u.id AND cr.cluster_id = $2::uuid
		WHERE u.email = $1`, invitee, cl.id, admin); got != tenant+" producer true console true" {
		t.Fatalf("the invitee's account: %q", got)
	}
	// Every link is spent, and the audit log has each step.
	if got := cp.scalar(`SELECT string_agg(purpose || ':' || (used_at IS NOT NULL)::text, ',' ORDER BY created_at)
		FROM queen_proxy.email_tokens WHERE email = $1`, invitee); got != "invitation:true,password_reset:true" {
		t.Fatalf("the invitee's links: %q", got)
	}
	for _, action := range []string{"console_member_invited", "invitation_accepted", "password_reset", "password_changed"} {
		if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE tenant_id = $1::uuid AND action = $2`, tenant, action); n != "1" {
			t.Errorf("%s audit rows: %s, want 1", action, n)
		}
	}
}
