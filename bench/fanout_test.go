package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFanoutMode runs the documented `go run ./bench -mode fanout` at a
// tiny size (3 gateway processes, 3 revocations a phase, a short churn)
// and checks the report: in both phases every revocation was refused by
// every gateway process and dropped by every in-process cache, each
// gateway held some database connections but no more than its bound, the
// LISTEN connections are there (one a gateway), the churn ran near its
// rate, and the verdicts agree with the figures printed. A gateway that
// misses the notification refuses the key only when its cache entry
// expires (30 s), which fails the test.
func TestFanoutMode(t *testing.T) {
	const gateways, revocations = 3, 3
	cmd := exec.Command("go", "run", ".", "-mode", "fanout", "-gateways", strconv.Itoa(gateways),
		"-revocations", strconv.Itoa(revocations), "-window", "3s", "-churn", "600")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go run ./bench -mode fanout: %v\n%s\n%s", err, out, stderr)
	}
	report := string(out)
	row := func(label string) []string {
		m := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(label) + ` \| (\d+) of (\d+) \| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+) ms \| [\d.]+ ms \| [\d.]+ ms \| (.*) \|$`).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("no row %q:\n%s", label, report)
		}
		if m[1] != strconv.Itoa(revocations) || m[2] != strconv.Itoa(revocations) {
			t.Errorf("%s: %s of %s revocations refused everywhere, want %d of %d", label, m[1], m[2], revocations, revocations)
		}
		return m
	}
	var slowest time.Duration
	for _, phase := range []string{"idle", "churn"} {
		procs := row(phase + ", gateway processes (HTTP probes)")
		caches := row(phase + ", in-process caches")
		if caches[6] != "— | — | — | — | — | — | —" {
			t.Errorf("%s: the caches' row claims the fleet's figures: %q", phase, caches[6])
		}
		rest := strings.Split(procs[6], " | ")
		if len(rest) != 7 {
			t.Fatalf("%s: row ends %q", phase, procs[6])
		}
		changes, _ := strconv.ParseFloat(rest[0], 64)
		total, _ := strconv.Atoi(rest[1])
		perGateway, _ := strconv.Atoi(rest[2])
		statements, _ := strconv.ParseFloat(rest[3], 64)
		if phase == "idle" && changes != 0 {
			t.Errorf("idle: %v key changes a minute, want 0", changes)
		}
		if phase == "churn" && (changes < 300 || changes > 900) {
			t.Errorf("churn: %v key changes a minute, want about 600", changes)
		}
		// Each gateway holds its LISTEN connection and at least one
		// other (the heartbeat's), and at most its bound.
		if perGateway < 2 || perGateway > fanoutConnsPerGateway || total < 2*gateways || total > gateways*fanoutConnsPerGateway {
			t.Errorf("%s: %d connections, at most %d per gateway: outside [2, %d] per gateway", phase, total, perGateway, fanoutConnsPerGateway)
		}
		// Every gateway heartbeats each second.
		if statements < float64(gateways)/2 {
			t.Errorf("%s: %.1f statements/s by %d gateways, want at least their heartbeats", phase, statements, gateways)
		}
		if !regexp.MustCompile(`(?m)^- ` + phase + `: connections by application_name at the busiest sample: .*` + "`queengate-listen` " + strconv.Itoa(gateways) + `\b`).MatchString(report) {
			t.Errorf("%s: not one LISTEN connection per gateway:\n%s", phase, report)
		}
		// Far above the goal, so that a loaded machine does not fail it,
		// and far below the cache's TTL (30 s), which is when a gateway
		// that missed the notification would refuse the key.
		for _, m := range []string{procs[5], caches[5]} {
			d, _ := time.ParseDuration(m + "ms")
			if d > 10*time.Second {
				t.Errorf("%s: a revocation took %v to be refused everywhere: the notification did not reach every cache", phase, d)
			}
			slowest = max(slowest, d)
		}
	}
	want := "revocation refused by every one of " + strconv.Itoa(gateways) + " gateway processes"
	v := regexp.MustCompile(`(?m)^- ` + want + ` on this machine \(HTTP, end to end\): slowest ([\d.]+) ms — goal ≤ 1 s: (met|\*\*missed\*\*)$`).FindStringSubmatch(report)
	if v == nil {
		t.Fatalf("no verdict %q:\n%s", want, report)
	}
	procsWorst, _ := time.ParseDuration(v[1] + "ms")
	if got, want := v[2], verdict(procsWorst <= time.Second); got != want {
		t.Errorf("slowest %v says %q, want %q", procsWorst, got, want)
	}
	if procsWorst > slowest {
		t.Errorf("the verdict's slowest %v is above every row's max (%v)", procsWorst, slowest)
	}
	conns := regexp.MustCompile(`(?m)^- connections per gateway: at most (\d+) held — bound (\d+) .*: (met|\*\*missed\*\*)$`).FindStringSubmatch(report)
	if conns == nil || conns[2] != strconv.Itoa(fanoutConnsPerGateway) {
		t.Fatalf("no connections verdict with the bound %d:\n%s", fanoutConnsPerGateway, report)
	}
	held, _ := strconv.Atoi(conns[1])
	if got, want := conns[3], verdict(held <= fanoutConnsPerGateway); got != want {
		t.Errorf("%d connections say %q, want %q", held, got, want)
	}
}
