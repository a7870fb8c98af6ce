package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBatchMode runs the documented `go run ./bench -mode batch` (short)
// and checks that every workload was measured on both targets without an
// error, with full batches, and that the summary prints both ratios, each
// with its verdict against the goal.
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
		summary := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(w.title) + ` \| \*\*(\d+\.\d+)\*\* \| \*\*(\d+\.\d+)×\*\* \|[^|]*\|[^|]*\| throughput (met|\*\*missed\*\*), CPU (met|\*\*missed\*\*) \|$`).FindStringSubmatch(report)
		if summary == nil || summary[1] == "0.000" {
			t.Fatalf("no summary row with ratios and verdicts for %q:\n%s", w.title, report)
		}
		throughput, _ := strconv.ParseFloat(summary[1], 64)
		cpu, _ := strconv.ParseFloat(summary[2], 64)
		if got, want := summary[3], verdict(throughput >= batchThroughputGoal); got != want {
			t.Errorf("%s: throughput %.3f says %q, want %q", w.title, throughput, got, want)
		}
		if got, want := summary[4], verdict(cpu <= batchCPUGoal); got != want {
			t.Errorf("%s: CPU %.2f× says %q, want %q", w.title, cpu, got, want)
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
