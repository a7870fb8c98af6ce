// Package threadcpu reads the CPU time of the calling OS thread. The
// benchmarks that compare a reader with a baseline in one run time their
// blocks with it: the machines they run on are shared, and a neighbour
// that takes the core inflates wall time but not this thread's CPU time.
// A caller pins itself to its thread first (runtime.LockOSThread).
package threadcpu

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is Linux's CLOCK_THREAD_CPUTIME_ID.
const clockThreadCPUTime = 3

// Now is the CPU time the calling thread has used.
func Now() time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("threadcpu: clock_gettime: " + errno.Error())
	}
	return time.Duration(ts.Nano())
}
