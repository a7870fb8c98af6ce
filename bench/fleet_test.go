package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFleetMode runs the documented `go run ./bench -mode fleet` at a
// tiny size and checks what it prints: the fill made exactly the rows the
// density gives for the period it names, every operation was timed with
// the verdict its goal gives, the flushes are one statement each, and
// every table's size is there.
func TestFleetMode(t *testing.T) {
	cmd := exec.Command("go", "run", ".", "-mode", "fleet", "-fleet-clusters", "40,60", "-fleet-days", "2", "-fleet-runs", "2", "-fleet-busy", "0.05")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go run ./bench -mode fleet: %v\n%s\n%s", err, out, stderr)
	}
	report := string(out)
	fills := regexp.MustCompile(`(?m)^- filled (\d{4}-\d\d-\d\d) to (\d{4}-\d\d-\d\d \d\d:\d\d) \([^)]*\) in \S+: usage_minutes ([\d,]+) rows, request_minutes ([\d,]+) rows`).FindAllStringSubmatch(report, -1)
	if len(fills) != 2 {
		t.Fatalf("want a fill line for each of the 2 steps, got %d:\n%s", len(fills), report)
	}
	for i, f := range fills {
		clusters := []int{40, 60}[i]
		st := &fleetStep{clusters: clusters, busy: int(float64(clusters)*0.05 + 0.5)}
		from, _ := time.Parse(time.DateOnly, f[1])
		to, _ := time.Parse("2006-01-02 15:04", f[2])
		// Request counts are kept fewer days than usage, but at 2 days
		// both start on the same day.
		var wantUsage, wantReqs int64
		for day := from; day.Before(to); day = day.AddDate(0, 0, 1) {
			minutes := min(1440, int(to.Sub(day)/time.Minute))
			u, r := fleetExpected(st, minutes)
			wantUsage += u
			wantReqs += r
		}
		if got := number(t, f[3]); got != wantUsage {
			t.Errorf("%d clusters: usage_minutes %d rows, want %d", clusters, got, wantUsage)
		}
		if got := number(t, f[4]); got != wantReqs {
			t.Errorf("%d clusters: request_minutes %d rows, want %d", clusters, got, wantReqs)
		}
	}

	rows := regexp.MustCompile(`(?m)^\| ([a-zA-Z -]+) \| ([^|]+) \| (\d+\.\d) \| ([\d., ]+) \| ([^|]+) \| (met|\*\*missed\*\*|—) \|$`).FindAllStringSubmatch(report, -1)
	if len(rows) != 2*18 {
		t.Fatalf("want 18 timed operations in each of 2 steps, got %d rows:\n%s", len(rows), report)
	}
	for _, r := range rows {
		ms, _ := strconv.ParseFloat(r[3], 64)
		if ms <= 0 || len(strings.Split(r[4], ",")) < 1 {
			t.Errorf("%s %s: no time: %q", r[1], r[2], r[0])
		}
		perCluster := r[1] == "console" && !strings.Contains(r[2], "fleet page") ||
			r[1] == "CLI usage" && (strings.HasPrefix(r[2], "one cluster") || strings.HasPrefix(r[2], "one tenant"))
		want := "—"
		if perCluster {
			want = verdict(ms <= 50)
		}
		if r[6] != want {
			t.Errorf("%s %s: %.1f ms says %q, want %q", r[1], r[2], ms, r[6], want)
		}
	}
	for _, flush := range []string{"usage flush", "request-count flush"} {
		if !strings.Contains(report, "- "+flush+": 1.00 statements per flush") {
			t.Errorf("%s is not one statement per flush:\n%s", flush, report)
		}
	}
	for _, table := range fleetTables {
		sizes := regexp.MustCompile(`(?m)^\| `+table+` \| \d+ \| ([\d,]+) \| [\d.]+ [KMG]iB \| [\d.]+ [KMG]iB \| ([\d.]+) [KMG]iB \|`).FindAllStringSubmatch(report, -1)
		if len(sizes) != 2 {
			t.Errorf("%s: want a size row per step, got %d", table, len(sizes))
			continue
		}
		for _, s := range sizes {
			if number(t, s[1]) == 0 || s[2] == "0" {
				t.Errorf("%s: empty: %q", table, s[0])
			}
		}
	}
	if !strings.Contains(report, "### Growth from 40 to 60 clusters") ||
		!regexp.MustCompile(`(?m)^- sizing, usage_minutes: \d+ bytes a row .*: \d+\.\d\d GiB per 1,000 busy clusters per 30 days$`).MatchString(report) {
		t.Errorf("no growth table or sizing lines:\n%s", report)
	}
}

func number(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}
