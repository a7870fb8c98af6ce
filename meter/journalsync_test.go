package meter

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// journaledBatchIDs reads the batch ids in the directory's journal files
// (what a crash right now would leave for replay, once synced).
func journaledBatchIDs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), journalSuffix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, maxLineBytes)
		for sc.Scan() {
			var b batch
			if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
				f.Close()
				return nil, err
			}
			ids = append(ids, b.ID)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func appliedBatchIDs(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT batch_id FROM queen_proxy.meter_batches`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Every batch the meter writes to the database was fsynced in its journal
// first, while the database did not have it yet: otherwise a crash after
// the write could lose the journal line, or a crash before it the usage.
func TestJournalIsSyncedBeforeTheDatabaseWrite(t *testing.T) {
	pool := db(t)
	cluster := newCluster(t, pool, "free")
	dir := t.TempDir()
	clk := newClock(t0.Add(10 * time.Second))
	m := newMeter(t, Config{Now: clk.Now, SpoolDir: dir})

	synced := map[string]bool{} // batch ids in a journal file when it was synced
	var problems []string
	m.spool.sync = func(f *os.File) error {
		ids, err := journaledBatchIDs(dir)
		if err != nil {
			problems = append(problems, "reading the journal at a sync: "+err.Error())
		}
		for _, id := range ids {
			if synced[id] {
				continue
			}
			var inDB bool
			if err := pool.QueryRow(ctxT(t), `SELECT EXISTS (SELECT 1 FROM queen_proxy.meter_batches WHERE batch_id = $1)`, id).Scan(&inDB); err != nil {
				problems = append(problems, err.Error())
			}
			if inDB {
				problems = append(problems, "batch "+id+" was in the database before its journal line was synced")
			}
			synced[id] = true
		}
		return f.Sync()
	}

	before := appliedBatchIDs(t, pool)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 2, BytesIn: 20, BytesOut: 2})
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: cluster, Op: OpPush, Reqs: 1, Msgs: 9}) // the open minute: journaled, not written
	if err := m.FlushClosedMinutes(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if u := totals(t, pool, cluster, OpPush); u != (usage{1, 2, 20, 2}) {
		t.Fatalf("usage after the flush: %+v, want the closed minute's", u)
	}
	var written []string
	for id := range appliedBatchIDs(t, pool) {
		if !before[id] {
			written = append(written, id)
		}
	}
	if len(written) != 1 {
		t.Fatalf("the flush wrote batches %q, want the closed minute's one", written)
	}
	for _, id := range written {
		if !synced[id] {
			t.Errorf("batch %s reached the database without its journal line being synced first (synced: %v)", id, synced)
		}
	}
	if len(synced) != 2 {
		t.Errorf("synced journal batches %v, want both minutes'", synced)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
