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
	m := hmac.New(sha256.New, secret)
	for _, f := range []string{"queengate-peer-v1", nonce, a.Group, a.Gateway,
		strconv.FormatBool(a.Leading), strconv.FormatInt(a.Epoch, 10), strconv.FormatInt(leadingForMs, 10)} {
		fmt.Fprintf(m, "%d:%s;", len(f), f)
	}
	return m.Sum(nil)
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
	Group  string
	Secret []byte
	// HTTP defaults to a client that keeps no connections.
	HTTP *http.Client
}

// Ask implements Peer; ctx bounds it.
func (c PeerClient) Ask(ctx context.Context, peerURL, holder string) (PeerAnswer, error) {
	var raw [nonceHex / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return PeerAnswer{}, fmt.Errorf("draw a nonce: %w", err)
	}
	nonce := hex.EncodeToString(raw[:])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimRight(peerURL, "/")+PeerPath+"?nonce="+nonce, nil)
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
		nonce, ok := peerNonce(r.URL.RawQuery)
		if !ok {
			http.Error(w, "nonce: want 32 lower-case hex digits", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(encodePeerAnswer(secret, nonce, e.peerAnswer()))
	})
}

// peerNonce reads the one nonce of a peer request's query.
func peerNonce(rawQuery string) (string, bool) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil || len(q) != 1 || len(q["nonce"]) != 1 {
		return "", false
	}
	n := q["nonce"][0]
	if len(n) != nonceHex {
		return "", false
	}
	for _, c := range []byte(n) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return n, true
}

// peerAnswer is this gateway's answer: leading only while Role says so.
func (e *Elector) peerAnswer() PeerAnswer {
	a := PeerAnswer{Group: e.cfg.Group, Gateway: e.cfg.Name}
	if e.Role() == Leader {
		a.Leading, a.Epoch, a.LeadingFor = true, e.epoch.Load(), e.LeadingFor()
	}
	return a
}
