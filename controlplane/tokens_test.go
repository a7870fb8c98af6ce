package controlplane

import (
	"regexp"
	"slices"
	"testing"
	"time"
)

var tokenShape = regexp.MustCompile(`^qmt_[A-Za-z0-9_-]{43}$`)

// A machine token is stored only as its hash, authenticates with its
// scopes, is audited at each change, keeps its old secret only for the
// overlap of a rotation, and is refused from its revocation on, which
// every gateway hears of through the nil-uuid invalidation.
func TestMachineTokenLifecycle(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	l := listen(t, url)

	_, err := CreateMachineToken(ctx, pool, NewMachineToken{Name: "signup", Scopes: []string{"write"}})
	wantErr(t, err, Invalid, `invalid scope "write": use provision, usage or read`)
	_, err = CreateMachineToken(ctx, pool, NewMachineToken{Name: " ", Scopes: []string{"read"}})
	wantErr(t, err, Invalid, "token name is required")

	tok := must[IssuedMachineToken](t)(CreateMachineToken(ctx, pool, NewMachineToken{Name: "signup", Scopes: []string{"read", "provision"}}))
	if !tokenShape.MatchString(tok.Token) || !slices.Equal(tok.Scopes, []string{"provision", "read"}) ||
		tok.RatePerSecond != DefaultTokenRate || tok.Burst != DefaultTokenBurst || tok.Status != "live" {
		t.Fatalf("created %+v", tok)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.machine_tokens WHERE token_hash = $1`, HashKey(tok.Token)); n != 1 {
		t.Fatalf("%d rows hold the token's hash, want 1", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.machine_tokens WHERE token_hash = $1 OR name = $1`, tok.Token); n != 0 {
		t.Fatal("the plaintext is stored")
	}
	_, err = CreateMachineToken(ctx, pool, NewMachineToken{Name: "signup", Scopes: []string{"read"}})
	wantErr(t, err, Taken, "a live token is already named signup")

	c := must[TokenCaller](t)(AuthenticateMachineToken(ctx, pool, tok.Token))
	if c.ID != tok.ID || !c.Has("provision") || c.Has("usage") {
		t.Fatalf("authenticated %+v", c)
	}

	rot := must[IssuedMachineToken](t)(RotateMachineToken(ctx, pool, "signup", time.Hour))
	if rot.ID != tok.ID || rot.Token == tok.Token || rot.PreviousValidUntil == nil {
		t.Fatalf("rotated %+v", rot)
	}
	if got := l.next(); got != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("rotation notified %q, want the nil uuid", got)
	}
	for _, secret := range []string{tok.Token, rot.Token} {
		if _, err := AuthenticateMachineToken(ctx, pool, secret); err != nil {
			t.Fatalf("within the overlap: %v", err)
		}
	}
	rot2 := must[IssuedMachineToken](t)(RotateMachineToken(ctx, pool, tok.ID, 0))
	l.next()
	for _, secret := range []string{tok.Token, rot.Token} {
		if _, err := AuthenticateMachineToken(ctx, pool, secret); KindOf(err) != NotFound {
			t.Fatalf("a replaced secret after a rotation without overlap: %v", err)
		}
	}

	must[MachineToken](t)(RevokeMachineToken(ctx, pool, "signup"))
	if got := l.next(); got != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("revocation notified %q, want the nil uuid", got)
	}
	if _, err := AuthenticateMachineToken(ctx, pool, rot2.Token); KindOf(err) != NotFound {
		t.Fatalf("a revoked token authenticated: %v", err)
	}
	_, err = RevokeMachineToken(ctx, pool, "signup")
	wantErr(t, err, NotFound, `unknown or revoked machine token "signup"`)
	if live := must[[]MachineToken](t)(ListMachineTokens(ctx, pool, false)); len(live) != 0 {
		t.Fatalf("live tokens %+v", live)
	}
	all := must[[]MachineToken](t)(ListMachineTokens(ctx, pool, true))
	if len(all) != 1 || all[0].Status != "revoked" {
		t.Fatalf("all tokens %+v", all)
	}
	// The name is free again once its token is revoked.
	must[IssuedMachineToken](t)(CreateMachineToken(ctx, pool, NewMachineToken{Name: "signup", Scopes: []string{"usage"}}))
	audited := scalar[[]string](t, pool, `SELECT array_agg(action ORDER BY at, action) FROM queen_proxy.operations
		WHERE target = $1 AND tenant_id = queen_proxy.platform_tenant_id()`, tok.ID)
	want := []string{"machine_token_created", "machine_token_revoked", "machine_token_rotated", "machine_token_rotated"}
	slices.Sort(audited)
	if !slices.Equal(audited, want) {
		t.Fatalf("audited %v, want %v", audited, want)
	}
}
