package leader

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The peer protocol: a standby asks the holder of an expired lease
//
//	GET <peer url>/queengate/peer/v2/lease?nonce=<32 hex digits>&from=<member>&at=<unix ms>&proof=<hex>
//
// where proof is an HMAC-SHA256 under the group's peer secret over the
// group, the asking member's name, the nonce and the time of the ask. A
// member answers only an ask so proven, from a configured member of its
// group, within PeerAskWindow of its own clock and not answered before;
// anything else gets 401 and learns nothing about it. The holder answers with what it is, bound to that nonce by an
// HMAC-SHA256 under the group's peer secret:
//
//	{"group":"…","gateway":"…","leading":true,"epoch":7,"leading_for_ms":1840,"proof":"<hex>"}
//
// Only a member that holds the secret can prove an answer, and only for the
// nonce the standby just drew, so neither any other HTTP server at that
// address nor a recorded answer can pass for the leader. The standby then
// also requires the answer to name the lease's holder, group and epoch.
//
// A leader's answer also carries a token: its epoch and when it made the
// answer by its own clock, under an HMAC only it checks. A standby that
// cannot reach the database sends the last token back as a grant,
//
//	GET <peer url>/queengate/peer/v2/lease?nonce=…&from=<member>&at=…&proof=…&grant=<token>&grant_proof=<hex>
//
// with an HMAC under the secret over its name and the token, and the leader
// serves on until Hold after it made that answer, once every other
// configured member has granted (see heartbeat.go).

// PeerPath is the path of the peer endpoint. Version 1 answered asks
// without a proof of the asker; a member of either version refuses the
// other's asks (404), which the asker takes as an unproven answer.
const PeerPath = "/queengate/peer/v2/lease"

// PeerAskWindow is how far the time of an ask may be from the answering
// member's wall clock: the members' clocks must agree that closely.
const PeerAskWindow = 30 * time.Second

// MinPeerSecret is the shortest peer secret accepted, in bytes.
const MinPeerSecret = 32

// nonceHex is the length of a nonce: 16 random bytes in hex.
const nonceHex = 32

// maxPeerAnswer bounds the bytes read from a peer address.
const maxPeerAnswer = 4096

// ErrUnproven is wrapped by Ask's error when the peer address answered, but
// not with a proven answer of the asked holder in this group.
var ErrUnproven = errors.New("peer answer not proven")

// PeerAnswer is what a member says about itself on its peer address.
type PeerAnswer struct {
	Group   string `json:"group"`
	Gateway string `json:"gateway"`
	Leading bool   `json:"leading"`
	Epoch   int64  `json:"epoch"`
	// Token is the leader's token of this answer, to grant it back.
	Token string `json:"token,omitempty"`
	// LeadingFor is how much longer it serves without a renewal.
	LeadingFor time.Duration `json:"-"`
}

type peerWire struct {
	PeerAnswer
	LeadingForMs int64  `json:"leading_for_ms"`
	Proof        string `json:"proof"`
}

// peerProof is the HMAC of an answer to nonce; every field is length
// prefixed, so that no two answers share a message.
func peerProof(secret []byte, nonce string, a PeerAnswer, leadingForMs int64) []byte {
	fields := []string{"queengate-peer-v1", nonce, a.Group, a.Gateway,
		strconv.FormatBool(a.Leading), strconv.FormatInt(a.Epoch, 10), strconv.FormatInt(leadingForMs, 10)}
	if a.Token != "" {
		fields = append(fields, a.Token)
	}
	return peerMAC(secret, fields...)
}

// peerMAC is the HMAC of fields, each length prefixed, so that no two
// lists share a message.
func peerMAC(secret []byte, fields ...string) []byte {
	m := hmac.New(sha256.New, secret)
	for _, f := range fields {
		fmt.Fprintf(m, "%d:%s;", len(f), f)
	}
	return m.Sum(nil)
}

// maxToken bounds a token read from a query.
const maxToken = 128

// maxMemberName bounds a member's name read from a query.
const maxMemberName = 256

// askProof is a member's proof that it asks, at unix millisecond at, with
// nonce.
func askProof(secret []byte, group, from, nonce string, at int64) string {
	return hex.EncodeToString(peerMAC(secret, "queengate-peer-v2-ask", group, from, nonce, strconv.FormatInt(at, 10)))
}

// peerToken is the token of an answer the leader made at answeredAt (its
// elector's clock) at epoch: only the elector instance that made it reads
// it back.
func peerToken(secret []byte, instance [16]byte, group, gateway string, epoch, answeredAt int64) string {
	e, at := strconv.FormatInt(epoch, 10), strconv.FormatInt(answeredAt, 10)
	mac := peerMAC(secret, "queengate-peer-v1-token", hex.EncodeToString(instance[:]), group, gateway, e, at)
	return e + "." + at + "." + hex.EncodeToString(mac[:16])
}

// readPeerToken returns the epoch and the time of the answer of a token
// that this elector instance made.
func readPeerToken(secret []byte, instance [16]byte, group, gateway, token string) (epoch, answeredAt int64, ok bool) {
	parts := strings.Split(token, ".")
	if len(token) > maxToken || len(parts) != 3 {
		return 0, 0, false
	}
	epoch, err1 := strconv.ParseInt(parts[0], 10, 64)
	answeredAt, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || epoch < 1 || answeredAt < 0 {
		return 0, 0, false
	}
	if !hmac.Equal([]byte(token), []byte(peerToken(secret, instance, group, gateway, epoch, answeredAt))) {
		return 0, 0, false
	}
	return epoch, answeredAt, true
}

// grantProof is a member's proof that it grants token.
func grantProof(secret []byte, group, member, token string) string {
	return hex.EncodeToString(peerMAC(secret, "queengate-peer-v1-grant", group, member, token))
}

// encodePeerAnswer is the proven answer to nonce.
func encodePeerAnswer(secret []byte, nonce string, a PeerAnswer) []byte {
	// Rounded up: a leader with any time left says so.
	ms := (a.LeadingFor + time.Millisecond - 1).Milliseconds()
	w := peerWire{PeerAnswer: a, LeadingForMs: ms, Proof: hex.EncodeToString(peerProof(secret, nonce, a, ms))}
	b, _ := json.Marshal(w)
	return b
}

// decodePeerAnswer reads an answer to nonce and returns it only when it is
// proven under secret and comes from holder in group.
func decodePeerAnswer(secret []byte, nonce, group, holder string, body []byte) (PeerAnswer, error) {
	var w peerWire
	if err := json.Unmarshal(body, &w); err != nil {
		return PeerAnswer{}, fmt.Errorf("%w: not a peer answer: %v", ErrUnproven, err)
	}
	proof, err := hex.DecodeString(w.Proof)
	if err != nil || !hmac.Equal(proof, peerProof(secret, nonce, w.PeerAnswer, w.LeadingForMs)) {
		return PeerAnswer{}, fmt.Errorf("%w: the proof does not match this group's peer secret", ErrUnproven)
	}
	if w.Group != group || w.Gateway != holder {
		return PeerAnswer{}, fmt.Errorf("%w: answered as %q of group %q, asked %q of group %q", ErrUnproven, w.Gateway, w.Group, holder, group)
	}
	if w.LeadingForMs < 0 || (w.Leading && w.LeadingForMs == 0) {
		w.Leading = false
	}
	a := w.PeerAnswer
	a.LeadingFor = time.Duration(min(w.LeadingForMs, int64(time.Hour/time.Millisecond))) * time.Millisecond
	return a, nil
}

// peerHTTP keeps no connections and ignores proxy settings: the asks are
// rare, go straight to the member, and a kept connection to a dead leader
// would only mislead.
var peerHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// PeerClient asks members of one group on their peer addresses.
type PeerClient struct {
	Group string
	// Name is the asking member's name, sent with a grant.
	Name   string
	Secret []byte
	// HTTP defaults to a client that keeps no connections.
	HTTP *http.Client
}

// Ask implements Peer; ctx bounds it.
func (c PeerClient) Ask(ctx context.Context, peerURL, holder, grant string) (PeerAnswer, error) {
	var raw [nonceHex / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return PeerAnswer{}, fmt.Errorf("draw a nonce: %w", err)
	}
	nonce := hex.EncodeToString(raw[:])
	at := time.Now().UnixMilli()
	q := url.Values{"nonce": {nonce}, "from": {c.Name}, "at": {strconv.FormatInt(at, 10)},
		"proof": {askProof(c.Secret, c.Group, c.Name, nonce, at)}}
	if grant != "" {
		q.Set("grant", grant)
		q.Set("grant_proof", grantProof(c.Secret, c.Group, c.Name, grant))
	}
	query := q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimRight(peerURL, "/")+PeerPath+"?"+query, nil)
	if err != nil {
		return PeerAnswer{}, fmt.Errorf("peer address %q: %w", peerURL, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = peerHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return PeerAnswer{}, fmt.Errorf("ask %s: %w", holder, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer))
	if err != nil {
		return PeerAnswer{}, fmt.Errorf("ask %s: read the answer: %w", holder, err)
	}
	if resp.StatusCode != http.StatusOK {
		return PeerAnswer{}, fmt.Errorf("%w: %s answered %d", ErrUnproven, holder, resp.StatusCode)
	}
	return decodePeerAnswer(c.Secret, nonce, c.Group, holder, body)
}

// PeerHandler answers peers about e with answers proven under secret, and
// only asks proven under secret by another configured member of e's group
// (any name without a list of members). It answers nothing else: mount it
// on a listener of its own.
func PeerHandler(e *Elector, secret []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PeerPath {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q, ok := parsePeerQuery(r.URL.RawQuery)
		if !ok {
			http.Error(w, "want nonce=<32 lower-case hex digits>, from, at=<unix ms>, proof=<64 lower-case hex digits>, "+
				"and grant and grant_proof together or not at all", http.StatusBadRequest)
			return
		}
		if !e.askAllowed(secret, q, time.Now()) {
			// The same answer whatever failed: who asks without the secret
			// learns nothing of this member.
			http.Error(w, "unauthorized: this endpoint answers the members of its group only", http.StatusUnauthorized)
			return
		}
		if q.grant != "" {
			// A grant that does not verify grants nothing; the answer is
			// the same either way.
			if hmac.Equal([]byte(q.grantProof), []byte(grantProof(secret, e.cfg.Group, q.from, q.grant))) {
				if epoch, at, ok := readPeerToken(secret, e.instance, e.cfg.Group, e.cfg.Name, q.grant); ok {
					e.acceptGrant(q.from, epoch, at)
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(encodePeerAnswer(secret, q.nonce, e.peerAnswer(secret)))
	})
}

// peerQuery is a peer request's query.
type peerQuery struct {
	nonce, from, proof string
	at                 int64 // unix milliseconds
	grant, grantProof  string
}

// parsePeerQuery reads a peer request's query: exactly one each of a
// nonce of 32 lower-case hex digits, from (1 to 256 bytes), at (decimal
// unix milliseconds, at most 15 digits) and proof (64 lower-case hex
// digits), and grant and grant_proof once each, both or neither.
func parsePeerQuery(rawQuery string) (peerQuery, bool) {
	v, err := url.ParseQuery(rawQuery)
	if err != nil {
		return peerQuery{}, false
	}
	one := func(key string) string {
		if len(v[key]) != 1 {
			return ""
		}
		return v[key][0]
	}
	q := peerQuery{nonce: one("nonce"), from: one("from"), proof: one("proof"), grant: one("grant"), grantProof: one("grant_proof")}
	at := one("at")
	if !lowerHex(q.nonce, nonceHex) || q.from == "" || len(q.from) > maxMemberName || !lowerHex(q.proof, 2*sha256.Size) ||
		at == "" || len(at) > 15 || strings.Trim(at, "0123456789") != "" {
		return peerQuery{}, false
	}
	q.at, _ = strconv.ParseInt(at, 10, 64)
	want := 4
	if q.grant != "" || q.grantProof != "" {
		if q.grant == "" || len(q.grant) > maxToken || !lowerHex(q.grantProof, 2*sha256.Size) {
			return peerQuery{}, false
		}
		want = 6
	}
	if len(v) != want {
		return peerQuery{}, false
	}
	return q, true
}

// askAllowed reports whether q is an ask this member answers: proven
// under secret, from another member (one of the configured members, when
// there is a list), within PeerAskWindow of now, and not answered before.
func (e *Elector) askAllowed(secret []byte, q peerQuery, now time.Time) bool {
	if !hmac.Equal([]byte(q.proof), []byte(askProof(secret, e.cfg.Group, q.from, q.nonce, q.at))) {
		return false
	}
	if q.from == e.cfg.Name || (len(e.cfg.MemberNames) > 0 && !e.isOtherMember(q.from)) {
		return false
	}
	if d := now.Sub(time.UnixMilli(q.at)); d > PeerAskWindow || d < -PeerAskWindow {
		return false
	}
	return e.asks.first(q.nonce, time.UnixMilli(q.at).Add(PeerAskWindow), now)
}

// askLog remembers the nonces of proven asks until their time is out of
// PeerAskWindow, so that an ask recorded on the way is not answered
// again. Only proven asks enter it, at the members' pace (a few a second
// each).
type askLog struct {
	mu   sync.Mutex
	seen map[string]time.Time // nonce -> when its ask is out of the window
}

// maxAskLog bounds the nonces remembered; when it is full of asks still in
// the window, an ask is refused rather than answered unremembered.
const maxAskLog = 65536

func newAskLog() *askLog { return &askLog{seen: map[string]time.Time{}} }

// first records nonce until until and reports whether it was not seen
// before.
func (l *askLog) first(nonce string, until, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, seen := l.seen[nonce]; seen {
		return false
	}
	if len(l.seen) >= maxAskLog/2 {
		for n, out := range l.seen {
			if now.After(out) {
				delete(l.seen, n)
			}
		}
	}
	if len(l.seen) >= maxAskLog {
		return false
	}
	l.seen[nonce] = until
	return true
}

// lowerHex reports whether s is n lower-case hex digits.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// peerAnswer is this gateway's answer: leading only while Role says so,
// with a token to grant back.
func (e *Elector) peerAnswer(secret []byte) PeerAnswer {
	a := PeerAnswer{Group: e.cfg.Group, Gateway: e.cfg.Name}
	// The token's time is taken before the answer is sent: the leader's
	// Hold from it ends before a granter's, which counts from receipt.
	now := e.clock()
	if e.Role() == Leader {
		a.Leading, a.Epoch, a.LeadingFor = true, e.epoch.Load(), e.LeadingFor()
		a.Token = peerToken(secret, e.instance, e.cfg.Group, e.cfg.Name, a.Epoch, now)
	}
	return a
}
