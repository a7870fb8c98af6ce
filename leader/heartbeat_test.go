package leader

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// switchedPeer is the network between the members: the real client and
// handler over HTTP, with a switch that cuts the asker off from every peer
// address (the request fails before it reaches the handler, as a refused
// connection would).
type switchedPeer struct {
	PeerClient
	mu  sync.Mutex
	cut bool
}

func (p *switchedPeer) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
}

func (p *switchedPeer) Ask(ctx context.Context, url, holder, grant string) (PeerAnswer, error) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return PeerAnswer{}, errUnreachable
	}
	return p.PeerClient.Ask(ctx, url, holder, grant)
}

// peerGroup is a leader a and its standby b, each with a peer address of
// its own on a real HTTP server, a leading at epoch 1 and b settled.
type peerGroup struct {
	s    *memStore
	a, b *Elector
	net  *switchedPeer // b's way to a
}

func newPeerGroup(t *testing.T) *peerGroup {
	t.Helper()
	s := newMemStore()
	g := &peerGroup{s: s, net: &switchedPeer{PeerClient: PeerClient{Group: "g", Name: "b", Secret: testSecret}}}
	g.a = testElector("a", s, PeerClient{Group: "g", Name: "a", Secret: testSecret}, "")
	g.b = testElector("b", s, g.net, "")
	for _, e := range []*Elector{g.a, g.b} {
		srv := httptest.NewServer(PeerHandler(e, testSecret))
		t.Cleanup(srv.Close)
		e.cfg.PeerURL = srv.URL
	}
	leading(t, g.a)
	g.b.Attempt(context.Background())
	time.Sleep(2 * time.Millisecond)
	if g.b.Role() != Standby || g.b.Holder() != "a" {
		t.Fatalf("b is %s, sees %q", g.b.Role(), g.b.Holder())
	}
	return g
}

// run drives both members as Run would (an attempt and a heartbeat each,
// every few milliseconds) for d, failing the test at any instant both
// lead; it returns when each last led (zero if never).
func (g *peerGroup) run(t *testing.T, d time.Duration) (aLed, bLed time.Time) {
	t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		for _, e := range []*Elector{g.a, g.b} {
			e.Attempt(ctx)
			e.Heartbeat(ctx)
		}
		ra, rb := g.a.Role(), g.b.Role()
		if ra == Leader && rb == Leader {
			t.Fatal("both lead")
		}
		if ra == Leader {
			aLed = time.Now()
		}
		if rb == Leader {
			bLed = time.Now()
		}
	}
	return aLed, bLed
}

// TestTotalOutageTheLeaderServesOn: the database is down for both
// members; the standby heartbeats and grants, so the leader serves on far
// past its lease, and the standby never takes over. Once the database is
// back the leader renews and the grants are no longer needed.
func TestTotalOutageTheLeaderServesOn(t *testing.T) {
	g := newPeerGroup(t)
	g.s.cut("a", true)
	g.s.cut("b", true)
	cut := time.Now()
	aLed, bLed := g.run(t, 4*testTTL)
	if g.a.Role() != Leader || time.Since(cut) < 4*testTTL || !bLed.IsZero() {
		t.Fatalf("after %v of outage: a %s, b led at %v", time.Since(cut), g.a.Role(), bLed)
	}
	if aLed.Sub(cut) < 3*testTTL || g.a.Lapsed() {
		t.Fatalf("a led until %v after the cut, lapsed %v", aLed.Sub(cut), g.a.Lapsed())
	}
	if c := g.b.Counters(); c.Takeovers != 0 {
		t.Fatalf("b's counters %+v", c)
	}
	// The database comes back: a renews, b stays standby.
	g.s.cut("a", false)
	g.s.cut("b", false)
	if _, bLed := g.run(t, 2*testTTL); !bLed.IsZero() || g.a.Role() != Leader || g.a.Counters().Renewals < 3 {
		t.Fatalf("after the outage: a %s %+v, b led at %v", g.a.Role(), g.a.Counters(), bLed)
	}
}

// TestPartitionedLeaderStopsAtItsBound: the leader loses the database and
// the standby's peer address; the standby, on the database, grants
// nothing. The leader stops at its own bound, the standby takes over after
// it, never both.
func TestPartitionedLeaderStopsAtItsBound(t *testing.T) {
	g := newPeerGroup(t)
	g.s.cut("a", true)
	g.net.setCut(true)
	cut := time.Now()
	aLed, bLed := g.run(t, 3*testTTL)
	if aLed.Sub(cut) > testTTL || g.a.Role() == Leader {
		t.Fatalf("the partitioned leader served %v after the cut, bound %v", aLed.Sub(cut), testTTL)
	}
	if bLed.IsZero() || g.b.Role() != Leader {
		t.Fatal("b never took over")
	}
	// Healed: a sees b's lease and stays standby.
	g.s.cut("a", false)
	g.net.setCut(false)
	if aLed, _ := g.run(t, testTTL); g.a.Role() != Standby || aLed.Sub(cut) > testTTL {
		t.Fatalf("after the heal a is %s", g.a.Role())
	}
}

// TestLeaderCutOffAloneIsNotKeptByGrants: the leader loses the database,
// the standby reaches both: the standby does not grant (it may take the
// lease), so the leader stops at its own bound and the standby takes over.
func TestLeaderCutOffAloneIsNotKeptByGrants(t *testing.T) {
	g := newPeerGroup(t)
	g.s.cut("a", true)
	cut := time.Now()
	aLed, bLed := g.run(t, 3*testTTL)
	if aLed.Sub(cut) > testTTL || bLed.IsZero() || g.b.Role() != Leader {
		t.Fatalf("a led until %v after the cut, b led %v", aLed.Sub(cut), !bLed.IsZero())
	}
}

// TestLeaderStopsHoldAfterTheLastGrant: during a total outage the grants
// stop (the standby is cut off from the leader, or gone): the leader stops
// Hold after it made the last answer granted, and the standby, which
// promised, takes over only once it is back on the database and its
// promise has run out.
func TestLeaderStopsHoldAfterTheLastGrant(t *testing.T) {
	g := newPeerGroup(t)
	g.s.cut("a", true)
	g.s.cut("b", true)
	g.run(t, 2*testTTL)
	if g.a.Role() != Leader {
		t.Fatal("a does not serve on grants")
	}
	g.net.setCut(true)
	stopped := time.Now()
	g.s.cut("b", false) // b reaches the database again, a does not
	aLed, bLed := g.run(t, 3*testTTL)
	if aLed.Sub(stopped) > testTTL || g.a.Role() == Leader {
		t.Fatalf("a served %v after the last grant, hold %v", aLed.Sub(stopped), testTTL)
	}
	if !g.a.Lapsed() {
		t.Fatal("a does not say its lease lapsed")
	}
	if bLed.IsZero() || bLed.Sub(stopped) < testTTL-50*time.Millisecond {
		t.Fatalf("b led %v after the last grant, before its promise ran out", bLed.Sub(stopped))
	}
}

// TestGrantsAreProven: a grant counts only with the group's secret, from
// another member, for a token this leader made at its epoch; a leader
// that stopped is not revived by one.
func TestGrantsAreProven(t *testing.T) {
	g := newPeerGroup(t)
	askErr := func(c PeerClient, grant string) (PeerAnswer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ask(ctx, g.a.cfg.PeerURL, "a", grant)
	}
	ask := func(c PeerClient, grant string) PeerAnswer {
		t.Helper()
		ans, err := askErr(c, grant)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	b := PeerClient{Group: "g", Name: "b", Secret: testSecret}
	token := ask(b, "").Token
	if token == "" {
		t.Fatal("a leading answer without a token")
	}
	g.s.cut("a", true)
	for name, grant := range map[string]struct {
		c     PeerClient
		token string
	}{
		"another secret":   {PeerClient{Group: "g", Name: "b", Secret: []byte("another secret of thirty-two byt")}, token},
		"from itself":      {PeerClient{Group: "g", Name: "a", Secret: testSecret}, token},
		"a forged token":   {b, "1.999999999999." + token[len(token)-32:]},
		"another instance": {b, peerToken(testSecret, [16]byte{9}, "g", "a", 1, g.a.clock())},
		"another epoch":    {b, peerToken(testSecret, g.a.instance, "g", "a", 2, g.a.clock())},
	} {
		_, _ = askErr(grant.c, grant.token) // another secret cannot read the answer either
		if g.a.extended.Load() != 0 {
			t.Fatalf("%s: the grant extended a", name)
		}
	}
	// A plain request with a bad proof is refused outright.
	rec := httptest.NewRecorder()
	PeerHandler(g.a, testSecret).ServeHTTP(rec, httptest.NewRequest("GET", PeerPath+"?nonce="+token[:0]+"0123456789abcdef0123456789abcdef&from=b&grant="+token, nil))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("a grant without its proof: %d", rec.Code)
	}
	ask(b, token)
	if g.a.extended.Load() == 0 {
		t.Fatal("a proven grant did not extend a")
	}
	// Past the grant's hold a stops, and a later grant of an older token
	// does not revive it.
	for g.a.Role() == Leader {
		time.Sleep(5 * time.Millisecond)
	}
	if ans := ask(b, token); ans.Leading || g.a.Role() == Leader {
		t.Fatalf("a revived by a grant: %+v", ans)
	}
}

// TestGrantsOfEveryOtherMember: in a group of three a leader serves on
// only while both other members grant.
func TestGrantsOfEveryOtherMember(t *testing.T) {
	s := newMemStore()
	a := New(Config{Group: "g", Name: "a", Store: s, TTL: testTTL, Settle: time.Millisecond, MemberNames: []string{"a", "b", "c"}})
	leading(t, a)
	answer := func() PeerAnswer { return a.peerAnswer(testSecret) }
	epoch, at, ok := readPeerToken(testSecret, a.instance, "g", "a", answer().Token)
	if !ok {
		t.Fatal("a cannot read its own token")
	}
	a.acceptGrant("b", epoch, at)
	if a.extended.Load() != 0 {
		t.Fatal("one grant of two extended a")
	}
	a.acceptGrant("b", epoch, at+int64(time.Millisecond))
	if a.extended.Load() != 0 {
		t.Fatal("two grants of one member extended a")
	}
	later := at + int64(50*time.Millisecond)
	a.acceptGrant("c", epoch, later)
	if got, want := a.extended.Load(), at+int64(time.Millisecond)+int64(testTTL); got != want {
		t.Fatalf("extended to %v, want the earlier of the two grants' holds %v", time.Duration(got), time.Duration(want))
	}
}

// TestANewStandbyKeepsTheHoldOfAPreviousLife: a standby that has just
// started may have granted in a previous process: it does not take a lease
// whose holder has a peer address until Hold after it started, even when
// the holder does not answer.
func TestANewStandbyKeepsTheHoldOfAPreviousLife(t *testing.T) {
	peer := &fakePeer{err: errUnreachable}
	s := newMemStore()
	a := testElector("a", s, nil, "http://a.example.test")
	leading(t, a)
	s.cut("a", true)
	s.expireNow()
	b := New(Config{Group: "g", Name: "b", Store: s, TTL: testTTL, Settle: time.Millisecond, Peer: peer})
	started := time.Now()
	for b.Role() != Leader {
		if time.Since(started) > 3*testTTL {
			t.Fatal("b never took over")
		}
		b.Attempt(context.Background())
		if b.Role() == Leader && time.Since(started) < testTTL {
			t.Fatalf("b took over %v after it started, before its hold of %v", time.Since(started), testTTL)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b.Counters().Withheld == 0 {
		t.Fatal("b never said it withheld the takeover")
	}
}

// TestStopWaitsForTheRenewalInFlight: a renewal sent before Stop cannot
// land after the release and make the lease live again.
func TestStopWaitsForTheRenewalInFlight(t *testing.T) {
	s := &slowStore{memStore: newMemStore()}
	a := testElector("a", s, nil, "")
	leading(t, a)
	s.delay.Store(int64(100 * time.Millisecond))
	done := make(chan struct{})
	go func() { a.Attempt(context.Background()); close(done) }()
	time.Sleep(20 * time.Millisecond) // the renewal is in flight
	a.Stop(context.Background())
	<-done
	s.mu.Lock()
	expired := !time.Now().Before(s.expires)
	s.mu.Unlock()
	if !expired {
		t.Fatal("the renewal in flight re-extended the released lease")
	}
}

// slowStore is a memStore whose renewals take delay to reach it.
type slowStore struct {
	*memStore
	delay atomic.Int64
}

func (s *slowStore) Renew(ctx context.Context, g, h string, ttl time.Duration, peer string) (Lease, error) {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.memStore.Renew(ctx, g, h, ttl, peer)
}
