package main

import (
	"strings"
	"testing"
)

func TestDevTenancy(t *testing.T) {
	for _, c := range []struct {
		env    string
		scoped bool
		says   string
	}{
		{"", false, "NO TENANCY, like the public Queen 0.15 broker"},
		{"none", false, "NO TENANCY"},
		{"header", true, "QUEEN_TENANCY_HEADER=true: its cell can hold many clusters"},
	} {
		t.Setenv("QUEENGATE_DEV_TENANCY", c.env)
		m, err := devTenancy()
		if err != nil || m.scoped != c.scoped || !strings.Contains(m.label, c.says) {
			t.Errorf("QUEENGATE_DEV_TENANCY=%q: %+v, %v", c.env, m, err)
		}
	}
	t.Setenv("QUEENGATE_DEV_TENANCY", "scoped")
	if _, err := devTenancy(); err == nil || !strings.Contains(err.Error(), "want none (the default) or header") {
		t.Errorf("an unknown mode is not refused: %v", err)
	}
}
