package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildLinesMatchXcaddyTxt: the xcaddy lines the README and the docs
// show are the ones in xcaddy.txt, whose commands CI runs as written. A
// one-line `xcaddy build` or `go install …xcaddy@` must equal xcaddy.txt's;
// a multi-line `xcaddy build … \` (with a DNS provider) must build the same
// Caddy version.
func TestBuildLinesMatchXcaddyTxt(t *testing.T) {
	raw, err := os.ReadFile("../xcaddy.txt")
	if err != nil {
		t.Fatal(err)
	}
	var build, install string
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "xcaddy build "):
			build = line
		case strings.HasPrefix(line, "go install github.com/caddyserver/xcaddy/"):
			install = line
		}
	}
	if build == "" || install == "" {
		t.Fatalf("xcaddy.txt has no uncommented xcaddy build (%q) or go install of xcaddy (%q) line", build, install)
	}
	version := strings.Fields(build)[2] // xcaddy build <caddy version> ...

	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, file := range append(docs, "../README.md") {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "xcaddy build ") && strings.HasSuffix(line, `\`):
				seen++
				if f := strings.Fields(line); len(f) < 3 || f[2] != version {
					t.Errorf("%s:%d: %q builds another Caddy than xcaddy.txt's %s", file, i+1, line, version)
				}
			case strings.HasPrefix(line, "xcaddy build "):
				seen++
				if line != build {
					t.Errorf("%s:%d: %q, but xcaddy.txt says %q", file, i+1, line, build)
				}
			case strings.HasPrefix(line, "go install github.com/caddyserver/xcaddy/"):
				seen++
				if line != install {
					t.Errorf("%s:%d: %q, but xcaddy.txt says %q", file, i+1, line, install)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no xcaddy line found in README.md or docs/*.md: the check reads nothing")
	}
}
