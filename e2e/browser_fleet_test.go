package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/mailpit"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestBrowserFleetFirstDay opens the console on the operator host of a
// fleet that has nothing yet: a freshly migrated database (the platform
// tenant alone), one operator made as `caddy queen user create --operator`
// makes it, no cell, no cluster. The console opens on the fleet alone
// (there is no cluster to open), with empty states that name the commands
// that come next (fleet.spec.mjs). Then, once a customer's tenant and
// cluster exist, the operator manages people from the fleet view alone:
// creates a customer's user with a role, changes and removes the role,
// invites an address to the customer's cluster by e-mail and revokes
// another invitation, creates an operator and withdraws the bit; the
// invitation reaches a real SMTP server (Mailpit); the database holds each
// change with the operator's audit row. The customer's user, left with no
// role, signs in and is told why the console has nothing to open.
func TestBrowserFleetFirstDay(t *testing.T) {
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	const opsHost = "ops.example.test"
	const opEmail, opPassword = "first-op@platform.test", "first operator battery staple"
	if _, err := controlplane.CreateUser(context.Background(), cp.pool,
		controlplane.NewUser{Email: opEmail, Password: opPassword, Operator: true}); err != nil {
		t.Fatal(err)
	}
	if got := cp.scalar(`SELECT count(*)::text FROM queen_proxy.clusters`); got != "0" {
		t.Fatalf("a fresh database holds %s clusters", got)
	}
	mp := mailpit.Start(t, mailpit.Options{})
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	port := freePort(t)
	app := fmt.Sprintf(`spool_dir %s
		operator_enabled
		session {
			hs256_secret %s
		}
		identity {
			operator_api
			public_url http://%s:%d
			email {
				smtp_host %s
				smtp_port %d
				security none
				from "Queen <no-reply@platform.test>"
			}
		}`, t.TempDir(), hex.EncodeToString(secret), opsHost, port, mp.SMTPHost, mp.SMTPPort)
	startGateway(t, gatewayCaddyfile(port, url, app, "shared_hosts "+opsHost))

	common := []string{fmt.Sprintf("QG_OPS_URL=http://%s:%d", opsHost, port),
		fmt.Sprintf("QG_GATEWAY_ADDR=127.0.0.1:%d", port),
		"QG_OPERATOR_EMAIL=" + opEmail, "QG_OPERATOR_PASSWORD=" + opPassword}
	runBrowserSpec(t, "fleet.spec.mjs", common...)

	// The first customer, made with the CLI's SQL as the next steps say;
	// its cluster has an admin already (so a role can be removed again).
	broker := startBroker(t, fakebroker.Options{Name: "first-cell", Tenancy: fakebroker.TenancyRust})
	cl := cp.cluster(cp.tenant("acme"), "acme-prod", cp.cell("first-cell", broker.URL(), ""))
	cp.exec(`SELECT queen_proxy.create_user(id, 'boss@acme.test', NULL, 'local') FROM queen_proxy.tenants WHERE slug = 'acme'`)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'boss@acme.test', 'admin')`, cl.id)
	const newUser, newOperator = "ada@acme.test", "second-op@platform.test"
	const invitee, withdrawn = "grace@elsewhere.test", "mallory@elsewhere.test"
	results := runBrowserSpec(t, "fleet.spec.mjs", append(common, "QG_PHASE=users", "QG_TENANT=acme", "QG_CLUSTER="+cl.slug,
		"QG_NEW_USER="+newUser, "QG_NEW_OPERATOR="+newOperator, "QG_INVITEE="+invitee, "QG_WITHDRAWN_INVITEE="+withdrawn)...)

	// The invitation the form sent is pending, for the cluster and role it
	// named, and its message reached the relay with a link; the revoked one
	// is not pending, though its message went.
	if got := cp.scalar(`SELECT string_agg(email || ' ' || role || ' ' || cluster_id::text, ',') FROM queen_proxy.email_tokens
		WHERE purpose = 'invitation' AND used_at IS NULL AND revoked_at IS NULL`); got != invitee+" producer "+cl.id {
		t.Fatalf("pending invitations after the browser: %q", got)
	}
	if msg := mp.Wait(t, invitee, 1, 15*time.Second); !strings.Contains(msg.Text, fmt.Sprintf("http://%s:%d/auth/invitation?token=", opsHost, port)) {
		t.Fatalf("the invitation's message has no link: %s", msg.Text)
	}
	mp.Wait(t, withdrawn, 1, 15*time.Second)

	opID := cp.scalar(`SELECT id::text FROM queen_proxy.users WHERE email = $1`, opEmail)
	if got := cp.scalar(`SELECT u.id::text || ' ' || t.slug || ' ' || u.created_from || ' ' || u.created_by::text || ' ' ||
			(u.password_hash IS NOT NULL)::text || ' ' || coalesce(u.name, '') || ' ' ||
			(SELECT count(*) FROM queen_proxy.cluster_roles r WHERE r.user_id = u.id)::text
		FROM queen_proxy.users u JOIN queen_proxy.tenants t ON t.id = u.tenant_id WHERE u.email = $1`, newUser); got != results["customer_id"]+" acme operator "+opID+" true Ada Customer 0" {
		t.Fatalf("the customer's user the console created: %q", got)
	}
	if got := cp.scalar(`SELECT u.id::text || ' ' || t.slug || ' ' || u.is_operator::text
		FROM queen_proxy.users u JOIN queen_proxy.tenants t ON t.id = u.tenant_id WHERE u.email = $1`, newOperator); got != results["operator_id"]+" platform false" {
		t.Fatalf("the operator the console created and withdrew: %q", got)
	}
	if got := cp.scalar(`SELECT string_agg(action, ',' ORDER BY action) FROM queen_proxy.operations
		WHERE actor = 'user' AND actor_id = $1::uuid AND action LIKE 'operator%'`, opID); got != "operator_bit_revoked,operator_invitation_revoked,operator_member_invited,operator_member_invited,"+
		"operator_role_granted,operator_role_revoked,operator_user_created,operator_user_created" {
		t.Fatalf("the operator's audit rows: %q", got)
	}
}
