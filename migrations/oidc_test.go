package migrations

import "testing"

// TestOIDCProviderNames: identities and create_user take an OpenID Connect
// provider as oidc:<name>, by the Caddyfile's name rule, and still refuse
// anything else.
func TestOIDCProviderNames(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	id := scalar[string](t, pool, "SELECT queen_proxy.create_user($1, $2, NULL, 'oidc:corp-sso')::text", tenant, randHex(4)+"@example.com")
	o := oneOp(t, pool, tenant, "user_created")
	if o.Meta["provider"] != "oidc:corp-sso" {
		t.Fatalf("audit row = %+v", o)
	}
	exec(t, pool, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email, verified)
		VALUES ($1::uuid, 'oidc:corp-sso', $2, 'x@example.com', true)`, id, randHex(8))
	for _, bad := range []string{"oidc:", "oidc:Corp", "oidc:-x", "oidc:x-", "oidc:a.b", "oidc:" + randHex(17), "gitlab", "OIDC:x"} {
		wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.create_user($1, $2, NULL, $3)", tenant, randHex(4)+"@example.com", bad),
			"22023", "create_user: provider")
		wantPgErr(t, callErr(t, pool, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email)
			VALUES ($1::uuid, $2, $3, 'x@example.com')`, id, bad, randHex(8)), "23514", "identities_provider_valid")
	}
	for _, good := range []string{"local", "google", "github", "oidc:a", "oidc:" + randHex(16)} {
		exec(t, pool, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email)
			VALUES ($1::uuid, $2, $3, 'x@example.com')`, id, good, randHex(8))
	}
}
