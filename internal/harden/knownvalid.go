package harden

import (
	"crypto/sha256"
	"net/netip"
	"sync"
	"time"
)

// The failure guard must never refuse a credential that is valid: one
// tenant's bad keys from a shared address (a NAT, a CI runner) would
// otherwise lock every other tenant's good keys out of that address. So
// the guard remembers credentials that authenticated, and lets a
// remembered one through an address's backoff.
//
// What it remembers must not become a way around the guard. A client in
// backoff learns, per request, only whether its credential is remembered,
// and it may ask as fast as it likes; so what it asks about must not be
// guessable:
//
//   - a credential that cannot be guessed (a generated API key, with 256
//     random bits) is remembered for every address: a guess has a 2^-256
//     chance of being one;
//   - any other credential (a hand-made key) is remembered only for the
//     address it authenticated from: to be let through, a guess would have
//     to have authenticated from that address already, that is, be known.
//
// Lookups compare SHA-256 digests of what was presented, never the secret
// itself, so how long a refused lookup takes depends on the digest of the
// guess and not on how close the guess is to a remembered credential.

// CredentialDigest is how the guard remembers a credential.
type CredentialDigest [sha256.Size]byte

// DigestCredential is the digest of a credential presented from addr:
// addressed ties it to addr's unit (AddressKey), for credentials that
// could be guessed.
func DigestCredential(secret string, addr netip.Addr, addressed bool) CredentialDigest {
	// One buffer on the stack for what is hashed: no allocation on the
	// request path for credentials of a sane length.
	var stack [256]byte
	in := stack[:0]
	if addressed {
		a := AddressKey(addr)
		b := a.Addr().As16()
		in = append(in, 'a', byte(a.Bits()))
		in = append(in, b[:]...)
	} else {
		in = append(in, 'k', 0)
	}
	in = append(in, secret...)
	return sha256.Sum256(in)
}

// knownValid is a bounded set of digests, each kept for a while after it
// was last remembered.
type knownValid struct {
	keep   time.Duration
	max    int // per shard
	shards [16]knownShard
}

type knownShard struct {
	mu      sync.Mutex
	expires map[CredentialDigest]int64 // Unix nanoseconds
}

func newKnownValid(keep time.Duration, maxTracked int) *knownValid {
	k := &knownValid{keep: keep, max: max(1, maxTracked/len(knownValid{}.shards))}
	for i := range k.shards {
		k.shards[i].expires = map[CredentialDigest]int64{}
	}
	return k
}

func (k *knownValid) shard(d CredentialDigest) *knownShard {
	return &k.shards[d[0]%byte(len(k.shards))]
}

// remember keeps d for k.keep from now. A digest remembered less than half
// that long ago is left as it is, so a busy credential costs one lookup
// per request and a write twice per keep.
func (k *knownValid) remember(d CredentialDigest, now time.Time) {
	s := k.shard(d)
	until := now.Add(k.keep).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, found := s.expires[d]
	if found && exp-until > -int64(k.keep/2) {
		return
	}
	if !found && len(s.expires) >= k.max {
		k.evict(s, now.UnixNano())
	}
	s.expires[d] = until
}

func (k *knownValid) known(d CredentialDigest, now time.Time) bool {
	s := k.shard(d)
	s.mu.Lock()
	exp, found := s.expires[d]
	s.mu.Unlock()
	return found && now.UnixNano() < exp
}

// evict makes room in a full shard: first every expired digest, then, if
// none has expired, an arbitrary one.
func (k *knownValid) evict(s *knownShard, now int64) {
	for d, exp := range s.expires {
		if now >= exp {
			delete(s.expires, d)
		}
	}
	if len(s.expires) < k.max {
		return
	}
	for d := range s.expires {
		delete(s.expires, d)
		return
	}
}
