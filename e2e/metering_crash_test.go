package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/meter"
)

// gatewayProcess is the real gateway binary running as a child process.
type gatewayProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startGatewayProcess runs the gateway binary on config and returns once
// the process started (not once it serves).
func startGatewayProcess(t *testing.T, bin, config, home string) *gatewayProcess {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home)
	logPath := filepath.Join(home, fmt.Sprintf("caddy-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProcess{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() {
		g.done <- cmd.Wait()
		logFile.Close()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.done
		g.done <- nil
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gateway log %s:\n%s", filepath.Base(logPath), b)
		}
	})
	return g
}

// signal sends sig and waits for the process to exit.
func (g *gatewayProcess) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.done:
		g.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not exit within 30 s of %v", sig)
	}
}

// pushRecord is one push the load sent: when, when (if ever) the answer
// came, and whether that answer was a success (a refusal, e.g. 429, is
// never billed, so it cannot be lost usage).
type pushRecord struct {
	sent, answered time.Time
	ok             bool
}

// pushLoad pushes one item per request from a few workers at a steady
// pace, and keeps the time of every request.
type pushLoad struct {
	mu      sync.Mutex
	records []pushRecord
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startPushLoad(c *http.Client, urls, keys []string, workers int, pause time.Duration) *pushLoad {
	l := &pushLoad{stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		l.wg.Go(func() {
			url, key := urls[w%len(urls)], keys[w%len(keys)]
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pause):
				}
				req, _ := http.NewRequest("POST", url, stringsReader(`{"items":[{"queue":"crash","payload":{"n":`+strconv.Itoa(n)+`}}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				rec := pushRecord{sent: time.Now()}
				if resp, err := c.Do(req); err == nil {
					r := readResponse(resp)
					rec.answered, rec.ok = time.Now(), r.status/100 == 2
				}
				l.mu.Lock()
				l.records = append(l.records, rec)
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *pushLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

// stallGap is the longest pause between two answers that still counts as
// the gateway running: at the test's pace answers come every few
// milliseconds, so a longer gap means the machine starved the process (it
// could neither answer nor journal).
const stallGap = 100 * time.Millisecond

// checkpointWriteAllowance is the design's "plus one journal write": the
// checkpoint that was due may have been taking its snapshot, appending or
// fsyncing at the kill, or its timer may have fired a little late.
const checkpointWriteAllowance = 50 * time.Millisecond

// exposure counts the pushes a SIGKILL at kill may lose by the design's
// bound: the successful ones sent within the last window of the gateway's
// running time before the kill, and those in flight at it (sent before, not
// answered before). The window is stretched by the stalls inside it, which it
// returns, so that a starved machine does not pass for a late checkpoint.
func (l *pushLoad) exposure(kill time.Time, window time.Duration) (stalled time.Duration, inWindow, inFlight int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var answers []time.Time
	first := kill
	for _, r := range l.records {
		if !r.answered.IsZero() && r.answered.Before(kill) {
			answers = append(answers, r.answered)
		}
		if r.sent.Before(first) {
			first = r.sent
		}
	}
	sort.Slice(answers, func(i, j int) bool { return answers[i].Before(answers[j]) })
	from := kill.Add(-window)
	for {
		stalled = stallsBetween(answers, from, kill)
		next := kill.Add(-window - stalled)
		if next.Before(first) {
			next = first
		}
		if !next.Before(from) {
			break
		}
		from = next
	}
	for _, r := range l.records {
		switch {
		case !r.sent.Before(kill):
		case r.answered.IsZero() || r.answered.After(kill):
			inFlight++
		case r.ok && !r.sent.Before(from):
			inWindow++
		}
	}
	return stalled, inWindow, inFlight
}

// stallsBetween sums the time beyond stallGap of each pause between the
// answers (sorted) within [from, to], the ends included as pauses' bounds.
func stallsBetween(answers []time.Time, from, to time.Time) time.Duration {
	var stalled time.Duration
	prev := from
	for _, a := range append(answers, to) {
		if a.Before(from) || a.After(to) {
			continue
		}
		if gap := a.Sub(prev); gap > stallGap {
			stalled += gap - stallGap
		}
		prev = a
	}
	return stalled
}

// sinceLastJournalWrite says how long before kill the killed gateway last
// appended to its journal (the newest journal file's modification time), or
// "none" when it left no journal.
func sinceLastJournalWrite(spool string, kill time.Time) string {
	files, _ := filepath.Glob(filepath.Join(spool, "meter-*.journal"))
	var last time.Time
	for _, f := range files {
		if info, err := os.Stat(f); err == nil && info.ModTime().After(last) {
			last = info.ModTime()
		}
	}
	if last.IsZero() {
		return "none"
	}
	return kill.Sub(last).Round(time.Millisecond).String()
}

// TestMeteringSIGKILLLosesAtMostOneCheckpoint is the crash case: the
// real gateway binary under steady push load is killed with SIGKILL,
// restarted on the same spool directory, driven a little longer and stopped
// cleanly. usage_minutes then holds what the broker stored, less at most
// what the gateway had recorded since its last journal checkpoint: the
// successful pushes sent in the last meter.DefaultCheckpointEvery (plus
// one journal write's time) before the kill, plus the ones in flight. It never holds more than the broker stored. On
// a starved machine a process that is not scheduled checkpoints late, so
// the window counts the gateway's running time (see exposure).
func TestMeteringSIGKILLLosesAtMostOneCheckpoint(t *testing.T) {
	bin := caddyBinary(t)
	var storedItems atomic.Int64
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "crash-cell", RequireTenant: true})
	broker.SetPushHook(func(fakebroker.PushItem) fakebroker.PushOutcome {
		storedItems.Add(1) // no transaction ids: every item is stored
		return fakebroker.PushQueued
	})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("crash-cell", broker.URL(), "")
	tn := cp.tenant("crash")
	clusters := []cluster{cp.cluster(tn, "crash-a", cell), cp.cluster(tn, "crash-b", cell)}
	var urls, keys []string
	port := freePort(t)
	for _, cl := range clusters {
		_, key := cp.key(cl.id)
		keys = append(keys, key)
		urls = append(urls, fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/push", cl.slug, port))
	}

	home, spool := t.TempDir(), t.TempDir()
	config := filepath.Join(home, "Caddyfile")
	// The meter's defaults: flushes every 15 s, journal every second.
	if err := os.WriteFile(config, []byte(gatewayCaddyfile(port, pgtest.URL(t), "spool_dir "+spool, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(port)
	serving := func() {
		t.Helper()
		eventually(t, 60*time.Second, func() error {
			r, err := c.Get(urls[0])
			if err != nil {
				return err
			}
			r.Body.Close()
			if r.StatusCode == http.StatusMisdirectedRequest || r.StatusCode >= 500 {
				return fmt.Errorf("status %d", r.StatusCode)
			}
			return nil
		})
	}

	first := startGatewayProcess(t, bin, config, home)
	serving()
	load := startPushLoad(c, urls, keys, 4, 10*time.Millisecond)
	// The journal ticks every second from the meter's start; a random
	// delay puts the kill at any phase of it across runs.
	into := 4*time.Second + rand.N(time.Second)
	time.Sleep(into)
	kill := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil
	storedAtKill := storedItems.Load()
	window := meter.DefaultCheckpointEvery + checkpointWriteAllowance
	stalled, inWindow, inFlight := load.exposure(kill, window)
	sinceCheckpoint := sinceLastJournalWrite(spool, kill)

	// The same spool directory: the new process replays the journal.
	second := startGatewayProcess(t, bin, config, home)
	serving()
	time.Sleep(time.Second)
	load.halt()
	second.signal(t, syscall.SIGTERM) // a clean stop drains everything
	if left, _ := filepath.Glob(filepath.Join(spool, "meter-*")); len(left) != 0 {
		t.Errorf("spool directory after the clean stop: %v", left)
	}

	var booked int64
	for _, cl := range clusters {
		_, msgs := cp.usageOf(cl.id, "push")
		booked += msgs
	}
	stored := storedItems.Load()
	loss := stored - booked
	t.Logf("SIGKILL %v into the load; last journal write before it: %s; broker stored %d items (%d before the kill); "+
		"usage_minutes books %d: lost %d; bound %d (%d successful pushes sent in the %v of running time before the kill, "+
		"%v of stall added, + %d in flight)",
		into.Round(time.Millisecond), sinceCheckpoint, stored, storedAtKill, booked, loss,
		inWindow+inFlight, inWindow, window, stalled.Round(time.Millisecond), inFlight)
	if loss < 0 {
		t.Fatalf("usage_minutes books %d push messages, more than the %d the broker stored: double count", booked, stored)
	}
	if loss > inWindow+inFlight {
		t.Fatalf("the SIGKILL lost %d push messages, more than the %d sent in the last %v of running time before it plus %d in flight",
			loss, inWindow, window, inFlight)
	}
}
