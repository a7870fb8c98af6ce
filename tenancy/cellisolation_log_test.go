package tenancy

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestUnscopedVerdictIsNotAnError: a cell in front of the public broker
// (no tenancy) serving its keeper is the documented normal mode, so its
// verdict is logged below error level; a contradiction of what the
// operator stated still needs a person.
func TestUnscopedVerdictIsNotAnError(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ci := &CellIsolation{log: zap.New(core)}
	cell := ProbeCell{ID: "c1", Slug: "eu1-a", Tenancy: StatedProbe}
	ci.logVerdict(cell, cellJudgement{verdict: ScopingUnscoped, tried: true}, nil)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 || logs.Len() != 1 {
		t.Fatalf("unscoped verdict: %d error entries of %d, want an info line", n, logs.Len())
	}
	ci.logVerdict(cell, cellJudgement{verdict: ScopingUnscoped, contradicted: true, tried: true}, nil)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
		t.Fatalf("a contradiction gives %d error entries, want 1", n)
	}
}
