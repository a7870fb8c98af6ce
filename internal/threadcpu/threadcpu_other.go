//go:build !linux

package threadcpu

import "time"

var start = time.Now()

// Now is wall time where the thread's CPU clock is not read (only Linux
// is): ratios stay meaningful on a quiet machine.
func Now() time.Duration { return time.Since(start) }
