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
	"time"
)

// The peer protocol: a standby asks the holder of an expired lease
//
//	GET <peer url>/queengate/peer/v1/lease?nonce=<32 hex digits>
//
// and the holder answers with what it is, bound to that nonce by an
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
//	GET <peer url>/queengate/peer/v1/lease?nonce=…&from=<member>&grant=<token>&grant_proof=<hex>
//
// with an HMAC under the secret over its name and the token, and the leader
// serves on until Hold after it made that answer (see heartbeat.go).

// PeerPath is the path of the peer endpoint.
const PeerPath = "/queengate/peer/v1/lease"

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
	query := "nonce=" + nonce
	if grant != "" {
		query += "&" + url.Values{"from": {c.Name}, "grant": {grant},
			"grant_proof": {grantProof(c.Secret, c.Group, c.Name, grant)}}.Encode()
	}
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

// PeerHandler answers peers about e with answers proven under secret. It
// answers nothing else: mount it on a listener of its own.
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
			http.Error(w, "want nonce=<32 lower-case hex digits>, and from, grant and grant_proof together or not at all", http.StatusBadRequest)
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
type peerQuery struct{ nonce, from, grant, grantProof string }

// parsePeerQuery reads a peer request's query: exactly one nonce of 32
// lower-case hex digits, and from, grant and grant_proof once each, all or
// none.
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
	q := peerQuery{nonce: one("nonce"), from: one("from"), grant: one("grant"), grantProof: one("grant_proof")}
	want := 1
	if q.from != "" || q.grant != "" || q.grantProof != "" {
		if q.from == "" || q.grant == "" || q.grantProof == "" || len(q.grant) > maxToken || len(q.from) > 256 || len(q.grantProof) != 2*sha256.Size {
			return peerQuery{}, false
		}
		want = 4
	}
	if len(v) != want || !lowerHex(q.nonce, nonceHex) {
		return peerQuery{}, false
	}
	return q, true
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
