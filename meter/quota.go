package meter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/limits"
)

// Quota defaults.
const (
	DefaultQuotaEvery       = time.Hour
	DefaultQuotaWarnPercent = 80
	DefaultUsageKeepDays    = 90
	// DefaultPartitionsAhead is how many UTC days after today have their
	// usage_minutes and request_minutes partitions made in advance: a
	// week of gateways not running the task before a day's rows land in
	// the DEFAULT partition (where they are kept all the same).
	DefaultPartitionsAhead = 7
)

// The outbox kinds of the monthly quota chain.
const (
	KindQuotaWarning = "cluster_monthly_quota_warning"
	KindQuotaBlocked = "cluster_monthly_quota_blocked"
)

type quotaLevel uint8

const (
	levelUnder quotaLevel = iota
	levelWarn
	levelOver
)

// blockSet is an immutable set of clusters whose pushes are blocked until
// the end of the month it was computed for.
type blockSet struct {
	until int64 // unix seconds: the start of the next UTC month
	ids   map[string]struct{}
}

// Quota is the hourly maintenance task of usage: the daily roll-up, the
// pruning of old minute rows and batch ids, and the monthly message quota
// chain. It is a limits.PushBlockSource: PushBlock answers from memory.
//
// The monthly quota counts billable messages only (the push and txn
// operation classes: stored pushes, committed transactional pushes, stream
// sink items, stored DLQ replays), never deliveries (a message is billed
// once, when stored, however many consumers read it), over the
// UTC calendar month. At WarnPercent of the quota a cluster gets one
// cluster_monthly_quota_warning outbox event per month; at 100% one
// cluster_monthly_quota_blocked event, and its pushes are blocked until the
// month ends (the block lapses at the month change by itself, without
// waiting for the next run) or until a run finds it under quota again (the
// quota was raised or removed). Each event is made once per cluster and
// month, also across restarts and several gateways
// (queen_proxy.announce_monthly_quota).
type Quota struct {
	pool *pgxpool.Pool
	now  func() time.Time
	log  *zap.Logger

	// Settings; change them before the first RunOnce.
	WarnPercent     int // default 80
	KeepDays        int // usage_minutes kept (rolled-up days only); default 90
	BatchKeepDays   int // meter batch ids kept; default 90
	PartitionsAhead int // days after today given their partitions; default 7

	mu        sync.Mutex // one run at a time; guards month and announced
	month     string
	announced map[string]quotaLevel // highest level announced this month
	blocks    atomic.Pointer[blockSet]
}

var _ limits.PushBlockSource = (*Quota)(nil)

// NewQuota returns a Quota with no cluster blocked; run it (RunOnce or Run)
// before serving, because blocks live only in memory.
func NewQuota(pool *pgxpool.Pool, now func() time.Time, log *zap.Logger) *Quota {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Quota{
		pool: pool, now: now, log: log,
		WarnPercent: DefaultQuotaWarnPercent, KeepDays: DefaultUsageKeepDays, BatchKeepDays: DefaultUsageKeepDays,
		PartitionsAhead: DefaultPartitionsAhead,
		announced:       map[string]quotaLevel{},
	}
}

// PushBlock reports limits.PushBlockedMonthly for a cluster over its
// monthly quota in the current month, limits.PushOpen otherwise.
func (q *Quota) PushBlock(clusterID string) limits.PushBlock {
	s := q.blocks.Load()
	if s == nil {
		return limits.PushOpen
	}
	if _, ok := s.ids[clusterID]; !ok {
		return limits.PushOpen
	}
	if q.now().Unix() >= s.until {
		return limits.PushOpen
	}
	return limits.PushBlockedMonthly
}

// Blocked returns the clusters whose pushes are blocked now.
func (q *Quota) Blocked() []string {
	s := q.blocks.Load()
	if s == nil || q.now().Unix() >= s.until {
		return nil
	}
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// Run calls RunOnce at once and then every interval (default hourly) until
// ctx ends. Failures are logged; the previous decisions stay.
func (q *Quota) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultQuotaEvery
	}
	runOnce := func() {
		rctx, cancel := context.WithTimeout(ctx, quotaRunTimeout)
		defer cancel()
		_ = q.RunOnce(rctx)
	}
	runOnce()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			runOnce()
		}
	}
}

// quotaRunTimeout bounds one run of Run, so a database that stops answering
// cannot hold the task past the next tick.
const quotaRunTimeout = 2 * time.Minute

type quotaRow struct {
	id        string
	planQuota *int64
	overrides []byte
	msgs      int64
}

// RunOnce makes the usage tables' day partitions from yesterday to
// PartitionsAhead days ahead (by the database's clock), rolls usage_minutes
// up into usage_days, prunes minute rows older than KeepDays (only
// rolled-up days; whole day partitions where it can) and batch ids older
// than BatchKeepDays, then evaluates the monthly quota of every cluster
// that has one. A failed roll-up skips the pruning; a failed quota query
// leaves the previous decisions in place; a failed partition run is
// retried at the next (a day without its partition keeps its rows in the
// DEFAULT partition). The errors are logged and returned joined.
func (q *Quota) RunOnce(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var errs []error
	if err := q.maintain(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := q.evaluate(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// partitionsSQL makes the day partitions from yesterday (a minute closed
// just before midnight is written just after it) to $1 days ahead.
const partitionsSQL = `SELECT queen_proxy.usage_partitions_ensure(
    (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + $1::integer)`

func (q *Quota) maintain(ctx context.Context) error {
	var errs []error
	var made int
	if err := q.pool.QueryRow(ctx, partitionsSQL, max(q.PartitionsAhead, 1)).Scan(&made); err != nil {
		q.log.Warn("usage partitions not made; retried next run", zap.Error(err))
		errs = append(errs, fmt.Errorf("meter: usage partitions: %w", err))
	} else if made > 0 {
		q.log.Info("usage partitions made", zap.Int("partitions", made), zap.Int("days_ahead", q.PartitionsAhead))
	}
	var rolled int
	if err := q.pool.QueryRow(ctx, "SELECT queen_proxy.rollup_usage_days(NULL)").Scan(&rolled); err != nil {
		q.log.Warn("usage_days rollup failed; pruning skipped", zap.Error(err))
		return errors.Join(append(errs, fmt.Errorf("meter: usage roll-up: %w", err))...)
	}
	q.log.Info("usage_days rollup ok", zap.Int("rows", rolled))
	var pruned int
	if err := q.pool.QueryRow(ctx, "SELECT queen_proxy.prune_usage_minutes($1)", q.KeepDays).Scan(&pruned); err != nil {
		q.log.Warn("usage_minutes prune failed", zap.Error(err))
		errs = append(errs, fmt.Errorf("meter: usage prune: %w", err))
	} else if pruned > 0 {
		q.log.Info("usage_minutes pruned", zap.Int("pruned", pruned), zap.Int("keep_days", q.KeepDays))
	}
	if err := q.pool.QueryRow(ctx, "SELECT queen_proxy.prune_meter_batches($1)", q.BatchKeepDays).Scan(&pruned); err != nil {
		q.log.Warn("meter batch id prune failed", zap.Error(err))
		errs = append(errs, fmt.Errorf("meter: batch id prune: %w", err))
	}
	return errors.Join(errs...)
}

func (q *Quota) evaluate(ctx context.Context) error {
	now := q.now().UTC()
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	next := first.AddDate(0, 1, 0)
	month := first.Format("2006-01")

	list, err := q.query(ctx, first)
	if err != nil {
		q.log.Warn("monthly quota query failed; previous decisions kept", zap.Error(err))
		return fmt.Errorf("meter: monthly quota query: %w", err)
	}
	if month != q.month {
		q.month = month
		q.announced = map[string]quotaLevel{}
	}
	prev := q.blocks.Load()
	blocked := map[string]struct{}{}
	var errs []error
	for _, r := range list {
		quota, limited := effectiveMonthlyQuota(r.planQuota, r.overrides)
		if !limited {
			continue
		}
		lvl := levelOf(r.msgs, quota, q.WarnPercent)
		if lvl == levelOver {
			blocked[r.id] = struct{}{}
			if prev == nil || prev.until != next.Unix() || !has(prev.ids, r.id) {
				q.log.Warn("monthly message quota exhausted; pushes blocked", zap.String("cluster", r.id),
					zap.Int64("msgs", r.msgs), zap.Int64("quota", quota), zap.String("month", month))
			}
		}
		if lvl > q.announced[r.id] {
			kind := KindQuotaWarning
			if lvl == levelOver {
				kind = KindQuotaBlocked
			}
			var made bool
			err := q.pool.QueryRow(ctx, "SELECT queen_proxy.announce_monthly_quota($1::uuid, $2, $3, $4, $5)",
				r.id, kind, month, r.msgs, quota).Scan(&made)
			if err != nil {
				q.log.Warn("monthly quota announcement failed; retried next run", zap.String("cluster", r.id),
					zap.String("kind", kind), zap.Error(err))
				errs = append(errs, fmt.Errorf("meter: announce %s for %s: %w", kind, r.id, err))
			} else {
				q.announced[r.id] = lvl
				if made {
					q.log.Info("monthly quota announced", zap.String("cluster", r.id), zap.String("kind", kind),
						zap.Int64("msgs", r.msgs), zap.Int64("quota", quota), zap.String("month", month))
				}
			}
		}
	}
	if prev != nil && prev.until == next.Unix() {
		for id := range prev.ids {
			if !has(blocked, id) {
				q.log.Info("monthly message quota back under; pushes unblocked", zap.String("cluster", id))
			}
		}
	}
	q.blocks.Store(&blockSet{until: next.Unix(), ids: blocked})
	// The list is complete (every cluster with a quota), so a block
	// announced for a cluster not in it now has ended: announce that once
	// (cluster_monthly_quota_cleared), as for earlier months' blocks.
	ids := make([]string, 0, len(blocked))
	for id := range blocked {
		ids = append(ids, id)
	}
	var cleared int
	if err := q.pool.QueryRow(ctx, "SELECT queen_proxy.clear_monthly_quota_blocks($1, $2::uuid[])", month, ids).Scan(&cleared); err != nil {
		q.log.Warn("announcing ended monthly quota blocks failed; retried next run", zap.Error(err))
		errs = append(errs, fmt.Errorf("meter: announce ended quota blocks: %w", err))
	} else if cleared > 0 {
		q.log.Info("monthly quota blocks ended", zap.Int("clusters", cleared), zap.String("month", month))
	}
	return errors.Join(errs...)
}

func has(set map[string]struct{}, id string) bool {
	_, ok := set[id]
	return ok
}

// query reads the month's billable messages of every cluster with a
// monthly quota in one statement (cluster_month_billable_msgs' rule, set
// based): called per cluster it took 7 s an hour on every gateway at
// 10,000 clusters.
func (q *Quota) query(ctx context.Context, first time.Time) ([]quotaRow, error) {
	next := first.AddDate(0, 1, 0)
	spans, err := MinuteSpans(ctx, q.pool, first, next)
	if err != nil {
		return nil, err
	}
	cond, args := SpansCondition(spans, []any{first, next})
	rows, err := q.pool.Query(ctx, fmt.Sprintf(monthBillableSQL, cond), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []quotaRow
	for rows.Next() {
		var r quotaRow
		if err := rows.Scan(&r.id, &r.planQuota, &r.overrides, &r.msgs); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// effectiveMonthlyQuota applies a cluster's limit_overrides to its plan's
// monthly_msgs_quota with the rule of every limit: an absent key keeps the
// plan value, JSON null means unlimited, a non-negative integer replaces
// it, anything else keeps the plan value. limited is false when unlimited.
func effectiveMonthlyQuota(plan *int64, overrides []byte) (quota int64, limited bool) {
	var raw map[string]json.RawMessage
	if len(overrides) > 0 && json.Unmarshal(overrides, &raw) == nil {
		if v, ok := raw["monthly_msgs_quota"]; ok {
			if string(v) == "null" {
				return 0, false
			}
			var n float64
			if json.Unmarshal(v, &n) == nil && n >= 0 && n == math.Trunc(n) && n <= math.MaxInt64/2 {
				return int64(n), true
			}
		}
	}
	if plan == nil {
		return 0, false
	}
	return *plan, true
}

// levelOf grades msgs against quota: over at 100% (a quota of 0 is over at
// once), warn at warnPercent, with 128-bit products so nothing overflows.
func levelOf(msgs, quota int64, warnPercent int) quotaLevel {
	if msgs < 0 {
		msgs = 0
	}
	if msgs >= quota {
		return levelOver
	}
	if warnPercent < 0 {
		warnPercent = 0
	}
	aHi, aLo := bits.Mul64(uint64(msgs), 100)
	bHi, bLo := bits.Mul64(uint64(quota), uint64(warnPercent))
	if aHi > bHi || (aHi == bHi && aLo >= bLo) {
		return levelWarn
	}
	return levelUnder
}
