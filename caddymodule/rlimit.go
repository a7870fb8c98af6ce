//go:build linux

package caddymodule

import (
	"sync"
	"syscall"

	"go.uber.org/zap"
)

var openFileLimitOnce sync.Once

// raiseOpenFileLimit raises the soft limit on open files to the hard limit,
// once per process, and logs both before and after. Every parked long-poll
// pop holds two descriptors (the client's connection and the one to the
// cell), so a low soft limit caps the parked consumers a gateway can hold
// long before memory does; see docs/deployment.md, "File descriptors".
// (Go's runtime already raises the soft limit at start on Linux; this makes
// it explicit, independent of how the process was started, and visible.)
func raiseOpenFileLimit(log *zap.Logger) {
	openFileLimitOnce.Do(func() {
		var before syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
			log.Warn("open file limit unknown", zap.Error(err))
			return
		}
		after := before
		if before.Cur < before.Max {
			want := syscall.Rlimit{Cur: before.Max, Max: before.Max}
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
				log.Warn("open file limit not raised", zap.Uint64("soft", before.Cur),
					zap.Uint64("hard", before.Max), zap.Error(err))
				return
			}
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
				after = want
			}
		}
		log.Info("open file limit",
			zap.Uint64("soft_before", before.Cur), zap.Uint64("hard_before", before.Max),
			zap.Uint64("soft_after", after.Cur), zap.Uint64("hard_after", after.Max))
		if after.Cur < 4096 {
			log.Warn("open file limit is low for parked long-poll pops (two descriptors each); raise the hard limit (LimitNOFILE, --ulimit nofile)",
				zap.Uint64("soft", after.Cur))
		}
	})
}
