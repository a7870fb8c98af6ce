package meter

import (
	"sync"
	"time"
)

// Circuit breaker settings: after breakerTrip consecutive database failures
// the meter stops trying for a cool-down, spooling straight to disk; the
// cool-down doubles on each failed retry up to breakerMaxCooldown and resets
// on the first success.
const (
	breakerTrip         = 3
	breakerBaseCooldown = 30 * time.Second
	breakerMaxCooldown  = 5 * time.Minute
)

type breaker struct {
	mu        sync.Mutex
	fails     int
	open      bool
	openUntil time.Time
	cooldown  time.Duration
}

func newBreaker() breaker { return breaker{cooldown: breakerBaseCooldown} }

// allow reports whether the database may be tried at now: always while
// closed; once the cool-down has passed while open (a probe).
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open || !now.Before(b.openUntil)
}

// success closes the breaker.
func (b *breaker) success() (wasOpen bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen = b.open
	b.fails, b.open, b.cooldown = 0, false, breakerBaseCooldown
	return wasOpen
}

// failure counts a database failure; it returns whether the breaker opened
// (or re-opened after a failed probe) and for how long.
func (b *breaker) failure(now time.Time) (opened bool, cooldown time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails++
	switch {
	case b.open && now.Before(b.openUntil):
		return false, 0 // already cooling down (another attempt of the same probe)
	case b.open:
		b.cooldown = min(2*b.cooldown, breakerMaxCooldown)
	case b.fails >= breakerTrip:
		b.open = true
	default:
		return false, 0
	}
	b.openUntil = now.Add(b.cooldown)
	return true, b.cooldown
}

func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
