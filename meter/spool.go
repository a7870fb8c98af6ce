package meter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/uuidtext"
)

// The disk spool holds usage batches the database did not take, and the
// journal the batches the meter has not written yet (journal.go). Files are
// JSON Lines named meter-<unix ms, 13 digits>-<sequence, 8 digits> (so
// lexical order is write order), with the suffix .jsonl for a spool file and
// .journal for a journal file; each line is one batch:
//
//	{"batch":"<id>","created_ms":<unix ms>,"rows":[{"cluster_id":"<uuid>","minute":<unix s / 60>,"op":"push","reqs":1,"msgs":2,"bytes_in":3,"bytes_out":4}, ...]}
//
// (the row fields are queen_proxy's spool row fields). A file is appended to
// by one writer, which holds an exclusive flock on it while it is open and
// fsyncs after every append; replay skips locked files, so a file is never
// read while it grows, also when two meters share the directory (a Caddy
// reload). A journal file stays locked until every batch in it is in the
// database, and is then deleted; the meter lets go of it earlier only by
// renaming it to .jsonl (handing its batches to the spool). A journal file
// found unlocked is a crashed process's: replay takes it like a spool file.
// A file that holds a line that cannot be read is renamed *.bad after its
// readable batches were applied, and logged.
const (
	spoolPrefix   = "meter-"
	spoolSuffix   = ".jsonl"
	journalSuffix = ".journal"
	badSuffix     = ".bad"
	maxBatchRows  = 2000     // rows per spool line and batch id
	maxLineBytes  = 64 << 20 // longest spool line read back
)

// batch is a unit of usage with a unique id: added to the database once.
type batch struct {
	ID      string `json:"batch"`
	Created int64  `json:"created_ms"`
	Rows    []row  `json:"rows"`
}

type spool struct {
	dir    string
	rotate int64
	log    *zap.Logger
	// sync makes a file's written bytes durable; (*os.File).Sync, replaced
	// only by tests that check a batch is on disk before it is counted
	// durable or written to the database.
	sync func(*os.File) error

	mu      sync.Mutex
	active  *journalFile   // the file appended to; nil when none is open
	retired []*journalFile // full journal files still holding unapplied batches
	seq     uint64
}

// journalFile is a file this spool has open and locked.
type journalFile struct {
	f         *os.File
	name      string
	size      int64
	unapplied int  // batches appended and not released (journal files)
	spooling  bool // renamed .jsonl: its batches belong to replay
	sealed    bool // unlocked and closed (or deleted): no longer this spool's
}

func openSpool(dir string, rotate int64, log *zap.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("meter: create spool directory: %w", err)
	}
	return &spool{dir: dir, rotate: rotate, log: log, sync: (*os.File).Sync}, nil
}

// append writes the batches, one line each, fsyncs after each, and returns
// the file each batch went to, as far as it got. On error the file is cut
// back to where the failed line began (as far as possible) and sealed; the
// caller keeps the batches that were not written and offers them again
// later under the same ids, so a batch that did reach the file is still
// added once.
func (s *spool) append(batches []batch) ([]*journalFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	files := make([]*journalFile, 0, len(batches))
	for _, b := range batches {
		line, err := json.Marshal(b)
		if err != nil {
			return files, fmt.Errorf("meter: encode spool batch: %w", err)
		}
		line = append(line, '\n')
		if s.active != nil && s.active.size >= s.rotate {
			if err := s.rotateLocked(); err != nil {
				return files, err
			}
		}
		if s.active == nil {
			if err := s.createLocked(); err != nil {
				return files, err
			}
		}
		jf := s.active
		start := jf.size
		if _, err := jf.f.Write(line); err != nil {
			s.abandonLocked(start)
			return files, fmt.Errorf("meter: write spool file %s: %w", jf.name, err)
		}
		jf.size += int64(len(line))
		if err := s.sync(jf.f); err != nil {
			s.abandonLocked(start)
			return files, fmt.Errorf("meter: fsync spool file %s: %w", jf.name, err)
		}
		jf.unapplied++
		files = append(files, jf)
	}
	return files, nil
}

// rotateLocked retires the full active file: a spool file is sealed for
// replay, a journal file stays locked (its batches are still the meter's)
// until they are released, or is deleted when they already are.
func (s *spool) rotateLocked() error {
	jf := s.active
	s.active = nil
	if !jf.spooling && jf.unapplied > 0 {
		s.retired = append(s.retired, jf)
		return nil
	}
	return s.sealLocked(jf)
}

// abandonLocked cuts the active file back to size and seals it, so the next
// append starts a fresh file instead of continuing a torn line.
func (s *spool) abandonLocked(size int64) {
	jf := s.active
	s.active = nil
	if err := jf.f.Truncate(size); err == nil {
		_ = s.sync(jf.f)
	}
	if err := s.sealLocked(jf); err != nil {
		s.log.Warn("meter spool: closing a file after a failed write failed", zap.String("file", jf.name), zap.Error(err))
	}
}

// createLocked opens a new active journal file: created under a name replay
// does not list, locked, then renamed into place, so a replayer never sees
// it unlocked.
func (s *spool) createLocked() error {
	for attempt := 0; ; attempt++ {
		s.seq++
		name := fmt.Sprintf("%s%013d-%08d%s", spoolPrefix, time.Now().UnixMilli(), s.seq%100000000, journalSuffix)
		tmp := filepath.Join(s.dir, "."+name+".tmp")
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if errors.Is(err, fs.ErrExist) && attempt < 100 {
			continue
		}
		if err != nil {
			return fmt.Errorf("meter: create spool file: %w", err)
		}
		if err := lockFile(f, true); err != nil {
			f.Close()
			os.Remove(tmp)
			return fmt.Errorf("meter: lock spool file: %w", err)
		}
		final := filepath.Join(s.dir, name)
		if _, err := os.Lstat(final); err == nil {
			f.Close()
			os.Remove(tmp)
			continue
		}
		if err := os.Rename(tmp, final); err != nil {
			f.Close()
			os.Remove(tmp)
			return fmt.Errorf("meter: create spool file: %w", err)
		}
		syncDir(s.dir)
		s.active = &journalFile{f: f, name: name}
		return nil
	}
}

// release records that one batch of jf is in the database. A journal file
// whose batches all are is deleted; a spool file is left to replay, which
// finds those batches applied.
func (s *spool) release(jf *journalFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if jf.sealed || jf.spooling {
		return
	}
	jf.unapplied--
	if jf.unapplied > 0 {
		return
	}
	if s.active == jf {
		s.active = nil
	}
	for i, r := range s.retired {
		if r == jf {
			s.retired = append(s.retired[:i], s.retired[i+1:]...)
			break
		}
	}
	if err := s.sealLocked(jf); err != nil {
		s.log.Warn("meter journal: deleting an applied file failed", zap.String("file", jf.name), zap.Error(err))
	}
}

// spoolAll hands every open file to replay: each becomes a spool file; the
// full ones are sealed at once, the active one stays open for appends (as
// a spool file) until seal.
func (s *spool) spoolAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, jf := range s.retired {
		if err := s.sealLocked(jf); err != nil {
			s.log.Warn("meter spool: closing a file failed", zap.String("file", jf.name), zap.Error(err))
		}
	}
	s.retired = nil
	if s.active != nil {
		if err := s.toSpoolFileLocked(s.active); err != nil {
			s.log.Warn("meter spool: renaming a journal file failed; it is sealed instead", zap.String("file", s.active.name), zap.Error(err))
			jf := s.active
			s.active = nil
			_ = s.sealLocked(jf)
		}
	}
}

// seal closes the active file if it is a spool file, so that replay can
// take it. A journal file whose batches the meter still holds stays open.
func (s *spool) seal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil || !s.active.spooling {
		return nil
	}
	jf := s.active
	s.active = nil
	return s.sealLocked(jf)
}

// sealLocked lets go of jf: a journal file with nothing left unapplied is
// deleted; any other is made a spool file, unlocked and closed, for replay.
func (s *spool) sealLocked(jf *journalFile) error {
	if jf.sealed {
		return nil
	}
	jf.sealed = true
	path := filepath.Join(s.dir, jf.name)
	var err error
	if !jf.spooling && jf.unapplied == 0 {
		// Deleted while still locked, so no replayer reads it in between.
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("meter: delete applied journal file %s: %w", jf.name, rerr)
		}
		syncDir(s.dir)
	} else {
		err = s.toSpoolFileLocked(jf)
		if serr := s.sync(jf.f); serr != nil && err == nil {
			err = fmt.Errorf("meter: fsync spool file %s: %w", jf.name, serr)
		}
	}
	unlockFile(jf.f)
	if cerr := jf.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("meter: close spool file %s: %w", jf.name, cerr)
	}
	return err
}

// toSpoolFileLocked renames a journal file to a spool file, still locked.
func (s *spool) toSpoolFileLocked(jf *journalFile) error {
	if jf.spooling {
		return nil
	}
	name := strings.TrimSuffix(jf.name, journalSuffix) + spoolSuffix
	if err := os.Rename(filepath.Join(s.dir, jf.name), filepath.Join(s.dir, name)); err != nil {
		return fmt.Errorf("meter: hand journal file %s to the spool: %w", jf.name, err)
	}
	syncDir(s.dir)
	jf.name, jf.spooling = name, true
	return nil
}

// ownJournal reports whether name is a journal file this spool holds open.
func (s *spool) ownJournal(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != nil && s.active.name == name {
		return true
	}
	for _, jf := range s.retired {
		if jf.name == name {
			return true
		}
	}
	return false
}

// waiting reports whether name is a file replay should take: a spool file,
// or a journal file this spool does not hold (a crashed process's, or a
// meter's still running alongside, whose lock makes replay skip it).
func (s *spool) waiting(name string) bool {
	if !strings.HasPrefix(name, spoolPrefix) {
		return false
	}
	return strings.HasSuffix(name, spoolSuffix) || strings.HasSuffix(name, journalSuffix) && !s.ownJournal(name)
}

// list returns the files waiting for replay, oldest first.
func (s *spool) list() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("meter: list spool directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && s.waiting(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// usage counts the files waiting for replay, their bytes, and the
// quarantined files.
func (s *spool) usage() (files int, size int64, bad int) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, 0, 0
	}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, spoolPrefix) {
			continue
		}
		switch {
		case s.waiting(n):
			files++
			if info, err := e.Info(); err == nil {
				size += info.Size()
			}
		case strings.HasSuffix(n, spoolSuffix+badSuffix), strings.HasSuffix(n, journalSuffix+badSuffix):
			bad++
		}
	}
	return files, size, bad
}

// spoolFile is one file taken for replay: open and locked.
type spoolFile struct {
	path string
	f    *os.File
}

// take opens and locks a spool file for replay. ok is false when another
// writer or replayer holds it, or it is gone.
func (s *spool) take(name string) (sf *spoolFile, ok bool, err error) {
	path := filepath.Join(s.dir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("meter: open spool file %s: %w", name, err)
	}
	if err := lockFile(f, false); err != nil {
		f.Close()
		return nil, false, nil
	}
	// The file may have been replayed and removed between open and lock.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		unlockFile(f)
		f.Close()
		return nil, false, nil
	}
	return &spoolFile{path: path, f: f}, true, nil
}

// release unlocks and closes a taken file.
func (sf *spoolFile) release() {
	unlockFile(sf.f)
	sf.f.Close()
}

// badLine is a spool line that cannot be replayed.
type badLine struct {
	line   int
	reason string
	torn   bool // the file's last piece, without a newline
}

// crashTail reports whether bad is only the torn last line of a journal
// file: the append a crash interrupted. That append never returned, so its
// usage was never counted as durable and is within the crash bound; the
// file is not damaged.
func crashTail(name string, bad []badLine) bool {
	return strings.HasSuffix(name, journalSuffix) && len(bad) == 1 && bad[0].torn
}

// read parses the file: the batches it can replay, and the lines it cannot.
func (sf *spoolFile) read() (batches []batch, bad []badLine, err error) {
	if _, err := sf.f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	r := bufio.NewReaderSize(sf.f, 64<<10)
	for n := 1; ; n++ {
		line, rerr := readLine(r)
		if len(line) > 0 {
			b, reason := parseBatch(line, rerr == nil)
			if reason != "" {
				bad = append(bad, badLine{line: n, reason: reason, torn: rerr == io.EOF})
			} else if b != nil {
				batches = append(batches, *b)
			}
		}
		if rerr == io.EOF {
			return batches, bad, nil
		}
		if rerr != nil && !errors.Is(rerr, errLineTooLong) {
			return nil, nil, fmt.Errorf("meter: read spool file %s: %w", filepath.Base(sf.path), rerr)
		}
		if errors.Is(rerr, errLineTooLong) {
			bad = append(bad, badLine{line: n, reason: "line longer than the replay limit"})
		}
	}
}

var errLineTooLong = errors.New("spool line too long")

// readLine returns the next line with its newline; at the end of the file
// the last, unterminated, piece comes with io.EOF. A line over
// maxLineBytes is skipped whole and reported as errLineTooLong.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLineBytes {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

// parseBatch reads one line. terminated is false for the file's last piece
// without a newline (a write torn by a crash). An empty line is skipped (nil,
// ""); a line that cannot be replayed returns a reason.
func parseBatch(line []byte, terminated bool) (*batch, string) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil, ""
	}
	if !terminated {
		return nil, "unterminated last line (torn write)"
	}
	var b batch
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&b); err != nil {
		return nil, "not a spool batch: " + err.Error()
	}
	if dec.More() {
		return nil, "trailing data after the batch"
	}
	if b.ID == "" || len(b.ID) > 200 {
		return nil, "missing or oversized batch id"
	}
	if len(b.Rows) == 0 {
		return nil, "batch without rows"
	}
	for i, r := range b.Rows {
		if err := r.validate(); err != nil {
			return nil, fmt.Sprintf("row %d: %v", i, err)
		}
	}
	return &b, ""
}

// maxMinute is the last minute of the year 9999.
const maxMinute = 253402300799 / 60

// validate reports why r can never be stored in usage_minutes.
func (r row) validate() error {
	switch {
	case !uuidtext.Valid(r.ClusterID):
		return fmt.Errorf("cluster_id %q is not a UUID", r.ClusterID)
	case !r.Op.Valid():
		return fmt.Errorf("op %q is not an operation class", r.Op)
	case r.Minute <= 0 || r.Minute > maxMinute:
		return fmt.Errorf("minute %d is out of range", r.Minute)
	case r.Reqs < 0 || r.Msgs < 0 || r.BytesIn < 0 || r.BytesOut < 0:
		return errors.New("negative counter")
	}
	return nil
}

// syncDir makes a directory entry change durable (best effort).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
