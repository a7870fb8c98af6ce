package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// buildRecord is what "go version -m" reads out of a binary, independently
// of queengate's own code.
type buildRecord struct {
	modVersion, revision, vcsTime string
	modified                      bool
}

func readBuildRecord(t *testing.T, bin string) buildRecord {
	t.Helper()
	raw, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, raw)
	}
	var r buildRecord
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/queengate/queengate":
			r.modVersion = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			r.revision = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.time="):
			r.vcsTime = strings.TrimPrefix(f[1], "vcs.time=")
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			r.modified = true
		}
	}
	if r.modVersion == "" {
		t.Fatalf("go version -m shows no queengate main module:\n%s", raw)
	}
	return r
}

// checkVersion runs caddy queen version (and --json) on bin and compares it
// with what go version -m read.
func checkVersion(t *testing.T, q queenCLI, r buildRecord) {
	t.Helper()
	want := "github.com/queengate/queengate " + r.modVersion
	if r.revision != "" {
		want += " (commit " + r.revision
		if r.modified {
			want += " with uncommitted changes"
		}
		want += ", " + r.vcsTime + ")\n"
	} else {
		want += " (no VCS information: built outside a git checkout, with -buildvcs=false, or by go test/go run)\n"
	}
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
	if info.Module != "github.com/queengate/queengate" || info.Version != r.modVersion || info.Commit != r.revision || !info.Main ||
		info.CommitTime != r.vcsTime || info.Modified != r.modified {
		t.Fatalf("caddy queen version --json: %+v, want %+v", info, r)
	}
}

// TestVersionCommand: caddy queen version reports what the toolchain put in
// the binary, read independently with "go version -m": the module version,
// and the commit when the build recorded one, or else that it recorded none
// (the build here runs with GOFLAGS=-buildvcs=false). The commit and
// dependency forms are covered on fabricated build information in
// internal/buildversion.
func TestVersionCommand(t *testing.T) {
	q := cliFor(t)("")
	checkVersion(t, q, readBuildRecord(t, q.bin))
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
