package migrations

import "testing"

// consume_email_token spends a link once, for its own purpose, before its
// expiry, and only while its user still has the address it was sent to.
func TestConsumeEmailTokenOnce(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, email := newUser(t, pool, tenant)
	issue := func(secret, purpose, expires string) {
		exec(t, pool, `INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, expires_at)
			VALUES ($1, sha256(convert_to($2, 'UTF8')), $3, $4::uuid, now() + $5::interval)`, purpose, secret, email, user, expires)
	}
	spend := func(secret, purpose string) int {
		return scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.consume_email_token($1, sha256(convert_to($2, 'UTF8')))`,
			purpose, secret)
	}
	a, b, c, d := uniq("a"), uniq("b"), uniq("c"), uniq("d")
	issue(a, "password_reset", "30 minutes")
	issue(b, "password_reset", "30 minutes")
	issue(c, "password_reset", "-1 second")
	issue(d, "email_verification", "1 hour")
	if n := spend(a, "email_verification"); n != 0 {
		t.Fatalf("a reset link spent as a verification link: %d rows", n)
	}
	if n := spend(c, "password_reset"); n != 0 {
		t.Fatalf("an expired link was spent: %d rows", n)
	}
	if n := spend(a, "password_reset"); n != 1 {
		t.Fatalf("a live link was not spent: %d rows", n)
	}
	if n := spend(a, "password_reset"); n != 0 {
		t.Fatalf("a link was spent twice")
	}
	if n := spend(b, "password_reset"); n != 0 {
		t.Fatalf("spending one reset link left the user's other one live")
	}
	exec(t, pool, `UPDATE queen_proxy.users SET email = $2 WHERE id = $1::uuid`, user, uniq("moved")+"@example.com")
	if n := spend(d, "email_verification"); n != 0 {
		t.Fatalf("a link sent to an address the user no longer has was spent")
	}
}

// prune_email_tokens forgets links that ended before the cut-off and keeps
// every live one.
func TestPruneEmailTokens(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, email := newUser(t, pool, tenant)
	insert := func(secret, expires, used string) {
		exec(t, pool, `INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, expires_at, used_at)
			VALUES ('password_reset', sha256(convert_to($1, 'UTF8')), $2, $3::uuid, now() + $4::interval, now() + $5::interval)`,
			secret, email, user, expires, used)
	}
	insert(uniq("old-expired"), "-40 days", "-40 days")
	insert(uniq("old-used"), "1 hour", "-40 days")
	exec(t, pool, `INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, expires_at)
		VALUES ('password_reset', sha256(convert_to($1, 'UTF8')), $2, $3::uuid, now() + interval '1 hour')`, uniq("live"), email, user)
	if n := scalar[int64](t, pool, `SELECT queen_proxy.prune_email_tokens(now() - interval '30 days')`); n < 2 {
		t.Fatalf("pruned %d links, want at least the 2 that ended 40 days ago", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.email_tokens WHERE user_id = $1::uuid`, user); n != 1 {
		t.Fatalf("%d links left, want the live one", n)
	}
}
