package controlplane

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Table is a result as rows of text, printed aligned for people or as CSV
// for spreadsheets.
type Table struct {
	Header []string
	Rows   [][]string
}

// WriteText prints the table with its columns aligned, two spaces apart.
func (t Table) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		clean := make([]string, len(cells))
		for i, c := range cells {
			clean[i] = strings.Map(func(r rune) rune {
				if r == '\t' || r == '\n' || r == '\r' {
					return ' '
				}
				return r
			}, c)
		}
		fmt.Fprintln(tw, strings.Join(clean, "\t"))
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
	return tw.Flush()
}

// WriteCSV prints the table as CSV with a header line.
func (t Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	header := make([]string, len(t.Header))
	for i, h := range t.Header {
		header[i] = strings.NewReplacer(" ", "_", "/", "_per_").Replace(strings.ToLower(h))
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	if err := cw.WriteAll(t.Rows); err != nil {
		return err
	}
	return cw.Error()
}

// WriteJSON prints v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func optStamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

func num(n int64) string { return strconv.FormatInt(n, 10) }

// limitText shows a limit, nil being unlimited.
func limitText(v *int64) string {
	if v == nil {
		return "unlimited"
	}
	return num(*v)
}

// TenantsTable lists tenants.
func TenantsTable(ts []Tenant) Table {
	t := Table{Header: []string{"SLUG", "NAME", "STATUS", "CLUSTERS", "USERS", "CREATED", "ID"}}
	for _, x := range ts {
		t.Rows = append(t.Rows, []string{x.Slug, x.Name, x.Status, strconv.Itoa(x.Clusters), strconv.Itoa(x.Users),
			stamp(x.CreatedAt), x.ID})
	}
	return t
}

// CellsTable lists cells. USED/CAPACITY is used_slots over capacity_slots
// ("no cap" for 0); PLACEMENT is whether placement may choose the cell
// (open) or why not.
func CellsTable(cs []Cell) Table {
	t := Table{Header: []string{"SLUG", "REGION", "CLASS", "STATUS", "USED/CAPACITY", "PLACEMENT", "BROKER URL", "SECRET",
		"TENANCY", "TENANT SCOPING", "SERVES", "KEEPER", "ID"}}
	for _, c := range cs {
		secret := "no"
		if c.HasSecret {
			secret = "yes"
		}
		scoping := c.TenantScoping
		if scoping == "" {
			scoping = "unknown"
		}
		if c.TenantScopingCheckedAt != nil {
			scoping += " (" + c.TenantScopingCheckedAt.UTC().Format(time.RFC3339) + ")"
		}
		serves := "all"
		switch {
		case c.Contradicted:
			serves = "keeper (CONTRADICTED: stated scoped, probe found unscoped)"
		case c.KeeperOnly:
			serves = "keeper"
		}
		keeper := c.KeeperSlug
		if keeper == "" {
			keeper = "-"
		}
		capacity := strconv.Itoa(c.CapacitySlots)
		if c.CapacitySlots == 0 {
			capacity = "no cap"
		}
		placement := c.Placement
		if placement == "" {
			placement = "-"
		}
		t.Rows = append(t.Rows, []string{c.Slug, c.Region, c.Class, c.Status, strconv.Itoa(c.UsedSlots) + "/" + capacity,
			placement, c.BaseURL, secret, c.TenancyStated, scoping, serves, keeper, c.ID})
	}
	return t
}

// ClustersTable lists clusters.
func ClustersTable(cs []Cluster) Table {
	t := Table{Header: []string{"SLUG", "TENANT", "STATUS", "TENANT STATUS", "PLAN", "CELL", "OVERRIDES", "BROKER TENANT", "ID"}}
	for _, c := range cs {
		overrides := string(c.Overrides)
		if overrides == "" || overrides == "{}" {
			overrides = "-"
		}
		t.Rows = append(t.Rows, []string{c.Slug, c.TenantSlug, c.Status, c.TenantStatus, c.PlanCode, c.CellSlug,
			overrides, c.BrokerTenantUUID, c.ID})
	}
	return t
}

// KeysTable lists API keys.
func KeysTable(ks []APIKey) Table {
	t := Table{Header: []string{"ID", "NAME", "CLUSTER", "SCOPES", "STATUS", "CREATED", "LAST USED", "EXPIRES"}}
	for _, k := range ks {
		t.Rows = append(t.Rows, []string{k.ID, k.Name, k.ClusterSlug, strings.Join(k.Scopes, ","), k.Status,
			stamp(k.CreatedAt), optStamp(k.LastUsedAt), optStamp(k.ExpiresAt)})
	}
	return t
}

// UsersTable lists users with their roles (cluster=role).
func UsersTable(us []User) Table {
	t := Table{Header: []string{"EMAIL", "NAME", "TENANT", "OPERATOR", "PASSWORD", "ROLES", "LAST LOGIN", "CREATED FROM", "ID"}}
	for _, u := range us {
		name := "-"
		if u.Name != nil {
			name = *u.Name
		}
		roles := make([]string, 0, len(u.Roles))
		for _, r := range u.Roles {
			roles = append(roles, r.ClusterSlug+"="+r.Role)
		}
		rolesText := strings.Join(roles, ",")
		if rolesText == "" {
			rolesText = "-"
		}
		t.Rows = append(t.Rows, []string{u.Email, name, u.TenantSlug, yesNo(u.IsOperator), yesNo(u.HasPassword),
			rolesText, optStamp(u.LastLoginAt), origin(u), u.ID})
	}
	return t
}

// origin is where a user came from, with who made it when known.
func origin(u User) string {
	if u.CreatedBy != nil {
		return u.CreatedFrom + " by " + *u.CreatedBy
	}
	return u.CreatedFrom
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// PlansTable lists plans with every limit ("unlimited" for none) and the
// features that are on.
func PlansTable(ps []Plan) Table {
	t := Table{Header: []string{"CODE", "CLASS", "REQ/S", "REQ BURST", "MSG/S", "MSG BURST", "QUEUES",
		"PARTITIONS/QUEUE", "PARKED POPS", "PAYLOAD BYTES", "BATCH ITEMS", "RETAINED BYTES", "RETENTION S",
		"MONTHLY MSGS", "FEATURES", "CLUSTERS"}}
	for _, p := range ps {
		row := []string{p.Code, p.CellClass}
		for _, name := range LimitNames {
			text := limitText(p.Limits[name])
			if name == "max_retained_bytes" && p.Limits[name] != nil {
				switch p.StorageQuota {
				case "inactive":
					text += " (inactive)"
				case "partial":
					text += " (inactive on some cells)"
				}
			}
			row = append(row, text)
		}
		row = append(row, FeaturesOn(p.Features), strconv.Itoa(p.Clusters))
		t.Rows = append(t.Rows, row)
	}
	return t
}

// FeaturesOn lists, comma-separated and sorted, the flags of a features
// object that are JSON true ("-" for none).
func FeaturesOn(features json.RawMessage) string {
	var m map[string]any
	_ = json.Unmarshal(features, &m)
	var on []string
	for k, v := range m {
		if b, ok := v.(bool); ok && b {
			on = append(on, k)
		}
	}
	if len(on) == 0 {
		return "-"
	}
	sort.Strings(on)
	return strings.Join(on, ",")
}

// LimitsTable shows a cluster's plan limits, overrides and effective limits.
func LimitsTable(l Limits) Table {
	t := Table{Header: []string{"LIMIT", "PLAN", "OVERRIDE", "EFFECTIVE"}}
	for _, x := range l.Limits {
		override := "-"
		switch {
		case string(x.Override) == "null":
			override = "unlimited"
		case x.Override != nil:
			override = string(x.Override)
		}
		effective := limitText(x.Effective)
		if x.Inactive != "" {
			effective += " (inactive: " + x.Inactive + ")"
		}
		t.Rows = append(t.Rows, []string{x.Name, limitText(x.Plan), override, effective})
	}
	return t
}

// UsageTable shows a usage report, one row per cluster: what is billed
// (BILLABLE MSGS, docs/metering.md), then what is counted but not billed.
func UsageTable(r UsageReport) Table {
	t := Table{Header: []string{"CLUSTER", "TENANT", "BILLABLE MSGS", "DELIVERED (NOT BILLED)", "REQUESTS", "BYTES IN", "BYTES OUT"}}
	for _, u := range r.Clusters {
		t.Rows = append(t.Rows, []string{u.Cluster, u.Tenant, num(u.BillableMessages), num(u.Delivered),
			num(u.Requests), num(u.BytesIn), num(u.BytesOut)})
	}
	return t
}

// UsageCSV is the usage report for billing scripts: the columns it always
// had, in their order (messages is every message counted, pushed what is
// billed), then billable_messages, the billed number under its one name.
func UsageCSV(r UsageReport) Table {
	t := Table{Header: []string{"CLUSTER", "TENANT", "REQUESTS", "MESSAGES", "PUSHED", "DELIVERED", "BYTES IN", "BYTES OUT", "BILLABLE MESSAGES"}}
	for _, u := range r.Clusters {
		t.Rows = append(t.Rows, []string{u.Cluster, u.Tenant, num(u.Requests), num(u.Messages), num(u.Pushed),
			num(u.Delivered), num(u.BytesIn), num(u.BytesOut), num(u.BillableMessages)})
	}
	return t
}
