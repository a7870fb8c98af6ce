//go:build !unix

package caddymodule

import "testing"

// loopReportingCPU is b.Loop where the process's CPU time is not read.
func loopReportingCPU(b *testing.B, op func()) {
	for b.Loop() {
		op()
	}
}
