package controlplane

import (
	"testing"
	"time"
)

func TestParsePeriod(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 30, 0, 0, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		from, to, month string
		want            string
	}{
		{"", "", "", "2026-03-01T00:00:00Z 2026-03-10T11:30:00Z"},
		{"2026-02-01", "2026-03-01", "", "2026-02-01T00:00:00Z 2026-03-01T00:00:00Z"},
		{"2026-02-01T10:00:00+01:00", "", "", "2026-02-01T09:00:00Z 2026-03-10T11:30:00Z"},
		{"", "", "2025-12", "2025-12-01T00:00:00Z 2026-01-01T00:00:00Z"},
	} {
		from, to, err := ParsePeriod(c.from, c.to, c.month, now)
		if got := from.Format(time.RFC3339) + " " + to.Format(time.RFC3339); err != nil || got != c.want {
			t.Errorf("ParsePeriod(%q, %q, %q) = %s, %v; want %s", c.from, c.to, c.month, got, err, c.want)
		}
	}
	_, _, err := ParsePeriod("2026-03-05", "2026-03-05", "", now)
	wantErr(t, err, Invalid, "empty period: from 2026-03-05T00:00:00Z is not before to 2026-03-05T00:00:00Z")
	_, _, err = ParsePeriod("yesterday", "", "", now)
	wantErr(t, err, Invalid, `invalid from "yesterday": use an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)`)
	_, _, err = ParsePeriod("", "31/01/2026", "", now)
	wantErr(t, err, Invalid, `invalid to "31/01/2026": use an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)`)
	_, _, err = ParsePeriod("", "", "2026-13", now)
	wantErr(t, err, Invalid, `invalid month "2026-13": use YYYY-MM`)
	_, _, err = ParsePeriod("2026-01-01", "", "2026-01", now)
	wantErr(t, err, Invalid, "give either a month or from/to, not both")
}

func TestUsage(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	idle := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-idle", Plan: "free", Cell: "eu1-a"}))
	must[Tenant](t)(CreateTenant(ctx, pool, "beta", ""))
	beta := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "beta", Slug: "beta-1", Plan: "free", Cell: "eu1-a"}))

	minute := func(cluster, at, op string, msgs, reqs, in, out int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2::timestamptz, $3, $4, $5, $6, $7)`, cluster, at, op, msgs, reqs, in, out); err != nil {
			t.Fatal(err)
		}
	}
	day := func(cluster, d, op string, msgs, reqs, in, out int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2::date, $3, $4, $5, $6, $7)`, cluster, d, op, msgs, reqs, in, out); err != nil {
			t.Fatal(err)
		}
	}
	a := w.cluster.ID
	// Jan 10 is cut by the start of the period: only its minutes from 12:00 count.
	minute(a, "2026-01-10T11:59:00Z", "push", 1000, 1000, 1000, 1000)
	minute(a, "2026-01-10T12:00:00Z", "push", 1, 1, 10, 20)
	minute(a, "2026-01-10T23:59:00Z", "push", 2, 1, 10, 20)
	day(a, "2026-01-10", "push", 5000, 5000, 5000, 5000)
	// Jan 11 is rolled up and its minutes are pruned.
	day(a, "2026-01-11", "push", 100, 10, 1000, 2000)
	// Jan 12 is rolled up, and late minutes arrived after the roll-up.
	day(a, "2026-01-12", "push", 50, 5, 500, 600)
	minute(a, "2026-01-12T08:00:00Z", "push", 40, 4, 400, 400)
	minute(a, "2026-01-12T09:00:00Z", "push", 30, 3, 300, 300)
	minute(a, "2026-01-12T10:00:00Z", "delivery", 30, 3, 0, 900)
	minute(a, "2026-01-12T11:00:00Z", "txn", 5, 1, 50, 10)
	minute(a, "2026-01-12T12:00:00Z", "read", 0, 7, 0, 70)
	// The end of the period is exclusive.
	minute(a, "2026-01-13T00:00:00Z", "push", 999, 999, 999, 999)
	minute(beta.ID, "2026-01-12T00:00:00Z", "delivery", 4, 4, 0, 40)

	from := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	to := time.Date(2026, 1, 13, 0, 0, 0, 0, time.UTC)
	rep := must[UsageReport](t)(Usage(ctx, pool, UsageQuery{From: from, To: to}))
	if !rep.From.Equal(from) || !rep.To.Equal(to) || len(rep.Clusters) != 3 {
		t.Fatalf("report %+v", rep)
	}
	want := []UsageRow{
		{Cluster: "acme-idle", Tenant: "acme"},
		// requests: 1+1 (Jan 10) + 10 (Jan 11) + max(5, 4+3)=7 push + 3 + 1 + 7 (Jan 12)
		// messages: 3 + 100 + max(50, 70) + 30 + 5; pushed leaves out the 30 delivered.
		{Cluster: "acme-prod", Tenant: "acme", Requests: 30, BillableMessages: 178, Messages: 208, Pushed: 178, Delivered: 30,
			BytesIn: 20 + 1000 + 700 + 50, BytesOut: 40 + 2000 + 700 + 900 + 10 + 70},
		{Cluster: "beta-1", Tenant: "beta", Requests: 4, Messages: 4, Delivered: 4, BytesOut: 40},
	}
	for i, row := range rep.Clusters {
		if row != want[i] {
			t.Errorf("row %d = %+v\n       want %+v", i, row, want[i])
		}
	}

	onlyAcme := must[UsageReport](t)(Usage(ctx, pool, UsageQuery{From: from, To: to, Tenant: "acme"}))
	if len(onlyAcme.Clusters) != 2 {
		t.Fatalf("tenant filter: %+v", onlyAcme.Clusters)
	}
	onlyIdle := must[UsageReport](t)(Usage(ctx, pool, UsageQuery{From: from, To: to, Cluster: idle.ID}))
	if len(onlyIdle.Clusters) != 1 || onlyIdle.Clusters[0] != want[0] {
		t.Fatalf("cluster filter: %+v", onlyIdle.Clusters)
	}
	// A whole-day period uses the roll-up for Jan 10 too.
	jan10 := must[UsageReport](t)(Usage(ctx, pool, UsageQuery{From: from.Truncate(24 * time.Hour), To: from.Add(12 * time.Hour), Cluster: "acme-prod"}))
	if got := jan10.Clusters[0].Messages; got != 5000 {
		t.Fatalf("Jan 10 messages %d, want the rolled-up 5000", got)
	}

	_, err := Usage(ctx, pool, UsageQuery{From: to, To: from})
	wantErr(t, err, Invalid, "empty period: from 2026-01-13T00:00:00Z is not before to 2026-01-10T12:00:00Z")
	_, err = Usage(ctx, pool, UsageQuery{From: from, To: to, Tenant: "nope"})
	wantErr(t, err, NotFound, `unknown tenant "nope"`)
	_, err = Usage(ctx, pool, UsageQuery{From: from, To: to, Cluster: "nope"})
	wantErr(t, err, NotFound, `unknown cluster "nope"`)
}

// The report reads a final day (rolled up, nothing written since) from
// usage_days and every other day from its minutes, and equals the minutes
// whatever the roll-up has reached.
func TestUsageAcrossFinalDays(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	write := func(at time.Time, msgs int64) {
		t.Helper()
		exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2, 'push', $3, 1, $3, 0)
			ON CONFLICT (cluster_id, minute, op_class) DO UPDATE SET msgs = usage_minutes.msgs + EXCLUDED.msgs,
			  reqs = usage_minutes.reqs + 1, bytes_in = usage_minutes.bytes_in + EXCLUDED.bytes_in`, w.cluster.ID, at, msgs)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.AddDate(0, 0, -20), time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	var total int64
	for d := 20; d >= 0; d-- {
		write(today.AddDate(0, 0, -d).Add(time.Minute), int64(d+1))
		total += int64(d + 1)
	}
	report := func(step string, want int64) {
		t.Helper()
		rep := must[UsageReport](t)(Usage(ctx, pool, UsageQuery{From: from, To: to, Cluster: w.cluster.Slug}))
		if got := rep.Clusters[0]; got.Messages != want || got.BytesIn != want {
			t.Fatalf("%s: messages %d, bytes in %d; want %d", step, got.Messages, got.BytesIn, want)
		}
	}
	report("before any roll-up", total)
	exec(`SELECT queen_proxy.rollup_usage_days(NULL)`)
	report("after the roll-up", total)
	write(today.AddDate(0, 0, -10).Add(time.Hour), 1000)
	total += 1000
	report("a late write to a final day", total)
	exec(`SELECT queen_proxy.rollup_usage_days(NULL)`)
	report("after the next roll-up", total)

	// A row slipped into a final day past the trigger is not read: final
	// days come from usage_days alone.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
		VALUES ($1::uuid, $2, 'push', 7, 1, 7, 0)`, w.cluster.ID, today.AddDate(0, 0, -15).Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	report("a final day's minutes are not read", total)
}
