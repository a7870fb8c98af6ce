package leader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// memStore is the lease in memory, timed by the real clock, with a switch
// per gateway that cuts it off, and a way to expire the lease early (as a
// step of the database's clock would).
type memStore struct {
	mu      sync.Mutex
	holder  string
	epoch   int64
	peerURL string
	expires time.Time
	down    map[string]bool
}

func newMemStore() *memStore { return &memStore{down: map[string]bool{}} }

func (s *memStore) cut(holder string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[holder] = down
}

func (s *memStore) expireNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expires = time.Now().Add(-time.Millisecond)
}

func (s *memStore) leaseLocked(taken bool) Lease {
	return Lease{Holder: s.holder, Epoch: s.epoch, PeerURL: s.peerURL, Expired: !time.Now().Before(s.expires), TakenOver: taken}
}

func (s *memStore) Renew(_ context.Context, _, holder string, ttl time.Duration, peerURL string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down[holder] {
		return Lease{}, errUnreachable
	}
	if s.holder == holder {
		s.expires, s.peerURL = time.Now().Add(ttl), peerURL
	}
	return s.leaseLocked(false), nil
}

func (s *memStore) Take(_ context.Context, _, holder string, ttl time.Duration, peerURL string, epoch int64) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down[holder] {
		return Lease{}, errUnreachable
	}
	if s.holder == holder {
		s.expires, s.peerURL = time.Now().Add(ttl), peerURL
		return s.leaseLocked(false), nil
	}
	if epoch != s.epoch || time.Now().Before(s.expires) {
		return s.leaseLocked(false), nil
	}
	s.holder, s.epoch, s.peerURL, s.expires = holder, s.epoch+1, peerURL, time.Now().Add(ttl)
	return s.leaseLocked(true), nil
}

func (s *memStore) Release(_ context.Context, _, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder == holder {
		s.expires, s.peerURL = time.Now().Add(-time.Millisecond), ""
	}
	return nil
}

// fakePeer answers Ask with a fixed answer or error, and counts the asks.
type fakePeer struct {
	mu     sync.Mutex
	answer PeerAnswer
	err    error
	asked  []string
}

func (p *fakePeer) Ask(_ context.Context, peerURL, holder, _ string) (PeerAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, holder+"@"+peerURL)
	return p.answer, p.err
}

func (p *fakePeer) asks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.asked)
}

// testTTL is long enough that a CI machine loaded with the race detector,
// the e2e suite and the fuzz pass still runs each member's rounds well
// within it: the tests judge the protocol, not the scheduler.
const testTTL = 800 * time.Millisecond

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testElector is a member of group "g" as if it had started long ago: it
// has promised nothing (see TestANewStandbyKeepsTheHoldOfAPreviousLife).
func testElector(name string, s Store, peer Peer, peerURL string) *Elector {
	e := New(Config{Group: "g", Name: name, Store: s, TTL: testTTL, Settle: time.Millisecond,
		Peer: peer, PeerURL: peerURL, PeerTimeout: 100 * time.Millisecond, MemberNames: []string{"a", "b"}})
	e.promised.Store(0)
	return e
}

// leading makes a lead in s: its first attempt only sees the database
// (Settle), the second takes the free lease.
func leading(t *testing.T, e *Elector) {
	t.Helper()
	ctx := context.Background()
	e.Attempt(ctx)
	time.Sleep(2 * time.Millisecond)
	e.Attempt(ctx)
	if e.Role() != Leader {
		t.Fatalf("%s does not lead", e.Name())
	}
}

// standbyWithExpiredLease is a group where a leads at epoch 1 with peer
// address http://a.example.test, b is its settled standby, and the lease has just
// expired in the database while a is still within its own bound.
func standbyWithExpiredLease(t *testing.T, peer Peer) (*memStore, *Elector, *Elector) {
	t.Helper()
	s := newMemStore()
	a, b := testElector("a", s, nil, "http://a.example.test"), testElector("b", s, peer, "http://b.example.test")
	leading(t, a)
	b.Attempt(context.Background())
	time.Sleep(2 * time.Millisecond)
	s.cut("a", true)
	s.expireNow()
	return s, a, b
}

func TestStandbyDoesNotTakeOverWhileTheLeaderAnswers(t *testing.T) {
	peer := &fakePeer{answer: PeerAnswer{Group: "g", Gateway: "a", Leading: true, Epoch: 1, LeadingFor: 200 * time.Millisecond}}
	_, a, b := standbyWithExpiredLease(t, peer)
	core, logs := observer.New(zap.InfoLevel)
	b.log = zap.New(core)
	for range 3 {
		b.Attempt(context.Background())
	}
	if b.Role() != Standby || a.Role() != Leader {
		t.Fatalf("roles a/b %s/%s, want leader/standby", a.Role(), b.Role())
	}
	if peer.asks() != 3 || peer.asked[0] != "a@http://a.example.test" {
		t.Fatalf("asks %v, want 3 of a at its peer address", peer.asked)
	}
	if w := b.Withheld(); !strings.Contains(w, "a answers on its peer address that it leads") {
		t.Fatalf("withheld %q", w)
	}
	if c := b.Counters(); c.Withheld != 3 || c.Takeovers != 0 {
		t.Fatalf("b's counters %+v", c)
	}
	// Said once in the log, not at every attempt.
	if said := logs.FilterMessageSnippet("not taking over").All(); len(said) != 1 || said[0].ContextMap()["leader"] != "a" {
		t.Fatalf("log %v", logs.All())
	}
}

func TestStandbyTakesOverWhenThePeerAnswerDoesNotHold(t *testing.T) {
	for name, peer := range map[string]*fakePeer{
		"refused":       {err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}},
		"unproven":      {err: ErrUnproven},
		"not leading":   {answer: PeerAnswer{Group: "g", Gateway: "a"}},
		"another epoch": {answer: PeerAnswer{Group: "g", Gateway: "a", Leading: true, Epoch: 7, LeadingFor: time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, b := standbyWithExpiredLease(t, peer)
			b.Attempt(context.Background())
			if b.Role() != Leader || peer.asks() != 1 {
				t.Fatalf("b is %s after %d asks, want leader after 1", b.Role(), peer.asks())
			}
			if b.Withheld() != "" {
				t.Fatalf("withheld %q", b.Withheld())
			}
		})
	}
}

// TestLeaderStopsServingAtItsOwnBound: a leader cut off from the database
// serves until TTL after it sent its last renewal, not a moment longer,
// and then answers its peers that it does not lead.
func TestLeaderStopsServingAtItsOwnBound(t *testing.T) {
	s := newMemStore()
	a := testElector("a", s, nil, "")
	leading(t, a)
	renewed := time.Now()
	s.cut("a", true)
	a.Attempt(context.Background())
	if a.Role() != Leader || a.LeadingFor() <= 0 || a.LeadingFor() > testTTL {
		t.Fatalf("a cut-off leader within its bound: %s, leading for %v", a.Role(), a.LeadingFor())
	}
	if ans := a.peerAnswer(testSecret); !ans.Leading || ans.Epoch != 1 {
		t.Fatalf("peer answer within the bound %+v", ans)
	}
	for a.Role() == Leader {
		if time.Since(renewed) > 3*testTTL {
			t.Fatalf("a cut-off leader still serves %v after its last renewal", time.Since(renewed))
		}
		time.Sleep(time.Millisecond)
	}
	if since := time.Since(renewed); since > testTTL+5*time.Millisecond {
		t.Fatalf("served %v after its last renewal, bound %v", since, testTTL)
	}
	if !a.Lapsed() || a.peerAnswer(testSecret).Leading || a.LeadingFor() != 0 {
		t.Fatalf("after the bound: lapsed %v, answer %+v", a.Lapsed(), a.peerAnswer(testSecret))
	}
	a.Attempt(context.Background())
	if a.Role() != Standby || !a.Lapsed() {
		t.Fatalf("an attempt without the database revived it: %s", a.Role())
	}
	// The database is back and nobody took the lease: it leads again.
	s.cut("a", false)
	a.Attempt(context.Background())
	if a.Role() != Leader || a.Lapsed() {
		t.Fatalf("after the database came back: %s, lapsed %v", a.Role(), a.Lapsed())
	}
}

// TestPeerProtocol runs the real client and handler over HTTP: a leader
// that answers is believed only with the group's secret, its own name, the
// lease's epoch and the nonce just asked; a timeout is bounded.
func TestPeerProtocol(t *testing.T) {
	s := newMemStore()
	a := testElector("a", s, nil, "")
	leading(t, a)
	serve := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	good := serve(PeerHandler(a, testSecret))
	ask := func(c PeerClient, url, holder string) (PeerAnswer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return c.Ask(ctx, url, holder, "")
	}
	client := PeerClient{Group: "g", Name: "b", Secret: testSecret}
	ans, err := ask(client, good, "a")
	if err != nil || !ans.Leading || ans.Epoch != 1 || ans.Gateway != "a" || ans.LeadingFor <= 0 || ans.LeadingFor > testTTL {
		t.Fatalf("leader's answer %+v %v", ans, err)
	}
	unproven := func(what string, c PeerClient, url, holder string) {
		t.Helper()
		if ans, err := ask(c, url, holder); !errors.Is(err, ErrUnproven) {
			t.Fatalf("%s: %+v %v, want ErrUnproven", what, ans, err)
		}
	}
	unproven("wrong secret", PeerClient{Group: "g", Name: "b", Secret: []byte("another secret of thirty-two byt")}, good, "a")
	unproven("another group", PeerClient{Group: "h", Name: "b", Secret: testSecret}, good, "a")
	unproven("another holder", client, good, "b")
	unproven("any HTTP server", client, serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"group":"g","gateway":"a","leading":true,"epoch":1,"leading_for_ms":900,"proof":"00"}`))
	})), "a")
	// A recorded answer replayed to a later ask does not pass: the proof
	// is bound to the nonce.
	var recorded []byte
	{
		rec := httptest.NewRecorder()
		PeerHandler(a, testSecret).ServeHTTP(rec, httptest.NewRequest("GET", askTarget(testSecret, "g", "b", strings.Repeat("ab", 16), time.Now()), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("a proven ask: %d %s", rec.Code, rec.Body)
		}
		recorded = rec.Body.Bytes()
	}
	unproven("a replayed answer", client, serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(recorded)
	})), "a")
	// A stuck peer address is abandoned at the asker's deadline.
	stuck := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	start := time.Now()
	if _, err := ask(client, stuck, "a"); err == nil || errors.Is(err, ErrUnproven) {
		t.Fatalf("stuck peer: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Fatalf("a stuck peer held the ask for %v", d)
	}
	// Bad requests are refused before any answer is proven.
	for _, target := range []string{PeerPath, PeerPath + "?nonce=xyz", PeerPath + "?nonce=" + strings.Repeat("AB", 16),
		PeerPath + "?nonce=" + strings.Repeat("ab", 16) + "&nonce=" + strings.Repeat("ab", 16)} {
		rec := httptest.NewRecorder()
		PeerHandler(a, testSecret).ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("%s: %d", target, rec.Code)
		}
	}
}

// TestTakeoverOverThePeerProtocol: a standby asks a stuck address (the
// ask is bounded and it takes over), a server with the wrong secret (it
// takes over), and a leader that answers (it waits, until the leader's own
// bound has passed and it says so).
func TestTakeoverOverThePeerProtocol(t *testing.T) {
	t.Run("stuck", func(t *testing.T) {
		stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		defer stuck.Close()
		s := newMemStore()
		a := testElector("a", s, nil, stuck.URL)
		b := testElector("b", s, PeerClient{Group: "g", Name: "b", Secret: testSecret}, "")
		leading(t, a)
		b.Attempt(context.Background())
		time.Sleep(2 * time.Millisecond)
		s.cut("a", true)
		s.expireNow()
		start := time.Now()
		b.Attempt(context.Background())
		if b.Role() != Leader {
			t.Fatal("b did not take over from a stuck peer address")
		}
		if d := time.Since(start); d < 100*time.Millisecond || d > 300*time.Millisecond {
			t.Fatalf("the attempt took %v, want the peer timeout (100ms)", d)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		s := newMemStore()
		a := testElector("a", s, nil, "")
		srv := httptest.NewServer(PeerHandler(a, []byte("not the group's secret, not it!!")))
		defer srv.Close()
		a.cfg.PeerURL = srv.URL
		b := testElector("b", s, PeerClient{Group: "g", Name: "b", Secret: testSecret}, "")
		leading(t, a)
		b.Attempt(context.Background())
		time.Sleep(2 * time.Millisecond)
		s.cut("a", true)
		s.expireNow()
		b.Attempt(context.Background())
		if b.Role() != Leader {
			t.Fatal("b believed an answer under another secret")
		}
	})
	t.Run("answering leader", func(t *testing.T) {
		s := newMemStore()
		a := testElector("a", s, nil, "")
		srv := httptest.NewServer(PeerHandler(a, testSecret))
		defer srv.Close()
		a.cfg.PeerURL = srv.URL
		b := testElector("b", s, PeerClient{Group: "g", Name: "b", Secret: testSecret}, "")
		leading(t, a)
		b.Attempt(context.Background())
		s.cut("a", true)
		s.expireNow()
		// Both attempt as they would run; never do both lead.
		deadline := time.Now().Add(3 * testTTL)
		withheld := false
		for b.Role() != Leader {
			if time.Now().After(deadline) {
				t.Fatal("b never took over after a's bound passed")
			}
			a.Attempt(context.Background())
			b.Attempt(context.Background())
			withheld = withheld || b.Withheld() != ""
			if a.Role() == Leader && b.Role() == Leader {
				t.Fatal("both lead")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if a.Role() == Leader || !withheld || b.Counters().Withheld == 0 {
			t.Fatalf("a %s, withheld seen %v, counters %+v", a.Role(), withheld, b.Counters())
		}
	})
}

// askTarget is the peer endpoint's request target for an ask from from at
// at, proven under secret.
func askTarget(secret []byte, group, from, nonce string, at time.Time) string {
	ms := at.UnixMilli()
	return PeerPath + "?" + url.Values{"nonce": {nonce}, "from": {from}, "at": {strconv.FormatInt(ms, 10)},
		"proof": {askProof(secret, group, from, nonce, ms)}}.Encode()
}

// TestPeerEndpointAnswersProvenMembersOnly: the leader's peer endpoint
// answers only an ask proven under the secret, from another configured
// member, in time, and once; anything else gets 401 with nothing about the
// member in it.
func TestPeerEndpointAnswersProvenMembersOnly(t *testing.T) {
	s := newMemStore()
	a := testElector("a", s, nil, "")
	leading(t, a)
	h := PeerHandler(a, testSecret)
	serve := func(target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		return rec
	}
	nonce := func(i int) string { return fmt.Sprintf("%032x", i) }
	now := time.Now()
	proven := askTarget(testSecret, "g", "b", nonce(1), now)
	if rec := serve(proven); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"leading":true`) {
		t.Fatalf("a member's proven ask: %d %s", rec.Code, rec.Body)
	}
	for what, target := range map[string]string{
		"the same ask again":           proven,
		"no proof":                     PeerPath + "?nonce=" + nonce(2),
		"another secret":               askTarget([]byte("another secret of thirty-two byt"), "g", "b", nonce(3), now),
		"another group":                askTarget(testSecret, "h", "b", nonce(4), now),
		"a name that is no member":     askTarget(testSecret, "g", "x", nonce(5), now),
		"its own name":                 askTarget(testSecret, "g", "a", nonce(6), now),
		"an ask from a minute ago":     askTarget(testSecret, "g", "b", nonce(7), now.Add(-time.Minute)),
		"an ask from a minute ahead":   askTarget(testSecret, "g", "b", nonce(8), now.Add(time.Minute)),
		"a proof for another nonce":    strings.Replace(askTarget(testSecret, "g", "b", nonce(9), now), nonce(9), nonce(10), 1),
		"a proof for another sender":   strings.Replace(askTarget(testSecret, "g", "b", nonce(11), now), "from=b", "from=c", 1),
		"a proof for another time":     strings.Replace(askTarget(testSecret, "g", "b", nonce(12), now), "at=", "at=1", 1),
		"a proof in upper-case digits": strings.ToUpper(askTarget(testSecret, "g", "b", nonce(13), now)),
	} {
		rec := serve(target)
		if rec.Code != http.StatusUnauthorized && rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d %s, want a refusal", what, rec.Code, rec.Body)
			continue
		}
		for _, leak := range []string{"leading", "epoch", "token", `"a"`, `"proof":`} {
			if strings.Contains(rec.Body.String(), leak) {
				t.Errorf("%s: the refusal says %q: %s", what, leak, rec.Body)
			}
		}
	}
	// A well-formed ask that does not prove itself is 401 exactly.
	if rec := serve(askTarget(testSecret, "g", "x", nonce(14), now)); rec.Code != http.StatusUnauthorized {
		t.Fatalf("an ask from no member: %d, want 401", rec.Code)
	}
}

// TestGrantsOnlyFromConfiguredMembers: in a group of three, a holder of
// the secret granting under a name that is no member does not stand in for
// the member that did not grant; without a list of members no grant counts.
func TestGrantsOnlyFromConfiguredMembers(t *testing.T) {
	for _, members := range [][]string{{"a", "b", "c"}, nil} {
		s := newMemStore()
		a := New(Config{Group: "g", Name: "a", Store: s, TTL: testTTL, Settle: time.Millisecond, Members: 3, MemberNames: members})
		leading(t, a)
		epoch, at, ok := readPeerToken(testSecret, a.instance, "g", "a", a.peerAnswer(testSecret).Token)
		if !ok {
			t.Fatal("a cannot read its own token")
		}
		a.acceptGrant("b", epoch, at)
		a.acceptGrant("x", epoch, at)
		a.acceptGrant("a", epoch, at)
		if a.extended.Load() != 0 {
			t.Fatalf("members %v: grants of b, of a name that is no member and of itself extended a", members)
		}
		a.acceptGrant("c", epoch, at)
		if extended := a.extended.Load() != 0; extended != (members != nil) {
			t.Fatalf("members %v: grants of b and c extended a: %v", members, extended)
		}
	}
}
