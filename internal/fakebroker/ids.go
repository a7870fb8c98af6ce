package fakebroker

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// idGen makes the broker's identifiers: UUIDv7 for messages and leases (time
// ordered, with a 12-bit counter for ids made in the same millisecond, as the
// recorded broker does) and UUIDv4 for everything else.
type idGen struct {
	mu      sync.Mutex
	lastMS  int64
	counter uint16
}

// v7 returns a new UUIDv7 string.
func (g *idGen) v7(now time.Time) string {
	g.mu.Lock()
	ms := now.UnixMilli()
	if ms <= g.lastMS {
		ms = g.lastMS
		g.counter++
		if g.counter > 0x0fff {
			ms++
			g.counter = 0
		}
	} else {
		g.counter = 0
	}
	g.lastMS = ms
	c := g.counter
	g.mu.Unlock()

	var b [16]byte
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (8 * (5 - i)))
	}
	b[6] = 0x70 | byte(c>>8)&0x0f
	b[7] = byte(c)
	_, _ = rand.Read(b[8:])
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

// newUUIDv4 returns a new random UUIDv4 string.
func newUUIDv4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}
