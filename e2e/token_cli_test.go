package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/pgtest"
)

// `caddy queen token …` through the real binary: a token printed once
// authenticates, a rotation without overlap ends the old secret, a
// revocation by name ends the token, and bad arguments are refused with
// the shared checks' messages.
func TestTokenCommands(t *testing.T) {
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	q := cliFor(t)(url)
	ctx := context.Background()

	var created controlplane.IssuedMachineToken
	q.okJSON(t, &created, "token", "create", "billing", "--scopes", "usage,read", "--rate", "5", "--burst", "20")
	if !strings.HasPrefix(created.Token, controlplane.MachineTokenPrefix) || created.RatePerSecond != 5 || created.Burst != 20 {
		t.Fatalf("created %+v", created)
	}
	if c, err := controlplane.AuthenticateMachineToken(ctx, cp.pool, created.Token); err != nil || c.ID != created.ID {
		t.Fatalf("the printed token does not authenticate: %+v, %v", c, err)
	}
	out := q.ok(t, "token", "list")
	if !strings.Contains(out, "billing") || !strings.Contains(out, "read,usage") && !strings.Contains(out, "usage,read") {
		t.Fatalf("token list:\n%s", out)
	}
	if strings.Contains(out, created.Token) || strings.Contains(out, controlplane.HashKey(created.Token)) {
		t.Fatal("token list shows the secret or its hash")
	}

	var rotated controlplane.IssuedMachineToken
	q.okJSON(t, &rotated, "token", "rotate", "billing", "--overlap", "0")
	if rotated.ID != created.ID || rotated.Token == created.Token {
		t.Fatalf("rotated %+v", rotated)
	}
	if _, err := controlplane.AuthenticateMachineToken(ctx, cp.pool, created.Token); err == nil {
		t.Fatal("the old secret works after a rotation without overlap")
	}

	out = q.ok(t, "token", "revoke", "billing")
	if !strings.Contains(out, "revoked machine token "+created.ID) {
		t.Fatalf("revoke: %s", out)
	}
	if _, err := controlplane.AuthenticateMachineToken(ctx, cp.pool, rotated.Token); err == nil {
		t.Fatal("a revoked token authenticates")
	}
	q.fails(t, 1, "queen token revoke: unknown or revoked machine token \"billing\"\n", "token", "revoke", "billing")
	q.fails(t, 1, "queen token create: invalid scope \"admin\": use provision, usage or read\n",
		"token", "create", "x", "--scopes", "admin")
	q.fails(t, 1, "queen token create: at least one scope is required (provision, usage, read)\n", "token", "create", "x")
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE target = $1 AND action LIKE 'machine_token_%'`, created.ID); n != "3" {
		t.Fatalf("%s audited token changes, want 3", n)
	}
}
