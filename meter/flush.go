package meter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// ErrCircuitOpen is wrapped by flush and replay errors while the database is
// being skipped after repeated failures.
var ErrCircuitOpen = errors.New("meter: database circuit open")

// FlushClosedMinutes journals what was recorded (checkpoint) and writes the
// journaled usage of every minute that has ended (the current minute keeps
// accumulating) to usage_minutes in one statement, an additive upsert. When
// the database does not take it, or the circuit is open, the usage goes to
// the disk spool and the error says so; it is never dropped. If even the
// disk fails it stays in memory for the next call.
func (m *Meter) FlushClosedMinutes(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	return m.write(ctx, minuteOf(m.now()), false)
}

// Drain writes everything, the current minute's usage included, like
// FlushClosedMinutes, and then closes the active spool file so that another
// meter on the same directory (the next process, or the next configuration
// after a reload) can replay it. Run calls it on shutdown within
// ShutdownDrain; call it again after Run returned if requests were recorded
// since.
func (m *Meter) Drain(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	err := m.write(ctx, 0, true)
	m.sealSpool()
	return err
}

// write journals what was recorded, then sends the held batches of the
// minutes before the given one (all when all is set) to the database, or
// else hands everything held to the spool. Only journaled batches (or, when
// the disk failed, batches with their ids fixed) are written, so a replay of
// the journal can never add them a second time. The caller holds flushMu.
func (m *Meter) write(ctx context.Context, before int64, all bool) error {
	_ = m.checkpoint() // logged inside; unjournaled batches still go to the database
	due := m.takeDue(before, all)
	if len(due) == 0 {
		return nil
	}
	if !m.br.allow(m.now()) {
		return m.handOver(due, ErrCircuitOpen)
	}
	start := time.Now()
	res, err := m.apply(ctx, batchesOf(due))
	m.lastFlush.Store(int64(time.Since(start)))
	if err == nil {
		m.settle(due)
		m.flushOK.Add(1)
		m.noteSuccess()
		m.log.Debug("usage_minutes flush ok", zap.Int("rows", res.rows), zap.Int("batches", len(due)),
			zap.Duration("took", time.Since(start)))
		m.logDropped(res)
		return nil
	}
	m.flushFailed.Add(1)
	m.noteFailure(err)
	m.log.Warn("usage_minutes flush failed; spooling to disk", zap.Int("rows", countHeldRows(due)), zap.Error(err))
	return m.handOver(due, err)
}

// checkRows drops, with an error log, rows that usage_minutes can never hold
// (a caller passing a cluster id that is not a UUID, or an unknown class),
// so they cannot block the rows that can.
func (m *Meter) checkRows(rows []row) []row {
	out := rows[:0]
	for _, r := range rows {
		if err := r.validate(); err != nil {
			m.log.Error("usage row cannot be stored; dropped", zap.String("cluster_id", r.ClusterID),
				zap.String("op", string(r.Op)), zap.Int64("minute", r.Minute), zap.Int64("reqs", r.Reqs),
				zap.Int64("msgs", r.Msgs), zap.Int64("bytes_in", r.BytesIn), zap.Int64("bytes_out", r.BytesOut),
				zap.Int64("unanswered_msgs", r.Unanswered), zap.Error(err))
			continue
		}
		out = append(out, r)
	}
	return out
}

func newBatchID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func countRows(batches []batch) int {
	n := 0
	for _, b := range batches {
		n += len(b.Rows)
	}
	return n
}

func countHeldRows(held []heldBatch) int {
	n := 0
	for _, b := range held {
		n += len(b.Rows)
	}
	return n
}

// applySQL records the batch ids and adds the rows of the batches that were
// not recorded before, in one statement (one transaction). Rows of clusters
// that no longer exist are left out (their usage would be deleted with the
// cluster anyway) so they cannot fail the rest.
const applySQL = `
WITH b AS (
    INSERT INTO queen_proxy.meter_batches (batch_id, row_count)
    SELECT id, n FROM unnest($1::text[], $2::integer[]) AS t(id, n)
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING batch_id
), r AS (
    SELECT u.cluster_id::uuid AS cluster_id, to_timestamp(u.minute * 60) AS minute, u.op AS op_class,
           sum(u.reqs)::bigint AS reqs, sum(u.msgs)::bigint AS msgs,
           sum(u.bytes_in)::bigint AS bytes_in, sum(u.bytes_out)::bigint AS bytes_out,
           sum(u.unanswered)::bigint AS unanswered_msgs
      FROM unnest($3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[])
           AS u(batch_id, cluster_id, minute, op, reqs, msgs, bytes_in, bytes_out, unanswered)
     WHERE u.batch_id IN (SELECT batch_id FROM b)
     GROUP BY 1, 2, 3
), up AS (
    INSERT INTO queen_proxy.usage_minutes AS m (cluster_id, minute, op_class, reqs, msgs, bytes_in, bytes_out, unanswered_msgs)
    SELECT r.cluster_id, r.minute, r.op_class, r.reqs, r.msgs, r.bytes_in, r.bytes_out, r.unanswered_msgs
      FROM r JOIN queen_proxy.clusters c ON c.id = r.cluster_id
     ORDER BY r.cluster_id, r.minute, r.op_class
    ON CONFLICT (cluster_id, minute, op_class) DO UPDATE
       SET reqs = m.reqs + EXCLUDED.reqs, msgs = m.msgs + EXCLUDED.msgs,
           bytes_in = m.bytes_in + EXCLUDED.bytes_in, bytes_out = m.bytes_out + EXCLUDED.bytes_out,
           unanswered_msgs = m.unanswered_msgs + EXCLUDED.unanswered_msgs
    RETURNING 1
)
SELECT coalesce((SELECT array_agg(batch_id) FROM b), '{}'::text[]),
       (SELECT count(*) FROM r), (SELECT count(*) FROM up)`

// applyResult is what one apply did.
type applyResult struct {
	newBatches int   // batches not seen before
	rows       int   // rows of those batches
	keys       int64 // distinct (cluster, minute, op) of those rows
	upserted   int64 // of which written (the others' cluster is gone)
}

func (m *Meter) apply(ctx context.Context, batches []batch) (applyResult, error) {
	seen := make(map[string]bool, len(batches))
	n := countRows(batches)
	ids := make([]string, 0, len(batches))
	counts := make([]int32, 0, len(batches))
	var (
		rb, rc, ro            = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		rm, rq, rs, rin, rout = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		run                   = make([]int64, 0, n)
		rowsByID              = make(map[string]int, len(batches))
	)
	for _, b := range batches {
		if seen[b.ID] {
			continue
		}
		seen[b.ID] = true
		ids = append(ids, b.ID)
		counts = append(counts, int32(len(b.Rows)))
		rowsByID[b.ID] = len(b.Rows)
		for _, r := range b.Rows {
			rb, rc, ro = append(rb, b.ID), append(rc, r.ClusterID), append(ro, string(r.Op))
			rm, rq, rs = append(rm, r.Minute), append(rq, r.Reqs), append(rs, r.Msgs)
			rin, rout, run = append(rin, r.BytesIn), append(rout, r.BytesOut), append(run, r.Unanswered)
		}
	}
	var (
		applied []string
		res     applyResult
	)
	err := m.pool.QueryRow(ctx, applySQL, ids, counts, rb, rc, rm, ro, rq, rs, rin, rout, run).
		Scan(&applied, &res.keys, &res.upserted)
	if err != nil {
		return applyResult{}, err
	}
	res.newBatches = len(applied)
	for _, id := range applied {
		res.rows += rowsByID[id]
	}
	return res, nil
}

func (m *Meter) logDropped(res applyResult) {
	if d := res.keys - res.upserted; d > 0 {
		m.log.Warn("usage rows of deleted clusters dropped", zap.Int64("rows", d))
	}
}

// permanent reports a database error that retrying cannot fix: the data
// itself is refused (SQLSTATE classes 22 and 23, except a foreign-key race
// with a cluster being deleted, which the next attempt skips).
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	class := pgErr.Code[:2]
	return (class == "22" || class == "23") && pgErr.Code != "23503"
}

func (m *Meter) noteSuccess() {
	if m.br.success() {
		m.log.Info("database answers again; meter circuit closed")
	}
}

// noteFailure feeds the circuit breaker with a database failure. Refused
// data and the caller's own cancellation say nothing about the database.
func (m *Meter) noteFailure(err error) {
	if permanent(err) || errors.Is(err, context.Canceled) {
		return
	}
	if opened, cooldown := m.br.failure(m.now()); opened {
		m.log.Warn("meter circuit open: the database failed repeatedly; spooling usage to disk",
			zap.Duration("cooldown", cooldown), zap.Error(err))
	}
}

// ReplaySpool adds the spooled batches to the database, oldest file first,
// and returns how many rows it added. Each file is applied in one statement
// that records its batch ids, so a file replayed twice (a crash between the
// commit and the file's removal) is added once. A replayed file is deleted;
// one with unreadable lines is renamed *.bad once its readable batches are
// in; one the database refuses as data is renamed *.bad too. Files another
// writer or replayer holds are skipped. It stops at the first database
// failure (the file stays for the next call) or while the circuit is open.
func (m *Meter) ReplaySpool(ctx context.Context) (rows int, err error) {
	m.replayMu.Lock()
	defer m.replayMu.Unlock()
	m.sealSpool()
	names, err := m.spool.list()
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		if !m.br.allow(m.now()) {
			return rows, ErrCircuitOpen
		}
		sf, ok, err := m.spool.take(name)
		if err != nil {
			m.log.Warn("meter spool: cannot open file", zap.String("file", name), zap.Error(err))
			continue
		}
		if !ok {
			continue
		}
		n, err := m.replayFile(ctx, sf, name)
		sf.release()
		rows += n
		if err != nil {
			return rows, err
		}
	}
	if rows > 0 {
		m.log.Info("meter spool replayed", zap.Int("rows", rows))
	}
	return rows, nil
}

func (m *Meter) replayFile(ctx context.Context, sf *spoolFile, name string) (int, error) {
	batches, bad, err := sf.read()
	if err != nil {
		m.log.Warn("meter spool: cannot read file; left for the next replay", zap.String("file", name), zap.Error(err))
		return 0, nil
	}
	applied := 0
	if len(batches) > 0 {
		actx, cancel := context.WithTimeout(ctx, m.cfg.FlushTimeout)
		res, err := m.apply(actx, batches)
		cancel()
		if err != nil {
			if permanent(err) {
				m.log.Error("meter spool: the database refuses this file's rows; quarantined",
					zap.String("file", name), zap.Error(err))
				m.quarantine(sf, name)
				return 0, nil
			}
			m.noteFailure(err)
			return 0, fmt.Errorf("meter: replay %s: %w", name, err)
		}
		m.noteSuccess()
		applied = res.rows
		m.replayedRows.Add(uint64(res.rows))
		m.logDropped(res)
		m.log.Debug("meter spool file replayed", zap.String("file", name), zap.Int("batches", len(batches)),
			zap.Int("new_batches", res.newBatches), zap.Int("rows", res.rows))
	}
	if crashTail(name, bad) {
		m.log.Warn("meter journal: a crash cut its last write short; that write was never durable",
			zap.String("file", name), zap.Int("line", bad[0].line))
		bad = nil
	}
	if len(bad) > 0 {
		for _, b := range bad {
			m.log.Error("meter spool: unreadable line; file quarantined", zap.String("file", name),
				zap.Int("line", b.line), zap.String("reason", b.reason))
		}
		m.quarantine(sf, name)
		return applied, nil
	}
	if err := os.Remove(sf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("meter spool: cannot delete a replayed file (replaying it again adds nothing)",
			zap.String("file", name), zap.Error(err))
	}
	syncDir(m.spool.dir)
	return applied, nil
}

// quarantine renames a spool file to *.bad: kept for an operator, no longer
// replayed. Its batch ids make feeding it back (renamed to .jsonl) safe.
func (m *Meter) quarantine(sf *spoolFile, name string) {
	if err := os.Rename(sf.path, sf.path+badSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Error("meter spool: cannot quarantine file", zap.String("file", name), zap.Error(err))
		return
	}
	syncDir(m.spool.dir)
}

// Run replays the spool, then every FlushEvery replays it again when it
// holds files and the circuit lets the database be tried, and flushes the
// closed minutes. When ctx ends it drains everything, the current minute
// included, within ShutdownDrain, spooling what the database did not take,
// and returns. A sample recorded after that (a request still in flight) is
// drained by itself about a second later, so the caller need not order the
// meter's shutdown after the HTTP server's.
func (m *Meter) Run(ctx context.Context) {
	m.closed.Store(false)
	if m.realClock {
		stop := m.startMinuteClock()
		defer stop()
	}
	// Journaling starts before the replay, which may wait on the database.
	stopCheckpoints := m.startCheckpoints()
	m.replay(ctx)
	t := time.NewTicker(m.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stopCheckpoints() // the drain journals and writes the rest
			m.shutdown()
			return
		case <-t.C:
			if names, _ := m.spool.list(); len(names) > 0 && m.br.allow(m.now()) {
				m.replay(ctx)
			}
			fctx, cancel := context.WithTimeout(ctx, m.cfg.FlushTimeout)
			_ = m.FlushClosedMinutes(fctx) // logged inside; the rows are spooled
			cancel()
		}
	}
}

func (m *Meter) replay(ctx context.Context) {
	if _, err := m.ReplaySpool(ctx); err != nil && !errors.Is(err, ErrCircuitOpen) && ctx.Err() == nil {
		m.log.Warn("meter spool replay stopped; retrying later", zap.Error(err))
	}
}

// shutdown drains within ShutdownDrain: the database gets the budget less a
// reserve for writing the spool. Records that arrive from now on schedule
// a late drain of their own.
func (m *Meter) shutdown() {
	m.closed.Store(true)
	start := time.Now()
	budget := m.cfg.ShutdownDrain
	reserve := min(budget/5, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), budget-reserve)
	// Shutting down is the last chance to write: an open circuit gets one
	// probe instead of sending everything to the spool unasked.
	if m.br.isOpen() && m.cfg.Pool != nil && m.cfg.Pool.Ping(ctx) == nil {
		m.br.success()
	}
	err := m.Drain(ctx)
	cancel()
	if err != nil {
		m.log.Warn("usage drain at shutdown did not reach the database; rows spooled",
			zap.Duration("took", time.Since(start)), zap.Error(err))
		return
	}
	m.log.Info("usage rows drained at shutdown", zap.Duration("took", time.Since(start)))
}

// DatabaseAnswers tells the meter that the database answers again (the
// gateway saw it reconnect elsewhere): the circuit closes and the spool is
// replayed now instead of after the cool-down.
func (m *Meter) DatabaseAnswers(ctx context.Context) {
	if m.br.isOpen() {
		m.br.success()
	}
	m.replay(ctx)
}
