package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// statementWindow is the database's counters when the measured load began.
type statementWindow struct {
	started time.Time
}

// statement is one normalised statement and how often it ran.
type statement struct {
	calls int64
	rows  int64
	query string
}

type statementCounts struct {
	total  int64
	top    []statement
	window time.Duration
}

// statementsStart empties pg_stat_statements, so that what it holds at the
// end is what the gateway sent while it was measured (its start-up,
// migrations and first cache fills are not per-request work).
func (e *env) statementsStart(ctx context.Context) (statementWindow, error) {
	w := statementWindow{started: time.Now()}
	if _, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return w, fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return w, nil
}

// statementsEnd reads what the gateway's connections ran since
// statementsStart: every statement pg_stat_statements saw in the bench
// database except the benchmark's own reads of the statistics.
func (e *env) statementsEnd(ctx context.Context, w statementWindow) (statementCounts, error) {
	out := statementCounts{window: time.Since(w.started)}
	time.Sleep(time.Second) // exited backends flush their statistics
	rows, err := e.pool.Query(ctx, `SELECT calls, rows, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT ILIKE '%pg_stat%'
		ORDER BY calls DESC`)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var s statement
		if err := rows.Scan(&s.calls, &s.rows, &s.query); err != nil {
			return out, err
		}
		out.total += s.calls
		out.top = append(out.top, s)
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	return out, nil
}

// meteredRequests is the request count the gateway wrote to usage_minutes
// for the bench clusters: it must equal the requests it answered.
func (e *env) meteredRequests(ctx context.Context) (int64, error) {
	ids := make([]string, len(e.clusters))
	for i, c := range e.clusters {
		ids[i] = c.id
	}
	var n int64
	err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(reqs), 0)::bigint FROM queen_proxy.usage_minutes
		WHERE cluster_id = ANY($1::uuid[])`, ids).Scan(&n)
	return n, err
}

func printStatements(s statementCounts, requests, answered, metered int64) {
	per := 1000 * float64(s.total) / float64(requests)
	fmt.Printf("### Database statements (pg_stat_statements, from the first measured run to the gateway's graceful stop, %.0f s)\n\n", s.window.Seconds())
	fmt.Printf("- %d requests through queengate in the window, %d statements: **%.3f statements per 1,000 proxied requests** — goal ≤ 1: %s\n",
		requests, s.total, per, verdict(per <= 1))
	status := "exact"
	if metered != answered {
		status = fmt.Sprintf("**differs by %d**", metered-answered)
	}
	fmt.Printf("- metering: usage_minutes holds %d requests for the bench clusters; the gateway answered the load generator %d times (warm-up included): %s\n\n", metered, answered, status)
	if len(s.top) > 0 {
		fmt.Println("| calls | rows | statement |")
		fmt.Println("|---:|---:|---|")
		for _, st := range s.top {
			fmt.Printf("| %d | %d | `%s` |\n", st.calls, st.rows, truncate(strings.ReplaceAll(st.query, "|", "\\|"), 110))
		}
		fmt.Println()
	}
}
