package meter

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestOutcomeOf(t *testing.T) {
	cases := map[int]Outcome{0: OutcomeOK, 200: OutcomeOK, 204: OutcomeOK, 303: OutcomeOK, 400: OutcomeOther4xx,
		401: OutcomeOther4xx, 403: OutcomeForbidden, 404: OutcomeOther4xx, 413: OutcomeOther4xx, 429: OutcomeRateLimited,
		500: OutcomeServerError, 502: OutcomeServerError, 503: OutcomeServerError, 504: OutcomeServerError}
	for status, want := range cases {
		if got := OutcomeOf(status); got != want {
			t.Errorf("OutcomeOf(%d) = %s, want %s", status, got, want)
		}
	}
}

// TestRequestTallyAddsPerKeyMinuteAndOutcome: counts land per key, minute
// and outcome, a second flush adds to the first, what is not flushed is
// shown as unflushed, and a deleted cluster's counts are skipped.
func TestRequestTallyAddsPerKeyMinuteAndOutcome(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "pro")
	gone := newCluster(t, pool, "pro")
	start := time.Date(2026, 11, 30, 10, 0, 30, 0, time.UTC)
	clk := newClock(start)
	tally := NewRequestTally(pool, clk.Now, nil)

	tally.Record(cluster, "k1", 200)
	tally.Record(cluster, "k1", 200)
	tally.Record(cluster, "k1", 429)
	tally.Record(cluster, "", 403)
	tally.Record(cluster, "k2", 502)
	tally.Record(gone, "k9", 200)
	tally.Record("", "k1", 200) // no cluster: not counted
	if u := tally.Unflushed(cluster); len(u) != 4 {
		t.Fatalf("unflushed %v, want 4 rows", u)
	}
	exec(t, pool, `DELETE FROM queen_proxy.clusters WHERE id = $1::uuid`, gone)
	if err := tally.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if u := tally.Unflushed(cluster); len(u) != 0 {
		t.Fatalf("unflushed after flush %v", u)
	}
	clk.Add(time.Minute)
	tally.Record(cluster, "k1", 200)
	tally.Record(cluster, "k1", 429)
	clk.Set(start)
	tally.Record(cluster, "k1", 429)
	if err := tally.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	reqs := func(key, outcome string, minute time.Time) int64 {
		return scalar[int64](t, pool, `SELECT coalesce(sum(reqs), 0)::bigint FROM queen_proxy.request_minutes
			WHERE cluster_id = $1::uuid AND key_id = $2 AND outcome = $3 AND minute = $4`, cluster, key, outcome, minute)
	}
	m0 := start.Truncate(time.Minute)
	m1 := m0.Add(time.Minute)
	for _, c := range []struct {
		key, outcome string
		minute       time.Time
		want         int64
	}{
		{"k1", "ok", m0, 2}, {"k1", "429", m0, 2}, {"", "403", m0, 1}, {"k2", "5xx", m0, 1},
		{"k1", "ok", m1, 1}, {"k1", "429", m1, 1},
	} {
		if got := reqs(c.key, c.outcome, c.minute); got != c.want {
			t.Errorf("key %q %s at %s: %d, want %d", c.key, c.outcome, c.minute.Format(time.TimeOnly), got, c.want)
		}
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, gone); n != 0 {
		t.Fatalf("%d rows of a deleted cluster", n)
	}
}

// TestRequestTallyKeepsCountsAFailedFlushCouldNotWrite: the database
// refusing a flush loses nothing the next flush can write.
func TestRequestTallyKeepsCountsAFailedFlushCouldNotWrite(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "pro")
	proxy := newFlakyProxy(t)
	flaky := proxy.pool(t)
	tally := NewRequestTally(flaky, nil, nil)
	tally.Record(cluster, "k1", 200)
	proxy.set(proxyDown)
	if err := tally.Flush(ctxT(t)); err == nil {
		t.Fatal("flush through a refusing proxy succeeded")
	}
	tally.Record(cluster, "k1", 200)
	proxy.set(proxyUp)
	if err := tally.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, pool, `SELECT coalesce(sum(reqs), 0)::bigint FROM queen_proxy.request_minutes
		WHERE cluster_id = $1::uuid AND key_id = 'k1'`, cluster); n != 2 {
		t.Fatalf("%d requests written, want 2", n)
	}
}

// TestRequestTallyRunWritesAndDrains: Run writes on its interval and
// once more when it stops, with the minute its ticker keeps.
func TestRequestTallyRunWritesAndDrains(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "pro")
	tally := NewRequestTally(pool, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tally.Run(ctx, 100*time.Millisecond); close(done) }()
	sum := func() int64 {
		return scalar[int64](t, pool, `SELECT coalesce(sum(reqs), 0)::bigint FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, cluster)
	}
	tally.Record(cluster, "k", 200)
	deadline := time.Now().Add(10 * time.Second)
	for sum() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Run wrote %d requests in 10 s, want 1", sum())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tally.Record(cluster, "k", 503)
	cancel()
	<-done
	if got := sum(); got != 2 {
		t.Fatalf("after stopping, %d requests written, want 2", got)
	}
	minute := scalar[time.Time](t, pool, `SELECT max(minute) FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, cluster)
	if d := time.Since(minute); d < 0 || d > 2*time.Minute {
		t.Fatalf("counted at minute %s, %s from now", minute, d)
	}
}

// TestRequestTallyFlushesOfAFleetDoNotDeadlock: every gateway of a fleet
// tallies the same keys and flushes them into the same rows; two flushes
// that locked those rows in different orders deadlocked, and PostgreSQL
// threw one away (its counts kept for the next flush, but under a steady
// load a gateway failed flush after flush). Several tallies flush the
// same many rows at once, round after round: none may fail.
func TestRequestTallyFlushesOfAFleetDoNotDeadlock(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "pro")
	const gateways, keys, rounds = 4, 200, 8
	tallies := make([]*RequestTally, gateways)
	for i := range tallies {
		tallies[i] = NewRequestTally(pool, nil, nil)
	}
	for range rounds {
		for _, tally := range tallies {
			for k := range keys {
				tally.Record(cluster, fmt.Sprintf("k%03d", k), 200)
			}
		}
		errs := make(chan error, gateways)
		for _, tally := range tallies {
			go func() { errs <- tally.Flush(ctxT(t)) }()
		}
		for range gateways {
			if err := <-errs; err != nil {
				t.Fatalf("a flush beside the others failed: %v", err)
			}
		}
	}
	if n := scalar[int64](t, pool, `SELECT coalesce(sum(reqs), 0)::bigint FROM queen_proxy.request_minutes WHERE cluster_id = $1::uuid`, cluster); n != gateways*keys*rounds {
		t.Fatalf("%d requests counted, want %d", n, gateways*keys*rounds)
	}
}
