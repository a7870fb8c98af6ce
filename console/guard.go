package console

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// LoginGuardConfig tunes the login brute-force guard. Zero values take the
// defaults noted on each field.
type LoginGuardConfig struct {
	// FreeFailuresIP is how many failed logins one client address (IPv6:
	// its /64) may make before backing off. Default 10.
	FreeFailuresIP int
	// FreeFailuresAccount is how many failed logins one account may take
	// before backing off. Default 5.
	FreeFailuresAccount int
	// BackoffBase is the wait after the first failure past the free ones;
	// it doubles with every further failure. Default 1s.
	BackoffBase time.Duration
	// Lockout caps the wait. Default 15m.
	Lockout time.Duration
	// Window is how long without a failure resets a counter. Default 15m.
	Window time.Duration
	// MaxTracked caps the addresses and accounts remembered. Default
	// 100,000.
	MaxTracked int
}

func (c *LoginGuardConfig) setDefaults() {
	if c.FreeFailuresIP <= 0 {
		c.FreeFailuresIP = 10
	}
	if c.FreeFailuresAccount <= 0 {
		c.FreeFailuresAccount = 5
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.Lockout <= 0 {
		c.Lockout = 15 * time.Minute
	}
	if c.Window <= 0 {
		c.Window = 15 * time.Minute
	}
	if c.MaxTracked <= 0 {
		c.MaxTracked = 100_000
	}
}

// LoginGuard counts failed logins per client address and per account and
// makes each wait, exponentially, once its free failures are spent. It is
// consulted before a password is verified, so a locked-out attacker costs
// no hashing. Memory is bounded. It is safe for concurrent use.
type LoginGuard struct {
	cfg       LoginGuardConfig
	mu        sync.Mutex
	entries   map[string]*guardEntry
	lastPrune time.Time
}

type guardEntry struct {
	failures int
	last     time.Time // the latest failure
	until    time.Time // no attempt before this
}

// NewLoginGuard returns a guard with cfg's settings.
func NewLoginGuard(cfg LoginGuardConfig) *LoginGuard {
	cfg.setDefaults()
	return &LoginGuard{cfg: cfg, entries: map[string]*guardEntry{}}
}

// maxAccountLen bounds the account names the guard keys on.
const maxAccountLen = 320

func ipKey(ip netip.Addr) string {
	if !ip.IsValid() {
		return "ip:unknown"
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return "ip:" + p.String()
		}
	}
	return "ip:" + ip.String()
}

func accountKey(account string) string {
	a := strings.ToLower(strings.TrimSpace(account))
	if len(a) > maxAccountLen {
		a = a[:maxAccountLen]
	}
	return "acct:" + a
}

// Check reports whether a login attempt from ip for account may go ahead,
// and if not, how long until it may.
func (g *LoginGuard) Check(ip netip.Addr, account string, now time.Time) (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var wait time.Duration
	for _, k := range []string{ipKey(ip), accountKey(account)} {
		e := g.entries[k]
		if e == nil {
			continue
		}
		if now.Sub(e.last) > g.cfg.Window {
			delete(g.entries, k)
			continue
		}
		if now.Before(e.until) {
			wait = max(wait, e.until.Sub(now))
		}
	}
	return wait == 0, wait
}

// Fail records a failed attempt.
func (g *LoginGuard) Fail(ip netip.Addr, account string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail(ipKey(ip), g.cfg.FreeFailuresIP, now)
	g.fail(accountKey(account), g.cfg.FreeFailuresAccount, now)
}

func (g *LoginGuard) fail(k string, free int, now time.Time) {
	e := g.entries[k]
	if e != nil && now.Sub(e.last) > g.cfg.Window {
		e = nil
	}
	if e == nil {
		g.makeRoom(now)
		e = &guardEntry{}
		g.entries[k] = e
	}
	e.failures++
	e.last = now
	if over := e.failures - free; over > 0 {
		wait := g.cfg.Lockout
		if over <= 30 {
			if d := g.cfg.BackoffBase << (over - 1); d > 0 && d < wait {
				wait = d
			}
		}
		e.until = now.Add(wait)
	}
}

// Succeed clears the account's failures (not the address's: an attacker
// who knows one password must not reset the count of their address).
func (g *LoginGuard) Succeed(account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.entries, accountKey(account))
}

// makeRoom keeps the guard under MaxTracked: forgotten are first the
// entries whose window has passed (looked for at most once a second), then
// arbitrary ones, down to 90% of the cap.
func (g *LoginGuard) makeRoom(now time.Time) {
	if len(g.entries) < g.cfg.MaxTracked {
		return
	}
	if now.Sub(g.lastPrune) >= time.Second {
		g.lastPrune = now
		for k, e := range g.entries {
			if now.Sub(e.last) > g.cfg.Window {
				delete(g.entries, k)
			}
		}
	}
	target := g.cfg.MaxTracked * 9 / 10
	for k := range g.entries {
		if len(g.entries) <= target {
			break
		}
		delete(g.entries, k)
	}
}

// Tracked reports how many addresses and accounts are remembered.
func (g *LoginGuard) Tracked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.entries)
}
