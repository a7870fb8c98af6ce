package leader

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

// Each test its own database: the lease groups are named after the tests,
// and a second run (-count=N) must not find the first run's lease.
func TestMain(m *testing.M) {
	os.Exit(pgtest.MainWith(m, pgtest.Options{DatabasePerTest: true}))
}

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p := pgtest.Pool(t)
	if _, err := migrations.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// flakyStore fails every call while down is set, as a database that the
// gateway cannot reach.
type flakyStore struct {
	Store
	down bool
}

var errUnreachable = errors.New("database unreachable")

func (s *flakyStore) Renew(ctx context.Context, g, h string, ttl time.Duration, peer string) (Lease, error) {
	if s.down {
		return Lease{}, errUnreachable
	}
	return s.Store.Renew(ctx, g, h, ttl, peer)
}

func (s *flakyStore) Take(ctx context.Context, g, h string, ttl time.Duration, peer string, epoch int64) (Lease, error) {
	if s.down {
		return Lease{}, errUnreachable
	}
	return s.Store.Take(ctx, g, h, ttl, peer, epoch)
}

func (s *flakyStore) Release(ctx context.Context, g, h string) error {
	if s.down {
		return errUnreachable
	}
	return s.Store.Release(ctx, g, h)
}

// TestElection drives two electors by hand against the real lease
// functions: one leader at a time, a takeover only after the lease
// expired, a leader that loses the database serves only until its lease
// runs out by its own clock, steps down when it sees another holder, and a
// release hands over at once.
func TestElection(t *testing.T) {
	ctx := context.Background()
	pg := PgStore{Pool: pool(t)}
	sa, sb := &flakyStore{Store: pg}, &flakyStore{Store: pg}
	const ttl = 400 * time.Millisecond
	cfg := func(name string, s Store) Config {
		return Config{Group: "g-" + t.Name(), Name: name, Store: s, TTL: ttl, Settle: 50 * time.Millisecond}
	}
	a, b := New(cfg("a", sa)), New(cfg("b", sb))
	roles := func(want string) {
		t.Helper()
		if got := a.Role().String() + "/" + b.Role().String(); got != want {
			t.Fatalf("roles a/b = %s, want %s", got, want)
		}
	}

	// A standby that has only just reached the database does not take a
	// free lease at its first attempt.
	a.Attempt(ctx)
	roles("standby/standby")
	time.Sleep(60 * time.Millisecond)
	a.Attempt(ctx)
	b.Attempt(ctx)
	roles("leader/standby")
	time.Sleep(60 * time.Millisecond)
	b.Attempt(ctx)
	roles("leader/standby")
	if b.Holder() != "a" {
		t.Fatalf("b sees holder %q", b.Holder())
	}

	// a loses the database: it serves until its lease runs out by its own
	// clock, and b takes over once the lease expired in the database, which
	// is no sooner: never do both lead.
	sa.down = true
	a.Attempt(ctx)
	b.Attempt(ctx)
	roles("leader/standby")
	for deadline := time.Now().Add(3 * ttl); b.Role() != Leader; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b never took over")
		}
		a.Attempt(ctx)
		b.Attempt(ctx)
		if a.Role() == Leader && b.Role() == Leader {
			t.Fatal("both lead while a is cut off from the database")
		}
	}
	roles("standby/leader")
	sa.down = false
	a.Attempt(ctx)
	roles("standby/leader")
	if a.Lapsed() || a.Holder() != "b" {
		t.Fatalf("a once back: lapsed %v, holder %q", a.Lapsed(), a.Holder())
	}

	// Everyone loses the database: the leader stops serving once its lease
	// ran out, and the standby cannot take over.
	sa.down, sb.down = true, true
	time.Sleep(ttl + 50*time.Millisecond)
	a.Attempt(ctx)
	b.Attempt(ctx)
	roles("standby/standby")
	if !b.Lapsed() {
		t.Fatal("b does not say its lease lapsed")
	}
	// The database is back: the leader renews before the standby, which
	// must first have been connected for Settle, may take it.
	sa.down, sb.down = false, false
	a.Attempt(ctx)
	b.Attempt(ctx)
	roles("standby/leader")

	// A graceful stop hands over at once.
	b.Stop(ctx)
	roles("standby/standby")
	time.Sleep(60 * time.Millisecond)
	a.Attempt(ctx)
	a.Attempt(ctx)
	roles("leader/standby")
	if c := a.Counters(); c.Takeovers != 2 || c.Failures < 3 {
		t.Fatalf("a's counters %+v, want 2 takeovers and at least 3 failures", c)
	}
}

// TestRunTakesOverWithinTheTTL runs two electors for real: after the
// leader stops renewing (as if killed), the standby leads within TTL plus
// one poll.
func TestRunTakesOverWithinTheTTL(t *testing.T) {
	pg := PgStore{Pool: pool(t)}
	const ttl = 600 * time.Millisecond
	ctxA, killA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	a := New(Config{Group: "g-run", Name: "a", Store: pg, TTL: ttl})
	b := New(Config{Group: "g-run", Name: "b", Store: pg, TTL: ttl})
	go a.Run(ctxA)
	deadline := time.Now().Add(5 * time.Second)
	for a.Role() != Leader {
		if time.Now().After(deadline) {
			t.Fatal("a never led")
		}
		time.Sleep(10 * time.Millisecond)
	}
	go b.Run(ctxB)
	time.Sleep(2 * ttl)
	if b.Role() != Standby {
		t.Fatal("b leads while a renews")
	}
	killA() // no release: as a SIGKILL
	killed := time.Now()
	for b.Role() != Leader {
		if time.Since(killed) > 3*ttl {
			t.Fatalf("b did not take over within %v", 3*ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("takeover %v after the leader stopped renewing (ttl %v)", time.Since(killed).Round(time.Millisecond), ttl)
}
