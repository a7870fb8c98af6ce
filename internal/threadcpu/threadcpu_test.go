//go:build linux

package threadcpu

import (
	"runtime"
	"testing"
	"time"
)

// The thread's clock moves while it works and stands while it sleeps.
func TestNowCountsWorkNotSleep(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := Now()
	time.Sleep(100 * time.Millisecond)
	slept := Now() - c0
	if slept > 30*time.Millisecond {
		t.Fatalf("sleeping 100 ms used %v of the thread's CPU", slept)
	}
	c1, w1 := Now(), time.Now()
	x := 0
	for time.Since(w1) < 50*time.Millisecond {
		x++
	}
	if worked := Now() - c1; worked < 5*time.Millisecond {
		t.Fatalf("50 ms of busy work (%d turns) used only %v of the thread's CPU", x, worked)
	}
}
