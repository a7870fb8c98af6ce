package meter

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Outcome is what a client got for a request, as queen_proxy.request_minutes
// counts it.
type Outcome string

// The outcomes (the request_minutes CHECK list).
const (
	OutcomeOK          Outcome = "ok"  // 2xx and 3xx
	OutcomeForbidden   Outcome = "403" // refused: scope, plan, push block, suspension
	OutcomeRateLimited Outcome = "429" // refused: a rate limit or the login guard
	OutcomeOther4xx    Outcome = "4xx" // any other 4xx
	OutcomeServerError Outcome = "5xx" // the cell's 5xx, or the gateway's 502, 503, 504
)

// Outcomes lists the outcomes in the order the console shows them.
var Outcomes = []Outcome{OutcomeOK, OutcomeForbidden, OutcomeRateLimited, OutcomeOther4xx, OutcomeServerError}

// OutcomeOf classes an HTTP status; 0 (nothing written) is a 200.
func OutcomeOf(status int) Outcome {
	switch {
	case status == 403:
		return OutcomeForbidden
	case status == 429:
		return OutcomeRateLimited
	case status >= 500:
		return OutcomeServerError
	case status >= 400:
		return OutcomeOther4xx
	}
	return OutcomeOK
}

// RequestCount is the number of requests of one cluster, key, minute and
// outcome.
type RequestCount struct {
	KeyID   string // "" for human sessions and refusals before a key was known
	Minute  time.Time
	Outcome Outcome
	Reqs    int64
}

type requestKey struct {
	cluster, key string
	minute       int64 // unix seconds / 60
	outcome      Outcome
}

const requestShards = 16

// RequestTally counts requests per cluster, API key, UTC minute and
// outcome in memory and adds them to queen_proxy.request_minutes every
// flush. It is an observation for the console, not a bill: a flush the
// database refuses is kept for the next one (up to MaxPendingRows), and a
// crash loses what the last flush had not written.
type RequestTally struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	log    *zap.Logger
	seed   maphash.Seed
	shards [requestShards]struct {
		mu sync.Mutex
		m  map[requestKey]int64
	}
	flushMu sync.Mutex
	// While Run runs with the real clock, a ticker keeps the current
	// minute here, so that Record need not read the clock.
	realClock    bool
	coarseOn     atomic.Bool
	coarseMinute atomic.Int64
}

// MaxPendingRows bounds what a tally keeps while the database refuses its
// flushes; beyond it, the oldest flush's rows are dropped (and logged).
const MaxPendingRows = 200_000

// NewRequestTally returns a tally writing to pool; now defaults to
// time.Now, log to none.
func NewRequestTally(pool *pgxpool.Pool, now func() time.Time, log *zap.Logger) *RequestTally {
	realClock := now == nil
	if realClock {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	t := &RequestTally{pool: pool, now: now, log: log, seed: maphash.MakeSeed(), realClock: realClock}
	for i := range t.shards {
		t.shards[i].m = make(map[requestKey]int64)
	}
	return t
}

// Record counts one request of the cluster, made with the key (empty for
// none), answered with status.
func (t *RequestTally) Record(clusterID, keyID string, status int) {
	if t == nil || clusterID == "" {
		return
	}
	var minute int64
	if t.coarseOn.Load() {
		minute = t.coarseMinute.Load()
	} else {
		minute = t.now().Unix() / 60
	}
	k := requestKey{cluster: clusterID, key: keyID, minute: minute, outcome: OutcomeOf(status)}
	sh := &t.shards[maphash.String(t.seed, clusterID)%requestShards]
	sh.mu.Lock()
	sh.m[k]++
	sh.mu.Unlock()
}

// take empties the shards and returns what they held.
func (t *RequestTally) take() map[requestKey]int64 {
	out := make(map[requestKey]int64)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, v := range sh.m {
			out[k] += v
		}
		if len(sh.m) > 0 {
			sh.m = make(map[requestKey]int64)
		}
		sh.mu.Unlock()
	}
	return out
}

// giveBack returns rows a failed flush could not write, within the bound.
func (t *RequestTally) giveBack(rows map[requestKey]int64) {
	if len(rows) > MaxPendingRows {
		t.log.Warn("request counts dropped: the database has refused them too long", zap.Int("rows", len(rows)))
		return
	}
	for k, v := range rows {
		sh := &t.shards[maphash.String(t.seed, k.cluster)%requestShards]
		sh.mu.Lock()
		sh.m[k] += v
		sh.mu.Unlock()
	}
}

// Unflushed is what the tally holds for the cluster and has not written.
func (t *RequestTally) Unflushed(clusterID string) []RequestCount {
	if t == nil {
		return nil
	}
	sh := &t.shards[maphash.String(t.seed, clusterID)%requestShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []RequestCount
	for k, v := range sh.m {
		if k.cluster == clusterID {
			out = append(out, RequestCount{KeyID: k.key, Minute: time.Unix(k.minute*60, 0).UTC(), Outcome: k.outcome, Reqs: v})
		}
	}
	return out
}

// Flush adds what the tally holds to request_minutes in one statement.
// Rows of clusters deleted meanwhile are skipped. The rows are written in
// the order of their key: every gateway of a fleet flushes the same rows
// (a key used through all of them), and two flushes that lock them in
// different orders deadlock.
func (t *RequestTally) Flush(ctx context.Context) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	rows := t.take()
	if len(rows) == 0 {
		return nil
	}
	clusters := make([]string, 0, len(rows))
	keys := make([]string, 0, len(rows))
	minutes := make([]time.Time, 0, len(rows))
	outcomes := make([]string, 0, len(rows))
	reqs := make([]int64, 0, len(rows))
	for k, v := range rows {
		clusters = append(clusters, k.cluster)
		keys = append(keys, k.key)
		minutes = append(minutes, time.Unix(k.minute*60, 0).UTC())
		outcomes = append(outcomes, string(k.outcome))
		reqs = append(reqs, v)
	}
	_, err := t.pool.Exec(ctx, `INSERT INTO queen_proxy.request_minutes AS r (cluster_id, minute, key_id, outcome, reqs)
		SELECT u.cluster_id, u.minute, u.key_id, u.outcome, u.reqs
		  FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[])
		       AS u (cluster_id, minute, key_id, outcome, reqs)
		 WHERE EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.id = u.cluster_id)
		 ORDER BY u.cluster_id, u.minute, u.key_id, u.outcome
		ON CONFLICT (cluster_id, minute, key_id, outcome) DO UPDATE SET reqs = r.reqs + EXCLUDED.reqs`,
		clusters, minutes, keys, outcomes, reqs)
	if err != nil {
		t.giveBack(rows)
		return fmt.Errorf("write request counts: %w", err)
	}
	return nil
}

// RequestKeepDays is how long request counts are kept.
const RequestKeepDays = 35

// Run flushes every interval until ctx ends, then once more within 5 s;
// once an hour (and at start) it prunes counts older than RequestKeepDays.
func (t *RequestTally) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	if t.realClock {
		// A minute's counts may land up to a second late in the next
		// minute: a count for the console, not a bill.
		t.coarseMinute.Store(time.Now().Unix() / 60)
		t.coarseOn.Store(true)
		defer t.coarseOn.Store(false)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			second := time.NewTicker(time.Second)
			defer second.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-second.C:
					t.coarseMinute.Store(now.Unix() / 60)
				}
			}
		}()
	}
	var pruned time.Time
	for {
		if time.Since(pruned) >= time.Hour {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if _, err := t.pool.Exec(pctx, `SELECT queen_proxy.prune_request_minutes($1)`, RequestKeepDays); err != nil && ctx.Err() == nil {
				t.log.Warn("request counts not pruned", zap.Error(err))
			}
			cancel()
			pruned = time.Now()
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := t.Flush(fctx); err != nil {
				t.log.Warn("final request count flush failed", zap.Error(err))
			}
			cancel()
			return
		case <-tick.C:
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := t.Flush(fctx); err != nil && ctx.Err() == nil {
				t.log.Warn("request count flush failed; kept for the next", zap.Error(err))
			}
			cancel()
		}
	}
}
