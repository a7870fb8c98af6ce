package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
)

// TestBenchAgainstAnUpstream runs the documented `go run ./bench -upstream`
// (short) against a broker without tenancy, as an operator's 0.15.1 cell
// would be, and checks that all three targets were measured without an
// error: one cell per cluster keeps every cluster served.
func TestBenchAgainstAnUpstream(t *testing.T) {
	b := fakebroker.New(fakebroker.Options{IgnoreTenant: true, NoRequestLog: true, DiscardCompleted: true})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd := exec.Command("go", "run", ".", "-upstream", url, "-d", "300ms", "-warmup", "100ms", "-rounds", "1", "-pace", "0")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go run ./bench -upstream: %v\n%s\n%s", err, out, stderr)
	}
	report := string(out)
	if !strings.Contains(report, "upstream: the broker at "+strings.TrimPrefix(url, "http://")) {
		t.Fatalf("the report does not name the upstream:\n%s", report)
	}
	for _, target := range []string{"upstream", "caddy", "queengate"} {
		row := regexp.MustCompile(`(?m)^\| ` + target + ` \| (\d+) \|.*\| (\d+) \| [^|]+ \| [^|]+ \| [^|]+ \| [^|]+ \|$`).FindStringSubmatch(report)
		if row == nil {
			t.Fatalf("no closed-loop row for %s:\n%s", target, report)
		}
		if row[1] == "0" || row[2] != "0" {
			t.Fatalf("%s: %s req/s with %s errors:\n%s", target, row[1], row[2], report)
		}
	}
}
