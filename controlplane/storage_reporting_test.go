package controlplane

import (
	"strings"
	"testing"
)

// TestStorageQuotaShownInactive: while a cell's broker reports no retained
// bytes (cells.storage_reporting, written by the serving gateway), the
// storage limit shows as inactive in `plan list` and in a cluster's limits;
// once it reports them, as a number like any other; a new broker URL
// forgets what the old one reported.
func TestStorageQuotaShownInactive(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	plan := func(code string) Plan {
		t.Helper()
		for _, p := range must[[]Plan](t)(ListPlans(ctx, pool)) {
			if p.Code == code {
				return p
			}
		}
		t.Fatalf("no plan %s", code)
		return Plan{}
	}
	retained := func() Limit {
		t.Helper()
		for _, l := range must[Limits](t)(ClusterLimits(ctx, pool, "acme-prod")).Limits {
			if l.Name == "max_retained_bytes" {
				return l
			}
		}
		t.Fatal("no max_retained_bytes limit")
		return Limit{}
	}
	planRow := func(code string) string {
		for _, row := range PlansTable([]Plan{plan(code)}).Rows {
			return strings.Join(row, " ")
		}
		return ""
	}
	if p := plan("pro"); p.StorageQuota != "unknown" || retained().Inactive != "" {
		t.Fatalf("before any listing: %q / %q, want unknown and not marked", p.StorageQuota, retained().Inactive)
	}
	record := func(value, url string) bool {
		t.Helper()
		return scalar[bool](t, pool, `SELECT queen_proxy.record_cell_storage_reporting($1::uuid, $2, $3)`, w.cell.ID, value, url)
	}
	if !record("not_reported", "http://127.0.0.1:6632") {
		t.Fatal("the record for the cell's own broker was refused")
	}
	if p := plan("pro"); p.StorageQuota != "inactive" || !strings.Contains(planRow("pro"), "21474836480 (inactive)") {
		t.Fatalf("plan list: %q, row %q, want the retained bytes marked inactive", p.StorageQuota, planRow("pro"))
	}
	if l := retained(); l.Inactive != StorageInactive ||
		!strings.Contains(strings.Join(LimitsTable(must[Limits](t)(ClusterLimits(ctx, pool, "acme-prod"))).Rows[9], " "), "(inactive: ") {
		t.Fatalf("cluster limits %+v, want max_retained_bytes inactive", l)
	}
	if p := plan("dedicated-s"); p.StorageQuota != "unknown" {
		t.Fatalf("a plan of another class is %q, want unknown (no dedicated cell)", p.StorageQuota)
	}
	// A record for a broker the cell no longer points at changes nothing.
	if record("reported", "http://127.0.0.1:9999") || plan("pro").StorageQuota != "inactive" {
		t.Fatal("a stale broker's record was taken")
	}
	record("reported", "http://127.0.0.1:6632")
	if p := plan("pro"); p.StorageQuota != "active" || retained().Inactive != "" || strings.Contains(planRow("pro"), "inactive") {
		t.Fatalf("after the broker reports bytes: %q %q %q", p.StorageQuota, retained().Inactive, planRow("pro"))
	}
	record("not_reported", "http://127.0.0.1:6632")
	pool.Exec(ctx, `UPDATE queen_proxy.cells SET base_url = 'http://127.0.0.1:6633' WHERE id = $1::uuid`, w.cell.ID)
	if p := plan("pro"); p.StorageQuota != "unknown" {
		t.Fatalf("after the cell's URL changed: %q, want unknown", p.StorageQuota)
	}
}
