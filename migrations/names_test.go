package migrations

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The names queen_proxy records; an existing queen_proxy database must be
// recognised as migrated. queengate's own migrations follow them.
var referenceNames = []string{
	"001_init", "002_functions", "003_limit_override", "004_lifecycle", "005_usage_prune",
	"006_operator", "007_tenant_delete", "008_bootstrap_password", "009_default_families",
	"010_user_name", "011_user_last_login",
}

// queengateNames are the migrations queengate adds on top of the reference
// schema, numbered after it.
var queengateNames = []string{"012_queengate_auth", "013_meter", "014_cell_isolation", "015_gateway_lease", "016_cell_tenancy", "017_usage_unanswered", "018_leader_peer", "019_placement", "020_lifecycle", "021_console_refusals", "022_drain", "023_user_authority", "024_gateway_group_cells", "027_default_tenant_guard", "028_first_day", "029_cell_grants", "030_platform_tenant", "031_machine_tokens", "032_webhooks", "033_usage_export", "034_oidc_providers", "035_email_links", "036_usage_partitions", "037_usage_rollup_incremental", "039_usage_cluster_index", "040_usage_days_final"}

func TestNamesMatchReference(t *testing.T) {
	got := Names()
	want := append(append([]string{}, referenceNames...), queengateNames...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
}

func TestFilesWellFormed(t *testing.T) {
	ms, err := load()
	if err != nil {
		t.Fatal(err)
	}
	prefix := regexp.MustCompile(`^(\d{3})_[a-z0-9_]+$`)
	seen := map[string]bool{}
	last := 0
	for _, m := range ms {
		if seen[m.name] {
			t.Errorf("duplicate migration %s", m.name)
		}
		seen[m.name] = true
		p := prefix.FindStringSubmatch(m.name)
		if p == nil {
			t.Errorf("%s: name is not NNN_lower_snake", m.name)
			continue
		}
		n, _ := strconv.Atoi(p[1])
		if n <= last {
			t.Errorf("%s: prefix %03d does not increase strictly (previous %03d)", m.name, n, last)
		}
		last = n
		if strings.TrimSpace(stripComments(m.sql)) == "" {
			t.Errorf("%s: no statements", m.name)
		}
		if strings.Contains(strings.ToUpper(stripComments(m.sql)), "COMMIT;") {
			t.Errorf("%s: must not manage its own transaction", m.name)
		}
	}
}

// stripComments drops -- comments.
func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestEveryStatementIdempotent runs every file a second time on a migrated
// database: nothing may fail and nothing may change the default plans.
func TestEveryStatementIdempotent(t *testing.T) {
	pool := db(t)
	ms, err := load()
	if err != nil {
		t.Fatal(err)
	}
	before := scalar[string](t, pool, "SELECT jsonb_agg(p ORDER BY code)::text FROM queen_proxy.plans p")
	for _, m := range ms {
		if _, err := pool.Exec(ctxT(t), m.sql); err != nil {
			t.Errorf("re-running %s: %v", m.name, err)
		}
	}
	if after := scalar[string](t, pool, "SELECT jsonb_agg(p ORDER BY code)::text FROM queen_proxy.plans p"); after != before {
		t.Errorf("re-running the migrations changed the plans:\n%s\n%s", before, after)
	}
}
