package migrations

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func TestIssueAPIKey(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	l := listen(t, pool)
	hash := hashOf("qk_live_" + randHex(16))

	id := scalar[string](t, pool, "SELECT queen_proxy.issue_api_key($1, '  ci key ', $2, $3)::text",
		cluster, hash, []string{"produce", "read"})
	l.expect(t, cluster) // the payload is the cluster id, not the key id

	var name, gotHash string
	var scopes []string
	var revoked bool
	if err := pool.QueryRow(ctxT(t), "SELECT name, key_hash, scopes, revoked_at IS NOT NULL FROM queen_proxy.api_keys WHERE id = $1", id).
		Scan(&name, &gotHash, &scopes, &revoked); err != nil {
		t.Fatal(err)
	}
	if name != "ci key" || gotHash != hash || strings.Join(scopes, ",") != "produce,read" || revoked {
		t.Fatalf("key = %q %q %v %v", name, gotHash, scopes, revoked)
	}
	o := oneOp(t, pool, tenant, "api_key_issued")
	if str(o.ClusterID) != cluster || str(o.Target) != id || o.Meta["name"] != "ci key" || len(o.Meta["scopes"].([]any)) != 2 {
		t.Fatalf("audit row = %+v", o)
	}

	call := "SELECT queen_proxy.issue_api_key($1, $2, $3, $4)"
	all := []string{"produce", "consume", "admin", "read"}
	wantPgErr(t, callErr(t, pool, call, "00000000-0000-0000-0000-000000000000", "k", hashOf("x"), all), "P0002", "issue_api_key: unknown cluster")
	wantPgErr(t, callErr(t, pool, call, cluster, " ", hashOf("x"), all), "22023", "issue_api_key: name")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", strings.ToUpper(hashOf("x")), all), "22023", "issue_api_key: key hash")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", hashOf("x")[:63], all), "22023", "issue_api_key: key hash")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", "qk_live_plaintext", all), "22023", "issue_api_key: key hash")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", hashOf("x"), []string{}), "22023", "issue_api_key: at least one scope")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", hashOf("x"), nil), "22023", "issue_api_key: at least one scope")
	wantPgErr(t, callErr(t, pool, call, cluster, "k", hashOf("x"), []string{"read", "write"}), "22023", "issue_api_key: scopes")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.issue_api_key($1, 'k', $2, ARRAY['read', NULL])", cluster, hashOf("x")), "22023", "issue_api_key: scopes")
	wantPgErr(t, callErr(t, pool, call, cluster, "dup", hash, all), "23505")
	l.expect(t)
}

func TestRevokeAPIKey(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	key := scalar[string](t, pool, "SELECT queen_proxy.issue_api_key($1, 'k', $2, '{read}')::text", cluster, hashOf(randHex(8)))
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.revoke_api_key($1)", key)
	l.expect(t, cluster)
	if !scalar[bool](t, pool, "SELECT revoked_at IS NOT NULL FROM queen_proxy.api_keys WHERE id = $1", key) {
		t.Fatal("revoked_at not set")
	}
	o := oneOp(t, pool, tenant, "api_key_revoked")
	if str(o.ClusterID) != cluster || str(o.Target) != key || o.Actor != "control_plane" {
		t.Fatalf("audit row = %+v", o)
	}

	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_api_key($1)", key), "P0002", "revoke_api_key: unknown or already-revoked key")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_api_key(gen_random_uuid())"), "P0002", "revoke_api_key: unknown or already-revoked key")
	l.expect(t)
	if n := len(ops(t, pool, tenant, "api_key_revoked")); n != 1 {
		t.Fatalf("%d revocations audited, want 1", n)
	}
}

func TestSetAPIKeyExpiry(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	id := scalar[string](t, pool, "SELECT queen_proxy.issue_api_key($1, 'k', $2, '{read}')::text", cluster, hashOf(randHex(8)))
	l := listen(t, pool)

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	exec(t, pool, "SELECT queen_proxy.set_api_key_expiry($1, $2)", id, at)
	l.expect(t, cluster)
	if got := scalar[time.Time](t, pool, "SELECT expires_at FROM queen_proxy.api_keys WHERE id = $1", id); !got.Equal(at) {
		t.Fatalf("expires_at = %v, want %v", got, at)
	}
	if o := ops(t, pool, tenant, "api_key_expiry_set"); len(o) != 1 || str(o[0].Target) != id || str(o[0].ClusterID) != cluster {
		t.Fatalf("audit rows = %+v", o)
	}
	exec(t, pool, "SELECT queen_proxy.set_api_key_expiry($1, NULL)", id)
	l.expect(t, cluster)
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.api_keys WHERE id = $1 AND expires_at IS NULL", id); n != 1 {
		t.Fatal("a NULL expiry did not clear the expiry")
	}

	exec(t, pool, "SELECT queen_proxy.revoke_api_key($1)", id)
	l.take(t)
	call := "SELECT queen_proxy.set_api_key_expiry($1, now())"
	wantPgErr(t, callErr(t, pool, call, id), "P0002", "set_api_key_expiry: unknown or revoked key")
	wantPgErr(t, callErr(t, pool, call, "00000000-0000-0000-0000-000000000000"), "P0002", "set_api_key_expiry: unknown")
	l.expect(t)
}
