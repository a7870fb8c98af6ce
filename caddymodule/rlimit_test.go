//go:build linux

package caddymodule

import (
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestRaiseOpenFileLimitLogsIt(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	openFileLimitOnce = sync.Once{}
	raiseOpenFileLimit(zap.New(core))
	raiseOpenFileLimit(zap.New(core)) // once per process: reloads do not repeat it
	entries := logs.FilterMessage("open file limit").All()
	if len(entries) != 1 {
		t.Fatalf("%d \"open file limit\" lines, want 1: %v", len(entries), logs.All())
	}
	f := entries[0].ContextMap()
	if f["soft_after"] != lim.Max || f["hard_after"] != lim.Max || f["hard_before"] != lim.Max {
		t.Fatalf("fields %v, want the soft limit raised to the hard limit %d", f, lim.Max)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil || now.Cur != now.Max {
		t.Fatalf("limit after: %+v %v", now, err)
	}
}
