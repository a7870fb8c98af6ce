package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/meter"
)

// UsageRow is one cluster's usage over a period. Messages counts every op
// class; Pushed counts the messages accepted by push and transaction
// requests (what is billed) and Delivered the messages handed to consumers.
type UsageRow struct {
	Cluster  string `json:"cluster"`
	Tenant   string `json:"tenant"`
	Requests int64  `json:"requests"`
	// BillableMessages is what is billed (docs/metering.md): messages
	// stored by pushes and transactions. Pushed is the same number under
	// its older name.
	BillableMessages int64 `json:"billable_messages"`
	// Messages is every message counted, billed or not (billable,
	// delivered, and carve-out reads), kept for existing scripts.
	Messages  int64 `json:"messages"`
	Pushed    int64 `json:"pushed"`
	Delivered int64 `json:"delivered"`
	BytesIn   int64 `json:"bytes_in"`
	BytesOut  int64 `json:"bytes_out"`
}

// UsageReport is the usage of every selected cluster over [From, To).
type UsageReport struct {
	From     time.Time  `json:"from"`
	To       time.Time  `json:"to"`
	Clusters []UsageRow `json:"clusters"`
}

// UsageQuery selects the period and the clusters of a report.
type UsageQuery struct {
	From, To time.Time // [From, To)
	Tenant   string    // slug or id; empty for all tenants
	Cluster  string    // slug or id; empty for all clusters
}

// ParsePeriod reads the bounds of a usage period. month (YYYY-MM) selects a
// whole UTC calendar month and excludes from and to. Otherwise from and to
// are RFC 3339 times or dates (midnight UTC); from defaults to the start of
// the current UTC month and to (exclusive) to now.
func ParsePeriod(from, to, month string, now time.Time) (time.Time, time.Time, error) {
	now = now.UTC()
	if m := strings.TrimSpace(month); m != "" {
		if strings.TrimSpace(from) != "" || strings.TrimSpace(to) != "" {
			return time.Time{}, time.Time{}, errorf(Invalid, "give either a month or from/to, not both")
		}
		start, err := time.Parse("2006-01", m)
		if err != nil {
			return time.Time{}, time.Time{}, errorf(Invalid, "invalid month %q: use YYYY-MM", month)
		}
		return start, start.AddDate(0, 1, 0), nil
	}
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	end := now
	var err error
	if strings.TrimSpace(from) != "" {
		if start, err = parseInstant("from", from); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	if strings.TrimSpace(to) != "" {
		if end, err = parseInstant("to", to); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	if !start.Before(end) {
		return time.Time{}, time.Time{}, errorf(Invalid, "empty period: from %s is not before to %s",
			start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return start, end, nil
}

func parseInstant(what, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, errorf(Invalid, "invalid %s %q: use an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)", what, s)
}

// usageSQL sums each cluster's usage over [$1, $2). A UTC day that lies
// wholly inside the period and is final (usage_day_final: rolled up, and
// nothing written to it since) comes from usage_days alone; a day that is
// not final may be in usage_days and in usage_minutes, and per day and op
// class the larger of the two counts, the rule cluster_month_msgs applies.
// Days cut by a bound come from usage_minutes alone. Clusters without
// usage are listed with zeros.
const usageSQL = `WITH sel AS (SELECT id FROM queen_proxy.clusters %s), ` + usageCTE + `
SELECT c.slug, t.slug,
       coalesce(sum(u.reqs), 0)::bigint,
       coalesce(sum(u.msgs), 0)::bigint,
       coalesce(sum(u.msgs) FILTER (WHERE u.op_class IN ` + meter.BilledOpsSQL + `), 0)::bigint,
       coalesce(sum(u.msgs) FILTER (WHERE u.op_class = 'delivery'), 0)::bigint,
       coalesce(sum(u.bytes_in), 0)::bigint,
       coalesce(sum(u.bytes_out), 0)::bigint
  FROM queen_proxy.clusters c
  JOIN queen_proxy.tenants t ON t.id = c.tenant_id
  LEFT JOIN u ON u.cluster_id = c.id
 WHERE c.id IN (SELECT id FROM sel)
 GROUP BY c.id, c.slug, t.slug
 ORDER BY t.slug, c.slug`

// usageCTE is the usage of [$1, $2) per cluster and op class (u), by the
// rule above, of the clusters the query's sel lists (its ids): usageSQL
// and UsageByOpClass both read it. sel's condition is written for the
// filters given, never as "$n IS NULL OR ...": a plan PostgreSQL caches
// for the statement (a pool prepares it once per connection) would then
// serve one cluster and the whole fleet alike, and a plan made for one
// cluster took minutes for a thousand. Both tables are read for those
// clusters only, through their primary keys (cluster first), so a report
// of one cluster or tenant costs what its own rows cost, however large
// the fleet; a filter applied after the CTE would aggregate every
// cluster's minutes of the period first. Minutes are read only in the
// stretches usage_minute_ranges names (today, the days before it the
// roll-up has not closed, late-written days, and days cut by a bound), so
// a month or a year costs its day rows, not its minutes.
const usageCTE = `
m AS (
    SELECT mm.cluster_id, r.day, mm.op_class,
           sum(mm.msgs) AS msgs, sum(mm.reqs) AS reqs, sum(mm.bytes_in) AS bytes_in, sum(mm.bytes_out) AS bytes_out
      FROM queen_proxy.usage_minute_ranges($1, $2) r
      JOIN queen_proxy.usage_minutes mm ON mm.minute >= r.from_at AND mm.minute < r.to_at
     WHERE mm.cluster_id IN (SELECT id FROM sel)
     GROUP BY 1, 2, 3
), d AS (
    SELECT cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out
      FROM queen_proxy.usage_days
     WHERE cluster_id IN (SELECT id FROM sel)
       AND (day::timestamp AT TIME ZONE 'UTC') >= $1
       AND ((day + 1)::timestamp AT TIME ZONE 'UTC') <= $2
), u AS (
    SELECT coalesce(m.cluster_id, d.cluster_id) AS cluster_id, coalesce(m.op_class, d.op_class) AS op_class,
           greatest(coalesce(m.msgs, 0), coalesce(d.msgs, 0)) AS msgs,
           greatest(coalesce(m.reqs, 0), coalesce(d.reqs, 0)) AS reqs,
           greatest(coalesce(m.bytes_in, 0), coalesce(d.bytes_in, 0)) AS bytes_in,
           greatest(coalesce(m.bytes_out, 0), coalesce(d.bytes_out, 0)) AS bytes_out
      FROM m FULL JOIN d ON d.cluster_id = m.cluster_id AND d.day = m.day AND d.op_class = m.op_class
)
`

// Usage reports each selected cluster's usage over the query's period.
func Usage(ctx context.Context, db DB, q UsageQuery) (UsageReport, error) {
	if !q.From.Before(q.To) {
		return UsageReport{}, errorf(Invalid, "empty period: from %s is not before to %s",
			q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	}
	var tenantID, clusterID *string
	if normalize(q.Tenant) != "" {
		t, err := lookupTenant(ctx, db, q.Tenant)
		if err != nil {
			return UsageReport{}, err
		}
		tenantID = &t.ID
	}
	if normalize(q.Cluster) != "" {
		c, err := lookupCluster(ctx, db, q.Cluster)
		if err != nil {
			return UsageReport{}, err
		}
		clusterID = &c.ID
	}
	var where []string
	args := []any{q.From, q.To}
	if tenantID != nil {
		args = append(args, *tenantID)
		where = append(where, fmt.Sprintf("tenant_id = $%d::uuid", len(args)))
	}
	if clusterID != nil {
		args = append(args, *clusterID)
		where = append(where, fmt.Sprintf("id = $%d::uuid", len(args)))
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	rows, err := db.Query(ctx, fmt.Sprintf(usageSQL, cond), args...)
	if err != nil {
		return UsageReport{}, dbError("read usage", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageRow, error) {
		var u UsageRow
		err := r.Scan(&u.Cluster, &u.Tenant, &u.Requests, &u.Messages, &u.Pushed, &u.Delivered, &u.BytesIn, &u.BytesOut)
		u.BillableMessages = u.Pushed
		return u, err
	})
	if err != nil {
		return UsageReport{}, dbError("read usage", err)
	}
	return UsageReport{From: q.From.UTC(), To: q.To.UTC(), Clusters: nonNil(out)}, nil
}
