package migrations

import (
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
)

// 031 runs again as a no-op, and its table refuses what the API must never
// store: a plaintext in place of a hash, an unknown scope, two live tokens
// of one name.
func TestMachineTokensMigration(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	sql, err := files.ReadFile("031_machine_tokens.sql")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, pool, string(sql))
	const hash = "0000000000000000000000000000000000000000000000000000000000000001"
	id := scalar[string](t, pool, `SELECT queen_proxy.create_machine_token('signup', $1, ARRAY['provision'], NULL, NULL, NULL)::text`, hash)
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.create_machine_token('signup', $1, ARRAY['read'], NULL, NULL, NULL)`,
		"0000000000000000000000000000000000000000000000000000000000000002"), "23505", "already named")
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.create_machine_token('other', 'qmt_plaintext', ARRAY['read'], NULL, NULL, NULL)`), "23514", "")
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.create_machine_token('other', $1, ARRAY['admin'], NULL, NULL, NULL)`,
		"0000000000000000000000000000000000000000000000000000000000000003"), "23514", "")
	exec(t, pool, `SELECT queen_proxy.revoke_machine_token($1::uuid)`, id)
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.revoke_machine_token($1::uuid)`, id), "P0002", "already revoked")
	if n := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.operations WHERE target = $1 AND tenant_id = queen_proxy.platform_tenant_id()`, id); n != 2 {
		t.Fatalf("%d audit rows for a token created and revoked, want 2", n)
	}
}
