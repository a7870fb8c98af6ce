package caddymodule

import (
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// newRequestID returns a UUIDv7 as 32 hex digits: time-ordered, so ids sort
// by arrival in logs, and with 74 random bits, so they stay unique among
// requests that arrive in the same millisecond.
func newRequestID() string { return requestIDAt(time.Now()) }

// requestIDAt is newRequestID for a request that arrived at now: the
// pipeline reads the clock once per request (a clock read costs about
// 0.2 µs on a virtual machine) and uses it for the id and the key checks.
func requestIDAt(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	b[0], b[1], b[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	b[3], b[4], b[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	r1, r2 := rand.Uint64(), rand.Uint64()
	for i := 6; i < 16; i++ {
		b[i] = byte(r1)
		r1 >>= 8
		if i == 11 {
			r1 = r2
		}
	}
	b[6] = 0x70 | b[6]&0x0f // version 7
	b[8] = 0x80 | b[8]&0x3f // RFC 9562 variant
	return hex.EncodeToString(b[:])
}
