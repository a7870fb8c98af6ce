package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBatchMode runs the documented `go run ./bench -mode batch` (short)
// and checks that every workload was measured on both targets without an
// error, with full batches, and that the summary prints both ratios.
func TestBatchMode(t *testing.T) {
	cmd := exec.Command("go", "run", ".", "-mode", "batch", "-d", "300ms", "-warmup", "100ms", "-rounds", "2", "-c", "4")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go run ./bench -mode batch: %v\n%s\n%s", err, out, stderr)
	}
	report := string(out)
	for _, w := range []struct {
		title string
		items string
	}{{"push of 100 items × 100 B", "100.0"}, {"push of 1,000 items × 1 KB", "1000.0"}, {"pop batch=100 (autoAck) with messages waiting", "100.0"}} {
		summary := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(w.title) + ` \| \*\*(\d+\.\d+)\*\* \| \*\*(\d+\.\d+)×\*\* \|`).FindStringSubmatch(report)
		if summary == nil || summary[1] == "0.000" {
			t.Fatalf("no summary row with ratios for %q:\n%s", w.title, report)
		}
		section := report[strings.Index(report, "### "+w.title):]
		for _, target := range []string{"caddy", "queengate"} {
			row := regexp.MustCompile(`(?m)^\| ` + target + ` \| (\d+) \|[^|]*\|[^|]*\|[^|]*\| (\d+) \| ([\d.]+) \|`).FindStringSubmatch(section)
			if row == nil || row[1] == "0" || row[2] != "0" || row[3] != w.items {
				t.Fatalf("%s, %s: row %q:\n%s", w.title, target, row, report)
			}
		}
	}
}
