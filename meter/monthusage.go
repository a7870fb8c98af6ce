package meter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxMinuteSpans is how many separate spans of minutes MinuteSpans names
// before it reads from the first to the last instead: more minutes, still
// the same totals (a final day's row is never less than its minutes).
const maxMinuteSpans = 8

// MinuteSpans is where a reader of the whole fleet must read minutes in
// [from, to): the stretches queen_proxy.usage_minute_ranges names (days a
// bound cuts, days not final), adjacent ones joined. Named as bounds in the
// reader's statement (SpansCondition), they let the planner read exactly
// those days' partitions; a join with the function made it probe every
// partition once per day and compile the plan (10,000 clusters: 2.2 s
// against 0.4 s).
func MinuteSpans(ctx context.Context, pool *pgxpool.Pool, from, to time.Time) ([][2]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT from_at, to_at FROM queen_proxy.usage_minute_ranges($1, $2) ORDER BY from_at`, from, to)
	if err != nil {
		return nil, fmt.Errorf("read the spans of minutes to read: %w", err)
	}
	var spans [][2]time.Time
	var a, b time.Time
	_, err = pgx.ForEachRow(rows, []any{&a, &b}, func() error {
		if n := len(spans); n > 0 && spans[n-1][1].Equal(a) {
			spans[n-1][1] = b
		} else {
			spans = append(spans, [2]time.Time{a, b})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the spans of minutes to read: %w", err)
	}
	if len(spans) > maxMinuteSpans {
		spans = [][2]time.Time{{spans[0][0], spans[len(spans)-1][1]}}
	}
	return spans, nil
}

// SpansCondition is a condition on usage_minutes.minute that holds inside
// spans, with its bounds appended to args as parameters ("false" when there
// are none).
func SpansCondition(spans [][2]time.Time, args []any) (string, []any) {
	if len(spans) == 0 {
		return "false", args
	}
	parts := make([]string, len(spans))
	for i, sp := range spans {
		args = append(args, sp[0], sp[1])
		parts[i] = fmt.Sprintf("(minute >= $%d AND minute < $%d)", len(args)-1, len(args))
	}
	return strings.Join(parts, " OR "), args
}

// monthBillableSQL is cluster_month_billable_msgs for every cluster with a
// monthly quota at once: per cluster and day the larger of the rolled-up
// billable messages and those of its minutes, minutes read only in the
// spans (%s) that are not final. $1 and $2 are the month's first day and
// the next month's.
const monthBillableSQL = `
WITH q AS (
    SELECT c.id, p.monthly_msgs_quota, c.limit_overrides
      FROM queen_proxy.clusters c
      JOIN queen_proxy.plans p ON p.id = c.plan_id
     WHERE c.status <> 'deleting'
       AND (p.monthly_msgs_quota IS NOT NULL OR jsonb_exists(c.limit_overrides, 'monthly_msgs_quota'))
), d AS (
    SELECT cluster_id, day, sum(msgs) AS msgs
      FROM queen_proxy.usage_days
     WHERE day >= $1::date AND day < $2::date AND op_class IN ` + BilledOpsSQL + `
       AND cluster_id IN (SELECT id FROM q)
     GROUP BY 1, 2
), m AS (
    SELECT cluster_id, (minute AT TIME ZONE 'UTC')::date AS day, sum(msgs) AS msgs
      FROM queen_proxy.usage_minutes
     WHERE (%s) AND op_class IN ` + BilledOpsSQL + `
       AND cluster_id IN (SELECT id FROM q)
     GROUP BY 1, 2
), u AS (
    SELECT coalesce(d.cluster_id, m.cluster_id) AS cluster_id,
           sum(greatest(coalesce(d.msgs, 0), coalesce(m.msgs, 0)))::bigint AS msgs
      FROM d FULL JOIN m ON m.cluster_id = d.cluster_id AND m.day = d.day
     GROUP BY 1
)
SELECT q.id::text, q.monthly_msgs_quota, q.limit_overrides, coalesce(u.msgs, 0)::bigint
  FROM q LEFT JOIN u ON u.cluster_id = q.id`
