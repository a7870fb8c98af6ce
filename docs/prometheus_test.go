package docs

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const (
	rulesFile     = "prometheus-rules.yml"
	dashboardFile = "grafana-dashboard.json"
)

// TestPrometheusRulesPassPromtool runs `promtool check rules` on the alert
// rules, as CI does. promtool comes from Debian's prometheus package, which
// scripts/test installs when it is missing; without it this test fails.
func TestPrometheusRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not on PATH (%v): install Debian's prometheus package (apt-get install --no-install-recommends prometheus), as scripts/test does", err)
	}
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules %s said no SUCCESS:\n%s", rulesFile, out)
	}
}

// TestEveryAlertIsExplained fails for an alert of the rules file that the
// metrics reference's alert table lacks, or one the table explains that the
// file does not have.
func TestEveryAlertIsExplained(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(metricsReference)
	if err != nil {
		t.Fatal(err)
	}
	inRules := matches(`(?m)^\s*- alert: (\S+)$`, string(rules))
	explained := matches("(?m)^\\| `(Queengate[A-Za-z]+)` \\|", string(doc))
	if len(inRules) < 10 {
		t.Fatalf("only %d alerts found in %s: the extraction is broken", len(inRules), rulesFile)
	}
	if !slices.Equal(inRules, explained) {
		t.Fatalf("alerts in %s:\n  %v\nexplained in %s:\n  %v", rulesFile, inRules, metricsReference, explained)
	}
}

// matches returns the first group of every match of pattern, sorted.
func matches(pattern, text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}
