package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// pushRecord is one push the load sent: when, and when (if ever) the
// answer came.
type pushRecord struct {
	sent, answered time.Time
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
					readResponse(resp)
					rec.answered = time.Now()
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

// exposure counts the pushes a SIGKILL at kill may lose by the design's
// bound: those sent within window before it, and those in flight at it
// (sent before, not answered before).
func (l *pushLoad) exposure(kill time.Time, window time.Duration) (inWindow, inFlight int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		switch {
		case !r.sent.Before(kill):
		case !r.sent.Before(kill.Add(-window)):
			inWindow++
		case r.answered.IsZero() || r.answered.After(kill):
			inFlight++
		}
	}
	return inWindow, inFlight
}

// TestMeteringSIGKILLLosesAtMostOneCheckpoint is issue 17's crash case: the
// real gateway binary under steady push load is killed with SIGKILL,
// restarted on the same spool directory, driven a little longer and stopped
// cleanly. usage_minutes then holds what the broker stored, less at most
// what the gateway had recorded since its last journal checkpoint: the
// pushes sent in the last meter.DefaultCheckpointEvery before the kill,
// plus the ones in flight. It never holds more than the broker stored.
func TestMeteringSIGKILLLosesAtMostOneCheckpoint(t *testing.T) {
	bin := caddyBinary(t)
	var storedItems atomic.Int64
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
	inWindow, inFlight := load.exposure(kill, meter.DefaultCheckpointEvery)

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
	t.Logf("SIGKILL %v into the load; broker stored %d items (%d before the kill); usage_minutes books %d: lost %d; "+
		"bound %d (%d pushes sent in the %v before the kill + %d in flight)",
		into.Round(time.Millisecond), stored, storedAtKill, booked, loss, inWindow+inFlight, inWindow, meter.DefaultCheckpointEvery, inFlight)
	if loss < 0 {
		t.Fatalf("usage_minutes books %d push messages, more than the %d the broker stored: double count", booked, stored)
	}
	if loss > inWindow+inFlight {
		t.Fatalf("the SIGKILL lost %d push messages, more than the %d sent in the last %v before it plus %d in flight",
			loss, inWindow, meter.DefaultCheckpointEvery, inFlight)
	}
}
