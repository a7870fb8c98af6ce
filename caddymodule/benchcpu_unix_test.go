//go:build unix

package caddymodule

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time this process has spent, the garbage
// collector's included.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// loopReportingCPU runs op as b.Loop does and reports the process's CPU
// time per op beside the wall time: on a machine other work shares, CPU
// time moves far less than wall time from run to run.
func loopReportingCPU(b *testing.B, op func()) {
	n, start := 0, processCPU()
	for b.Loop() {
		op()
		n++
	}
	if n > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(n), "cpu-ns/op")
	}
}
