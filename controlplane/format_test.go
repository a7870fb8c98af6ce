package controlplane

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTableText(t *testing.T) {
	tab := Table{Header: []string{"SLUG", "NAME", "N"}, Rows: [][]string{
		{"acme", "Acme\tInc", "1"},
		{"a-much-longer-slug", "B", "22"},
	}}
	var b strings.Builder
	if err := tab.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"SLUG                NAME      N\n" +
		"acme                Acme Inc  1\n" +
		"a-much-longer-slug  B         22\n"
	if b.String() != want {
		t.Fatalf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestTableCSV(t *testing.T) {
	report := UsageReport{Clusters: []UsageRow{
		{Cluster: "acme-prod", Tenant: "acme", Requests: 3, BillableMessages: 1, Messages: 2, Pushed: 1, Delivered: 1, BytesIn: 10, BytesOut: 20},
	}}
	var b strings.Builder
	if err := UsageCSV(report).WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	// The columns scripts read stay where they were; the billed number's
	// one name comes last.
	want := "cluster,tenant,requests,messages,pushed,delivered,bytes_in,bytes_out,billable_messages\n" +
		"acme-prod,acme,3,2,1,1,10,20,1\n"
	if b.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", b.String(), want)
	}
	// The table names what is billed, and what is counted but not billed.
	b.Reset()
	if err := UsageTable(report).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(b.String(), "\n"); !strings.Contains(head, "BILLABLE MSGS") ||
		!strings.Contains(head, "DELIVERED (NOT BILLED)") || strings.Contains(head, "PUSHED") || strings.Contains(head, " MESSAGES ") {
		t.Fatalf("usage table header %q", head)
	}
	b.Reset()
	quoted := Table{Header: []string{"NAME", "REQ/S"}, Rows: [][]string{{`Acme, "the" Inc`, "5"}}}
	if err := quoted.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	if want := "name,req_per_s\n\"Acme, \"\"the\"\" Inc\",5\n"; b.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b strings.Builder
	if err := WriteJSON(&b, []APIKey{{ID: "k1", Name: "ci", Scopes: []string{"read"}, Status: "live", CreatedAt: at}}); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil {
		t.Fatalf("not JSON: %s", b.String())
	}
	if back[0]["id"] != "k1" || back[0]["created_at"] != "2026-01-02T03:04:05Z" || back[0]["expires_at"] != nil ||
		!strings.HasSuffix(b.String(), "]\n") || !strings.Contains(b.String(), "\n  {") {
		t.Fatalf("json:\n%s", b.String())
	}
}

func TestResultTables(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	name := "Ops"
	cases := []struct {
		tab  Table
		want string
	}{
		{TenantsTable([]Tenant{{ID: "t1", Slug: "acme", Name: "Acme", Status: "active", Clusters: 2, Users: 1, CreatedAt: at}}),
			"acme,Acme,active,2,1,2026-01-02T03:04:05Z,t1"},
		{CellsTable([]Cell{{ID: "c1", Slug: "eu1-a", Region: "eu1", Class: "shared", Status: "draining", Clusters: 3, UsedSlots: 3,
			CapacitySlots: 10, Placement: "draining", BaseURL: "http://a:1", HasSecret: true, TenantScoping: "unscoped", TenantScopingCheckedAt: &at,
			TenancyStated: "probe", KeeperOnly: true, KeeperSlug: "p"},
			{ID: "c2", Slug: "eu1-b", Region: "eu1", Class: "shared", Status: "active", BaseURL: "http://b:1",
				TenantScoping: "unknown", TenancyStated: "scoped"},
			{ID: "c3", Slug: "eu1-c", Region: "eu1", Class: "shared", Status: "active", BaseURL: "http://c:1", Clusters: 2, UsedSlots: 2, Placement: "keeper-only",
				TenantScoping: "unscoped", TenancyStated: "scoped", KeeperOnly: true, Contradicted: true, KeeperSlug: "q"}}),
			"eu1-a,eu1,shared,draining,3/10,draining,http://a:1,yes,probe,unscoped (2026-01-02T03:04:05Z),keeper,p,c1|" +
				"eu1-b,eu1,shared,active,0/no cap,-,http://b:1,no,scoped,unknown,all,-,c2|" +
				"eu1-c,eu1,shared,active,2/no cap,keeper-only,http://c:1,no,scoped,unscoped,keeper (CONTRADICTED: stated scoped, probe found unscoped),q,c3"},
		{ClustersTable([]Cluster{{ID: "k1", Slug: "p", TenantSlug: "acme", Status: "active", TenantStatus: "grace", PlanCode: "pro",
			CellSlug: "eu1-a", Overrides: json.RawMessage("{}"), BrokerTenantUUID: "b1"}}),
			"p,acme,active,grace,pro,eu1-a,-,b1,k1"},
		{KeysTable([]APIKey{{ID: "k1", Name: "ci", ClusterSlug: "p", Scopes: []string{"produce", "read"}, Status: "live",
			CreatedAt: at, ExpiresAt: &at}}),
			"k1,ci,p,produce,read,live,2026-01-02T03:04:05Z,-,2026-01-02T03:04:05Z"},
		{UsersTable([]User{{ID: "u1", Email: "a@b.c", Name: &name, TenantSlug: "acme", IsOperator: true, CreatedFrom: "control_plane",
			Roles: []Role{{ClusterSlug: "p", Role: "admin"}, {ClusterSlug: "q", Role: "viewer"}}},
			{ID: "u2", Email: "x@y.z", TenantSlug: "acme", CreatedFrom: "console", CreatedBy: ptrTo("a@b.c")}}),
			"a@b.c,Ops,acme,yes,no,p=admin,q=viewer,-,control_plane,u1|x@y.z,-,acme,no,no,-,-,console by a@b.c,u2"},
		{LimitsTable(Limits{Limits: []Limit{{Name: "max_queues", Plan: ptr(20), Override: json.RawMessage("500"), Effective: ptr(500)},
			{Name: "req_burst", Plan: ptr(25), Override: json.RawMessage("null")}, {Name: "max_batch_items"}}}),
			"max_queues,20,500,500|req_burst,25,unlimited,unlimited|max_batch_items,unlimited,-,unlimited"},
	}
	for _, c := range cases {
		var rows []string
		for _, r := range c.tab.Rows {
			rows = append(rows, strings.Join(r, ","))
		}
		if got := strings.Join(rows, "|"); got != c.want {
			t.Errorf("rows %q, want %q", got, c.want)
		}
		for _, r := range c.tab.Rows {
			if len(r) != len(c.tab.Header) {
				t.Errorf("row %v has %d cells for %d columns", r, len(r), len(c.tab.Header))
			}
		}
	}
	p := Plan{Code: "x", CellClass: "shared", Limits: map[string]*int64{"max_queues": ptr(5)}, Features: json.RawMessage(`{"kv": true, "streams": false, "traces": "yes"}`)}
	row := PlansTable([]Plan{p}).Rows[0]
	if len(row) != len(PlansTable(nil).Header) || row[6] != "5" || row[2] != "unlimited" || row[14] != "kv" {
		t.Fatalf("plan row %v", row)
	}
}
