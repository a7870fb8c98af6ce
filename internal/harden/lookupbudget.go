package harden

import (
	"sync"
	"time"
)

// A generated API key carries 256 random bits: no address can guess one,
// so the guard's backoff protects nothing but the database when such a
// key is presented. Refusing it would lock a tenant's valid key out of an
// address another tenant's bad keys had put in backoff, whenever the
// guard had not seen the key succeed before (a new key, a key rotated in,
// a gateway restarted). So a well-formed unguessable key from an address
// in backoff is still looked up, within a budget shared by the whole
// gateway: the database sees at most that many lookups a second from
// every address in backoff together, however many of them there are.

// lookupBudget is a token bucket for those lookups.
type lookupBudget struct {
	mu     sync.Mutex
	rate   float64 // lookups per second
	burst  float64
	tokens float64
	at     time.Time
}

func newLookupBudget(rate float64, burst int, now time.Time) *lookupBudget {
	return &lookupBudget{rate: rate, burst: float64(burst), tokens: float64(burst), at: now}
}

// take reports whether a lookup may run now, taking it from the budget.
func (b *lookupBudget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *lookupBudget) refillLocked(now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.rate)
		b.at = now
	}
}

// AllowUnguessableLookup reports whether an unguessable credential (a
// well-formed generated API key) presented from an address in backoff may
// be looked up all the same, within the gateway-wide budget
// (FailureGuardConfig.UnguessableLookups). A lookup that fails counts as
// the address's failure, as any other does.
func (g *FailureGuard) AllowUnguessableLookup() bool { return g.lookups.take(g.now()) }
