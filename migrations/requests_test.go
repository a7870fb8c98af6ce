package migrations

import "testing"

// TestPruneRequestMinutes: counts older than the horizon go, newer ones
// and the counts of other clusters' recent minutes stay; a horizon under
// a day is refused.
func TestPruneRequestMinutes(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	exec(t, pool, `INSERT INTO queen_proxy.request_minutes (cluster_id, minute, key_id, outcome, reqs) VALUES
		($1::uuid, date_trunc('minute', now() - interval '40 days'), 'k', 'ok', 5),
		($1::uuid, date_trunc('minute', now() - interval '2 days'), 'k', '429', 3),
		($1::uuid, date_trunc('minute', now()), '', '5xx', 1)`, cluster)
	deleted := scalar[int](t, pool, `SELECT queen_proxy.prune_request_minutes(35)`)
	if deleted < 1 {
		t.Fatalf("pruned %d rows, want the 40-day-old one at least", deleted)
	}
	if left := scalar[int](t, pool, `SELECT coalesce(sum(reqs), 0)::int FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, cluster); left != 4 {
		t.Fatalf("%d requests left, want 4", left)
	}
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.prune_request_minutes(0)`), "22023")
	wantPgErr(t, callErr(t, pool, `SELECT queen_proxy.prune_request_minutes(NULL)`), "22023")
}
