package tenancy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestJudgementRules(t *testing.T) {
	const S, U, X = ScopingScoped, ScopingUnscoped, ScopingUnknown
	for _, tc := range []struct {
		name         string
		stated       string
		probes       []TenantScoping
		want         TenantScoping
		contradicted bool
	}{
		{"one scoped probe lifts nothing", StatedProbe, []TenantScoping{S}, X, false},
		{"two scoped probes lift nothing", StatedProbe, []TenantScoping{S, S}, X, false},
		{"three in a row lift to scoped", StatedProbe, []TenantScoping{S, S, S}, S, false},
		{"an undecided probe breaks the run", StatedProbe, []TenantScoping{S, S, X, S, S}, X, false},
		{"unscoped, then two scoped: still unscoped", StatedProbe, []TenantScoping{U, S, S}, U, false},
		{"unscoped, then three scoped", StatedProbe, []TenantScoping{U, S, S, S}, S, false},
		{"one unscoped brings a scoped cell down", StatedProbe, []TenantScoping{S, S, S, U}, U, false},
		{"scoped stays scoped on one scoped probe", StatedProbe, []TenantScoping{S, S, S, S}, S, false},
		{"undecided makes a probed cell unknown", StatedProbe, []TenantScoping{S, S, S, X}, X, false},
		{"unknown statement is probe", "", []TenantScoping{S}, X, false},
		{"stated unscoped is never lifted", StatedUnscoped, []TenantScoping{S, S, S, S, S}, U, false},
		{"stated scoped: one scoped probe", StatedScoped, []TenantScoping{S}, S, false},
		{"stated scoped: an undecided probe keeps the word", StatedScoped, []TenantScoping{X}, S, false},
		{"stated scoped contradicted", StatedScoped, []TenantScoping{S, U}, U, true},
		{"a contradiction outlives an undecided probe", StatedScoped, []TenantScoping{U, X}, U, true},
		{"a contradiction needs three scoped to clear", StatedScoped, []TenantScoping{U, S, S}, U, true},
		{"a contradiction cleared by three scoped", StatedScoped, []TenantScoping{U, S, S, S}, S, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(tc.stated)
			for _, p := range tc.probes {
				j.apply(tc.stated, p, DefaultProbeConfirmations)
			}
			if j.verdict != tc.want || j.contradicted != tc.contradicted {
				t.Fatalf("after %v: verdict %q contradicted %v, want %q %v", tc.probes, j.verdict, j.contradicted, tc.want, tc.contradicted)
			}
		})
	}
}

// scriptedProbe answers probes from a script (then its last entry
// forever), and logs which cell each probe reached.
type scriptedProbe struct {
	mu       sync.Mutex
	script   []TenantScoping
	calls    int
	urls     []string
	delay    time.Duration
	gate     chan struct{} // when set, each probe waits for a receive
	recorded []string      // verdict|detail
	keeper   string
}

func (p *scriptedProbe) config() CellIsolationConfig {
	return CellIsolationConfig{
		Probe: func(ctx context.Context, cell ProbeCell) (TenantScoping, error) {
			p.mu.Lock()
			gate, delay := p.gate, p.delay
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			time.Sleep(delay)
			p.mu.Lock()
			defer p.mu.Unlock()
			v := p.script[min(p.calls, len(p.script)-1)]
			p.calls++
			p.urls = append(p.urls, cell.BaseURL)
			if v == ScopingUnknown {
				return v, errors.New("cell does not answer")
			}
			return v, nil
		},
		Record: func(_ context.Context, _ ProbeCell, v TenantScoping, detail string) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.recorded = append(p.recorded, string(v)+"|"+detail)
			return nil
		},
		Keeper: func(context.Context, string) (string, error) { return p.keeper, nil },
		Every:  time.Hour, Retry: 10 * time.Millisecond, KeeperEvery: time.Hour, FirstWait: 2 * time.Second,
	}
}

func (p *scriptedProbe) probes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func startTracker(t *testing.T, p *scriptedProbe) (*CellIsolation, context.Context) {
	t.Helper()
	p.keeper = "keeper"
	ci := NewCellIsolation(p.config())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ci.Run(ctx)
	return ci, ctx
}

func awaitCalls(t *testing.T, p *scriptedProbe, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for p.probes() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes ran, want %d", p.probes(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestScopedTakesThreeAgreeingProbes: a single scoped probe (say, one a
// deletion faked) among unscoped ones never serves a second cluster, and
// a scoping broker is served after three probes, within FirstWait.
func TestScopedTakesThreeAgreeingProbes(t *testing.T) {
	cell := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1"}
	t.Run("a faked scoped among unscoped", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingScoped, ScopingUnscoped}}
		ci, ctx := startTracker(t, p)
		if d := ci.Admit(ctx, cell, "other"); d.Serve || d.Verdict != ScopingUnscoped {
			t.Fatalf("served after one scoped probe: %+v", d)
		}
		if p.probes() != 2 {
			t.Fatalf("%d probes, want 2 (the scoped one asks for a confirmation at once)", p.probes())
		}
	})
	t.Run("a scoping broker, within FirstWait", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingScoped}, delay: 20 * time.Millisecond}
		ci, ctx := startTracker(t, p)
		start := time.Now()
		if d := ci.Admit(ctx, cell, "other"); !d.Serve {
			t.Fatalf("not served on a scoping broker: %+v", d)
		}
		took := time.Since(start)
		if n := p.probes(); n != DefaultProbeConfirmations {
			t.Fatalf("%d probes, want %d", n, DefaultProbeConfirmations)
		}
		// Served at all means within FirstWait; no faster than three probes.
		if took < time.Duration(DefaultProbeConfirmations)*20*time.Millisecond {
			t.Fatalf("first request waited %v for three 20 ms probes", took)
		}
		t.Logf("three confirmations of 20 ms each served the first request after %v", took)
		// One decided unscoped probe brings it down again.
		p.mu.Lock()
		p.script, p.calls = []TenantScoping{ScopingUnscoped}, 0
		p.mu.Unlock()
		ci.CellUnreachable(cell.ID)
		if d := ci.Admit(ctx, cell, "other"); d.Serve || d.Verdict != ScopingUnscoped {
			t.Fatalf("after one unscoped probe: %+v", d)
		}
	})
}

func TestStatedUnscopedIsNeverProbedOrLifted(t *testing.T) {
	p := &scriptedProbe{script: []TenantScoping{ScopingScoped}}
	ci, ctx := startTracker(t, p)
	cell := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1", Tenancy: StatedUnscoped}
	// The keeper's first request waits for the keeper to be read.
	if d := ci.Admit(ctx, cell, "keeper"); !d.Serve {
		t.Fatalf("keeper refused at first sight: %+v", d)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if d := ci.Admit(short, cell, "other"); d.Serve || d.Verdict != ScopingUnscoped {
		t.Fatalf("a cell stated unscoped served another cluster: %+v", d)
	}
	ci.CellUnreachable(cell.ID)
	time.Sleep(100 * time.Millisecond)
	if d := ci.Admit(ctx, cell, "keeper"); !d.Serve {
		t.Fatalf("keeper refused: %+v", d)
	}
	if ci.Serves(cell, "other") {
		t.Fatal("served after a reset")
	}
	if n := p.probes(); n != 0 {
		t.Fatalf("a cell stated unscoped was probed %d times", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.recorded) != 1 || !strings.Contains(p.recorded[0], "stated unscoped") {
		t.Fatalf("recorded %q", p.recorded)
	}
}

func TestStatedScopedContradictedRefusesAndSaysSo(t *testing.T) {
	cell := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1", Tenancy: StatedScoped}
	t.Run("contradicted", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingUnscoped}}
		ci, ctx := startTracker(t, p)
		if d := ci.Admit(ctx, cell, "other"); d.Serve {
			t.Fatalf("a contradicted cell served another cluster: %+v", d)
		}
		if !ci.Serves(cell, "keeper") {
			t.Fatal("keeper refused")
		}
		vs := ci.Verdicts()
		if len(vs) != 1 || !vs[0].Contradicted || vs[0].Stated != StatedScoped || !strings.Contains(vs[0].Detail, "CONTRADICTION") ||
			!strings.Contains(vs[0].Detail, "cell update") {
			t.Fatalf("verdicts %+v", vs)
		}
		// The verdict is published before it is written to the database,
		// so the record may trail the refusal by a moment.
		eventually(t, func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.recorded) > 0
		})
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.recorded) != 1 || !strings.HasPrefix(p.recorded[0], "unscoped|CONTRADICTION") {
			t.Fatalf("recorded %q", p.recorded)
		}
	})
	t.Run("undecided probe keeps the statement", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingUnknown}}
		ci, ctx := startTracker(t, p)
		if d := ci.Admit(ctx, cell, "other"); !d.Serve || d.Verdict != ScopingScoped {
			t.Fatalf("stated scoped, probe undecided: %+v", d)
		}
		if vs := ci.Verdicts(); vs[0].Contradicted {
			t.Fatalf("an undecided probe contradicted: %+v", vs)
		}
	})
	t.Run("the first request waits for the first probe", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingUnscoped}, gate: make(chan struct{})}
		ci, ctx := startTracker(t, p)
		if ci.Serves(cell, "other") {
			t.Fatal("a stated scoped cell served before its first probe")
		}
		go func() { time.Sleep(50 * time.Millisecond); p.gate <- struct{}{} }()
		if d := ci.Admit(ctx, cell, "other"); d.Serve {
			t.Fatalf("served although the first probe contradicts: %+v", d)
		}
	})
}

// TestChangedCellResetsItsVerdict: a new URL or secret is another broker;
// its verdict is unknown (keeper only) at once, it is probed at once, and
// a probe of the old broker still running is discarded.
func TestChangedCellResetsItsVerdict(t *testing.T) {
	for name, change := range map[string]func(ProbeCell) ProbeCell{
		"url":    func(c ProbeCell) ProbeCell { c.BaseURL = "http://127.0.0.1:2"; return c },
		"secret": func(c ProbeCell) ProbeCell { c.Secret = "new"; return c },
	} {
		t.Run(name, func(t *testing.T) {
			p := &scriptedProbe{script: []TenantScoping{ScopingScoped}}
			ci, ctx := startTracker(t, p)
			old := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1", Secret: "s"}
			if !ci.Admit(ctx, old, "other").Serve {
				t.Fatal("scoped cell refused")
			}
			// The next probes block, so the reset shows before they end.
			gate := make(chan struct{})
			p.mu.Lock()
			p.gate, p.script, p.calls = gate, []TenantScoping{ScopingUnscoped}, 0
			p.mu.Unlock()
			moved := change(old)
			if ci.Serves(moved, "other") {
				t.Fatal("the changed cell kept its scoped verdict")
			}
			if !ci.Serves(moved, "keeper") {
				t.Fatal("keeper refused after the change")
			}
			gate <- struct{}{}
			awaitCalls(t, p, 1)
			if d := ci.Admit(ctx, moved, "other"); d.Serve || d.Verdict != ScopingUnscoped {
				t.Fatalf("after the new broker's probe: %+v", d)
			}
			// A slug change alone keeps the verdict.
			renamed := moved
			renamed.Slug = "eu1-renamed"
			if !ci.Serves(renamed, "keeper") || ci.mustState("c1").judgement.verdict != ScopingUnscoped {
				t.Fatal("a rename reset the verdict")
			}
		})
	}
	t.Run("a probe in flight is discarded", func(t *testing.T) {
		p := &scriptedProbe{script: []TenantScoping{ScopingScoped}, gate: make(chan struct{})}
		ci, ctx := startTracker(t, p)
		old := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1"}
		ci.Serves(old, "other") // first sight: a probe starts and blocks
		time.Sleep(50 * time.Millisecond)
		moved := old
		moved.BaseURL = "http://127.0.0.1:2"
		ci.Serves(moved, "other") // reset while the old broker's probe runs
		var released atomic.Bool
		go func() {
			for !released.Load() {
				select {
				case p.gate <- struct{}{}:
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		defer released.Store(true)
		if d := ci.Admit(ctx, moved, "other"); !d.Serve {
			t.Fatalf("the new broker was not probed: %+v", d)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		newProbes := 0
		for _, u := range p.urls {
			if u == moved.BaseURL {
				newProbes++
			}
		}
		if newProbes < DefaultProbeConfirmations {
			t.Fatalf("probed %v: the old broker's answer counted towards the new one", p.urls)
		}
	})
}

// TestUnreachableCellKeepsItsBackoff: failed requests to a cell that is
// down reset a decided verdict once, not at every failure, so the cell is
// not probed in a loop.
func TestUnreachableCellKeepsItsBackoff(t *testing.T) {
	p := &scriptedProbe{script: []TenantScoping{ScopingUnscoped, ScopingUnknown}, keeper: "keeper"}
	cfg := p.config()
	cfg.Retry = time.Second // so that timing on a loaded machine does not matter
	ci := NewCellIsolation(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ci.Run(ctx)
	cell := ProbeCell{ID: "c1", Slug: "eu1-a", BaseURL: "http://127.0.0.1:1"}
	if d := ci.Admit(ctx, cell, "other"); d.Verdict != ScopingUnscoped {
		t.Fatalf("first verdict %+v", d)
	}
	ci.CellUnreachable(cell.ID)
	awaitCalls(t, p, 2)
	for i := 0; i < 50; i++ {
		ci.CellUnreachable(cell.ID)
		time.Sleep(time.Millisecond)
	}
	// Retry is a second: the failures leave room for one retry at most.
	if n := p.probes(); n > 3 {
		t.Fatalf("%d probes of a cell that is down in 50 ms of failed requests", n)
	}
	if ci.Serves(cell, "other") {
		t.Fatal("served while undecided")
	}
}
