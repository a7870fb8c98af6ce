//go:build !linux

package caddymodule

import "go.uber.org/zap"

// raiseOpenFileLimit is a no-op outside Linux: the limits and their
// defaults differ per system (macOS caps the soft limit below an unlimited
// hard one), and production gateways run on Linux.
func raiseOpenFileLimit(*zap.Logger) {}
