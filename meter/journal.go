package meter

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
)

// The journal bounds what a crash loses. Every CheckpointEvery, checkpoint
// seals what Record added since the last checkpoint into batches with fresh
// ids (one minute each) and appends them to a journal file, fsync'd, before
// the meter counts them as durable. From then on the meter writes that usage
// to usage_minutes only as those batches, under those ids: the journal file
// of a crashed process is replayed at the next start, and a batch that was
// applied before the crash is a no-op there (meter_batches), so the replay
// and the meter's own write never both add the same usage.
//
// The meter holds the journaled batches in memory until their minute has
// closed and a flush applied them; a journal file is deleted once all of
// its batches are in. When a write fails, everything held is handed to the
// spool (its files renamed .jsonl) and the memory is freed, as before the
// journal existed.

// heldBatch is a batch sealed from the shards and not in the database yet.
type heldBatch struct {
	batch
	minute int64
	file   *journalFile // nil while the journal could not be written: not durable yet
}

type minuteOp struct {
	minute int64
	op     Op
}

// heldTotals sums a cluster's held rows of one minute and class.
type heldTotals struct {
	counters
	rows int
}

// checkpoint seals what was recorded since the last checkpoint into batches
// and writes every held batch that is not on disk yet to the journal. A
// journal write that fails leaves those batches in memory, where the next
// checkpoint tries the disk again and the next flush the database.
func (m *Meter) checkpoint() error {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	for _, b := range m.newBatches(m.checkRows(m.take(0, true))) {
		m.hold(b)
	}
	return m.journalUnwritten()
}

// journalUnwritten appends the held batches that have no file. The caller
// holds journalMu.
func (m *Meter) journalUnwritten() error {
	var idx []int
	var todo []batch
	for i := range m.held {
		if m.held[i].file == nil {
			idx = append(idx, i)
			todo = append(todo, m.held[i].batch)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	files, err := m.spool.append(todo)
	for i, f := range files {
		m.held[idx[i]].file = f
	}
	// A failed write or a rotation may have sealed a file.
	m.dropSealed()
	if err != nil {
		if !m.journalFailing {
			m.journalFailing = true
			m.log.Error("meter journal write failed; usage stays in memory until the disk or the database takes it",
				zap.Int("batches", len(todo)-len(files)), zap.Error(err))
		}
		return fmt.Errorf("meter: journal: %w", err)
	}
	if m.journalFailing {
		m.journalFailing = false
		m.log.Info("meter journal writes again")
	}
	return nil
}

// hold adds b to the held batches. The caller holds journalMu.
func (m *Meter) hold(b heldBatch) {
	m.held = append(m.held, b)
	m.index(b, 1)
}

// index adds (sign 1) or removes (sign -1) b's rows in the per-cluster
// totals that Unflushed reads. The caller holds journalMu.
func (m *Meter) index(b heldBatch, sign int64) {
	for _, r := range b.Rows {
		byKey := m.heldIndex[r.ClusterID]
		if byKey == nil {
			byKey = make(map[minuteOp]*heldTotals)
			m.heldIndex[r.ClusterID] = byKey
		}
		k := minuteOp{r.Minute, r.Op}
		t := byKey[k]
		if t == nil {
			t = new(heldTotals)
			byKey[k] = t
		}
		t.reqs += sign * r.Reqs
		t.msgs += sign * r.Msgs
		t.bytesIn += sign * r.BytesIn
		t.bytesOut += sign * r.BytesOut
		t.unanswered += sign * r.Unanswered
		t.rows += int(sign)
		if t.rows == 0 {
			delete(byKey, k)
			if len(byKey) == 0 {
				delete(m.heldIndex, r.ClusterID)
			}
		}
	}
	m.heldRows.Add(sign * int64(len(b.Rows)))
}

// dropSealed forgets the held batches whose file the spool let go of: replay
// owns them now. The caller holds journalMu.
func (m *Meter) dropSealed() {
	m.dropHeld(func(b heldBatch) bool { return b.file != nil && b.file.sealed })
}

// dropHeld forgets the held batches drop selects, counting their rows as
// spooled. The caller holds journalMu.
func (m *Meter) dropHeld(drop func(heldBatch) bool) {
	kept := m.held[:0]
	for _, b := range m.held {
		if drop(b) {
			m.index(b, -1)
			m.spooledRows.Add(uint64(len(b.Rows)))
			continue
		}
		kept = append(kept, b)
	}
	clear(m.held[len(kept):])
	m.held = kept
}

// takeDue removes and returns the held batches of the minutes before the
// given one (all of them when all is set), for a write. Once taken they are
// neither in Unflushed nor, until the write commits, in usage_minutes.
func (m *Meter) takeDue(before int64, all bool) []heldBatch {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	var due []heldBatch
	kept := m.held[:0]
	for _, b := range m.held {
		if all || b.minute < before {
			m.index(b, -1)
			due = append(due, b)
			continue
		}
		kept = append(kept, b)
	}
	clear(m.held[len(kept):])
	m.held = kept
	return due
}

// settle records that the database took the due batches: journal files
// whose batches are all in are deleted.
func (m *Meter) settle(due []heldBatch) {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	for _, b := range due {
		if b.file != nil {
			m.spool.release(b.file)
		}
	}
}

// handOver gives everything the meter holds, the due batches of a failed
// write first, to the spool: journal files become spool files and the
// batches leave memory. Batches the journal never took are appended now;
// if the disk still refuses them they stay in memory for the next write.
func (m *Meter) handOver(due []heldBatch, cause error) error {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	for _, b := range due {
		m.index(b, 1)
	}
	m.held = append(due, m.held...)
	before := m.spooledRows.Load()
	jerr := m.journalUnwritten()
	m.spool.spoolAll()
	m.dropHeld(func(b heldBatch) bool { return b.file != nil })
	n := int(m.spooledRows.Load() - before)
	if jerr != nil {
		left := int(m.heldRows.Load())
		m.log.Error("meter spool write failed; usage kept in memory for the next flush",
			zap.Int("rows", left), zap.NamedError("cause", cause), zap.Error(jerr))
		return fmt.Errorf("meter: %d usage rows kept in memory, %d spooled: %w", left, n, errors.Join(cause, jerr))
	}
	return fmt.Errorf("meter: %d usage rows spooled to disk: %w", n, cause)
}

// sealSpool lets replay take the active file if it is a spool file; the
// held batches in it are replay's from then on.
func (m *Meter) sealSpool() {
	m.journalMu.Lock()
	defer m.journalMu.Unlock()
	if err := m.spool.seal(); err != nil {
		m.log.Warn("meter spool: closing the active file failed", zap.Error(err))
	}
	m.dropSealed()
}

// startCheckpoints journals what Record adds every CheckpointEvery until
// the returned stop is called. It runs apart from the flush so that a slow
// database write cannot stretch the crash bound.
func (m *Meter) startCheckpoints() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(m.cfg.CheckpointEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				_ = m.checkpoint() // logged inside; the usage stays in memory
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// newBatches cuts rows into batches of one minute and at most maxBatchRows
// rows, with fresh ids; one minute per batch lets a flush write the closed
// minutes and keep the open one.
func (m *Meter) newBatches(rows []row) []heldBatch {
	if len(rows) == 0 {
		return nil
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Minute != b.Minute {
			return a.Minute < b.Minute
		}
		if a.ClusterID != b.ClusterID {
			return a.ClusterID < b.ClusterID
		}
		return a.Op < b.Op
	})
	created := m.now().UnixMilli()
	var out []heldBatch
	for len(rows) > 0 {
		n := 1
		for n < len(rows) && n < maxBatchRows && rows[n].Minute == rows[0].Minute {
			n++
		}
		out = append(out, heldBatch{
			batch:  batch{ID: newBatchID(), Created: created, Rows: rows[:n:n]},
			minute: rows[0].Minute,
		})
		rows = rows[n:]
	}
	return out
}

func batchesOf(held []heldBatch) []batch {
	out := make([]batch, len(held))
	for i, b := range held {
		out[i] = b.batch
	}
	return out
}
