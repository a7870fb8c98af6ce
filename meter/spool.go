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

// The disk spool holds usage batches the database did not take. Files are
// JSON Lines named meter-<unix ms, 13 digits>-<sequence, 8 digits>.jsonl (so
// lexical order is write order); each line is one batch:
//
//	{"batch":"<id>","created_ms":<unix ms>,"rows":[{"cluster_id":"<uuid>","minute":<unix s / 60>,"op":"push","reqs":1,"msgs":2,"bytes_in":3,"bytes_out":4}, ...]}
//
// (the row fields are queen_proxy's spool row fields). A file is appended to
// by one writer, which holds an exclusive flock on it while it is open and
// fsyncs after every append; replay skips locked files, so a file is never
// read while it grows, also when two meters share the directory (a Caddy
// reload). A file that holds a line that cannot be read is renamed *.bad
// after its readable batches were applied, and logged.
const (
	spoolPrefix  = "meter-"
	spoolSuffix  = ".jsonl"
	badSuffix    = ".bad"
	maxBatchRows = 2000     // rows per spool line and batch id
	maxLineBytes = 64 << 20 // longest spool line read back
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

	mu   sync.Mutex
	f    *os.File // the active file, flocked; nil when none is open
	name string
	size int64
	seq  uint64
}

func openSpool(dir string, rotate int64, log *zap.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("meter: create spool directory: %w", err)
	}
	return &spool{dir: dir, rotate: rotate, log: log}, nil
}

// append writes the batches, one line each, and fsyncs. On error the file
// is cut back to where this call began (as far as possible) and closed;
// the caller keeps the batches and offers them again later under the same
// ids, so a batch that did reach the file is still added once.
func (s *spool) append(batches []batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range batches {
		line, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("meter: encode spool batch: %w", err)
		}
		line = append(line, '\n')
		if s.f != nil && s.size >= s.rotate {
			if err := s.sealLocked(); err != nil {
				return err
			}
		}
		if s.f == nil {
			if err := s.createLocked(); err != nil {
				return err
			}
		}
		start := s.size
		if _, err := s.f.Write(line); err != nil {
			s.abandonLocked(start)
			return fmt.Errorf("meter: write spool file %s: %w", s.name, err)
		}
		s.size += int64(len(line))
		if err := s.f.Sync(); err != nil {
			s.abandonLocked(start)
			return fmt.Errorf("meter: fsync spool file %s: %w", s.name, err)
		}
	}
	return nil
}

// abandonLocked cuts the active file back to size and closes it, so the next
// append starts a fresh file instead of continuing a torn line.
func (s *spool) abandonLocked(size int64) {
	if err := s.f.Truncate(size); err == nil {
		_ = s.f.Sync()
	}
	_ = s.sealLocked()
}

// createLocked opens a new active file: created under a name replay does
// not list, locked, then renamed into place, so a replayer never sees it
// unlocked.
func (s *spool) createLocked() error {
	for attempt := 0; ; attempt++ {
		s.seq++
		name := fmt.Sprintf("%s%013d-%08d%s", spoolPrefix, time.Now().UnixMilli(), s.seq%100000000, spoolSuffix)
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
		s.f, s.name, s.size = f, name, 0
		return nil
	}
}

// seal closes the active file, if any, so that replay can take it.
func (s *spool) seal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sealLocked()
}

func (s *spool) sealLocked() error {
	if s.f == nil {
		return nil
	}
	f := s.f
	s.f, s.name, s.size = nil, "", 0
	err := f.Sync()
	unlockFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("meter: close spool file: %w", err)
	}
	return nil
}

// list returns the spool files waiting for replay, oldest first.
func (s *spool) list() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("meter: list spool directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(n, spoolPrefix) && strings.HasSuffix(n, spoolSuffix) {
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
		case strings.HasSuffix(n, spoolSuffix):
			files++
			if info, err := e.Info(); err == nil {
				size += info.Size()
			}
		case strings.HasSuffix(n, spoolSuffix+badSuffix):
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
				bad = append(bad, badLine{n, reason})
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
			bad = append(bad, badLine{n, "line longer than the replay limit"})
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
