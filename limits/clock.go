package limits

import (
	"sync"
	"time"
)

// Clock returns the current time. The limit primitives take one so tests
// can drive them exactly; a nil Clock means time.Now.
type Clock func() time.Time

// epoch turns readings of a Clock into nanoseconds since a fixed origin
// taken when the owner was built. With time.Now both readings carry the
// monotonic clock, so Sub (and therefore every elapsed time computed from
// two nanos values) is immune to wall-clock steps. Storing an int64 instead
// of a time.Time also keeps the per-entry state small.
type epoch struct {
	now  Clock // nil: the real clock
	base time.Time
}

func newEpoch(now Clock) epoch {
	if now == nil {
		return epoch{base: time.Now()}
	}
	return epoch{now: now, base: now()}
}

// nanos is the current reading in nanoseconds since the origin. It may be
// negative when an injected clock goes back before the origin; callers
// saturate elapsed times at zero, so a clock that steps back never refunds
// or charges anything. With the real clock it uses time.Since, which reads
// only the monotonic clock (half the cost of time.Now on the hot path).
func (e epoch) nanos() int64 {
	if e.now == nil {
		return int64(time.Since(e.base))
	}
	return int64(e.now().Sub(e.base))
}

// ManualClock is a Clock for tests that only moves when told to. The zero
// value starts at the zero time; use NewManualClock for a readable origin.
// It is safe for concurrent use.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{t: start} }

// Now reads the clock; pass c.Now as a Clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (which may be negative, to test clocks that
// step back).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
