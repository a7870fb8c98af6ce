package webhook_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/webhook"
)

// events returns the outbox's events of kind, oldest first.
func events(t *testing.T, pool *pgxpool.Pool, kind string) []map[string]any {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT payload FROM queen_proxy.outbox WHERE kind = $1 ORDER BY created_at, id`, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var p map[string]any
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// The kinds 032 adds are recorded by whatever path makes the change
// (plain SQL here, as the CLI, console and API all end in it), once.
func TestTheControlPlaneRecordsEveryKind(t *testing.T) {
	pool := fresh(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctxT(t), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cell := scalar[string](t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class, tenancy_stated)
		VALUES ('c1', 'r', 'http://192.0.2.1:6632', 'shared', 'scoped') RETURNING id::text`)
	tenant := scalar[string](t, pool, `SELECT queen_proxy.create_tenant('acme', 'Acme')::text`)
	cluster := scalar[string](t, pool, `SELECT queen_proxy.create_cluster($1::uuid, 'acme-prod', 'pro', $2::uuid)::text`, tenant, cell)
	key := scalar[string](t, pool, `SELECT queen_proxy.issue_api_key($1::uuid, 'ci', repeat('a', 64), '{produce}')::text`, cluster)

	if e := events(t, pool, "api_key_issued"); len(e) != 1 || e[0]["key_id"] != key || e[0]["cluster_slug"] != "acme-prod" || e[0]["tenant_id"] != tenant {
		t.Fatalf("api_key_issued: %v", e)
	}
	// Expiring: announced once per expiry, again when the expiry moves.
	exec(`SELECT queen_proxy.set_api_key_expiry($1::uuid, now() + interval '2 days')`, key)
	for range 2 {
		exec(`SELECT queen_proxy.announce_expiring_keys(interval '7 days')`)
	}
	exec(`SELECT queen_proxy.set_api_key_expiry($1::uuid, now() + interval '3 days')`, key)
	exec(`SELECT queen_proxy.announce_expiring_keys(interval '7 days')`)
	exec(`SELECT queen_proxy.announce_expiring_keys(interval '7 days')`)
	if e := events(t, pool, "api_key_expiring"); len(e) != 2 || e[0]["key_id"] != key || e[1]["expires_at"] == e[0]["expires_at"] {
		t.Fatalf("api_key_expiring: %v", e)
	}
	exec(`SELECT queen_proxy.revoke_api_key($1::uuid)`, key)
	if e := events(t, pool, "api_key_revoked"); len(e) != 1 || e[0]["key_id"] != key || e[0]["revoked_at"] == nil {
		t.Fatalf("api_key_revoked: %v", e)
	}
	// A revoked key is not announced as expiring.
	exec(`SELECT queen_proxy.announce_expiring_keys(interval '7 days')`)
	if e := events(t, pool, "api_key_expiring"); len(e) != 2 {
		t.Fatalf("api_key_expiring after the revocation: %v", e)
	}

	exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, cluster)
	exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, cluster) // no change, no event
	if e := events(t, pool, "cluster_status_changed"); len(e) != 1 || e[0]["from"] != "active" || e[0]["to"] != "suspended" || e[0]["cluster_id"] != cluster {
		t.Fatalf("cluster_status_changed: %v", e)
	}
	exec(`UPDATE queen_proxy.tenants SET status = 'grace' WHERE id = $1::uuid`, tenant)
	if e := events(t, pool, "tenant_status_changed"); len(e) != 1 || e[0]["to"] != "grace" {
		t.Fatalf("tenant_status_changed: %v", e)
	}

	// The probe finds the broker of a cell stated scoped unscoped.
	exec(`UPDATE queen_proxy.cells SET tenant_scoping = 'scoped' WHERE id = $1::uuid`, cell)
	exec(`UPDATE queen_proxy.cells SET tenant_scoping = 'unscoped', tenant_scoping_detail = 'probe saw another tenant' WHERE id = $1::uuid`, cell)
	exec(`UPDATE queen_proxy.cells SET tenant_scoping_checked_at = now(), tenant_scoping = 'unscoped' WHERE id = $1::uuid`, cell)
	if e := events(t, pool, "cell_tenancy_contradicted"); len(e) != 1 || e[0]["cell_slug"] != "c1" || e[0]["detail"] != "probe saw another tenant" {
		t.Fatalf("cell_tenancy_contradicted: %v", e)
	}

	// A block announced for this month ends once the cluster is no longer
	// in the blocked list; a block of last month ends with the month.
	month := time.Now().UTC().Format("2006-01")
	exec(`SELECT queen_proxy.announce_monthly_quota($1::uuid, 'cluster_monthly_quota_blocked', $2, 10, 10)`, cluster, month)
	exec(`SELECT queen_proxy.clear_monthly_quota_blocks($1, ARRAY[$2::uuid])`, month, cluster)
	if e := events(t, pool, "cluster_monthly_quota_cleared"); len(e) != 0 {
		t.Fatalf("cleared while still blocked: %v", e)
	}
	for range 2 {
		exec(`SELECT queen_proxy.clear_monthly_quota_blocks($1, '{}')`, month)
	}
	if e := events(t, pool, "cluster_monthly_quota_cleared"); len(e) != 1 || e[0]["month"] != month || e[0]["reason"] != "under_quota" {
		t.Fatalf("cluster_monthly_quota_cleared: %v", e)
	}
	next := time.Now().UTC().AddDate(0, 1, 0).Format("2006-01")
	exec(`SELECT queen_proxy.announce_monthly_quota($1::uuid, 'cluster_monthly_quota_blocked', $2, 10, 10)`, cluster, next)
	after := time.Now().UTC().AddDate(0, 2, 0).Format("2006-01")
	exec(`SELECT queen_proxy.clear_monthly_quota_blocks($1, ARRAY[$2::uuid])`, after, cluster)
	if e := events(t, pool, "cluster_monthly_quota_cleared"); len(e) != 2 || e[1]["month"] != next || e[1]["reason"] != "month_over" {
		t.Fatalf("cluster_monthly_quota_cleared at the month's end: %v", e)
	}

	// Every kind recorded is one the filters know (and the docs list).
	rows, err := pool.Query(ctxT(t), `SELECT DISTINCT kind FROM queen_proxy.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		if webhook.CheckEvents([]string{k}) != nil {
			t.Errorf("kind %q is recorded but not in webhook.Kinds", k)
		}
	}
}
