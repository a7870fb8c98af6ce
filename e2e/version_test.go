package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestVersionCommand: caddy queen version reports what the toolchain put in
// the binary, read independently with "go version -m".
func TestVersionCommand(t *testing.T) {
	q := cliFor(t)("")
	raw, err := exec.Command("go", "version", "-m", q.bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, raw)
	}
	var modVersion, revision, vcsTime string
	modified := false
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/queengate/queengate":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.time="):
			vcsTime = strings.TrimPrefix(f[1], "vcs.time=")
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			modified = true
		}
	}
	if modVersion == "" || revision == "" {
		t.Fatalf("go version -m shows no queengate module or no vcs.revision:\n%s", raw)
	}
	want := "github.com/queengate/queengate " + modVersion + " (commit " + revision
	if modified {
		want += " with uncommitted changes"
	}
	want += ", " + vcsTime + ")\n"
	if out := q.ok(t, "version"); out != want {
		t.Fatalf("caddy queen version: %q\nwant %q", out, want)
	}
	var info struct {
		Module, Version, Commit string
		Main                    bool   `json:"main_module"`
		CommitTime              string `json:"commit_time"`
		Modified                bool
	}
	q.okJSON(t, &info, "version")
	if info.Module != "github.com/queengate/queengate" || info.Version != modVersion || info.Commit != revision || !info.Main ||
		info.CommitTime != vcsTime || info.Modified != modified {
		t.Fatalf("caddy queen version --json: %+v", info)
	}
}

// TestChangelog: CHANGELOG.md exists, in the Keep a Changelog form, with an
// Unreleased section that names the version command.
func TestChangelog(t *testing.T) {
	b, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"# Changelog", "keepachangelog.com", "## [Unreleased]", "caddy queen version"} {
		if !strings.Contains(s, want) {
			t.Errorf("CHANGELOG.md does not contain %q", want)
		}
	}
}
