package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerfileBuildSteps returns the RUN commands of deploy/Dockerfile's
// first (build) stage, in order, and that stage's WORKDIR.
func dockerfileBuildSteps(t *testing.T) (steps []string, workdir string) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := 0
	for _, line := range strings.Split(string(raw), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stages++
		case "WORKDIR":
			if stages == 1 {
				workdir = rest
			}
		case "RUN":
			if stages == 1 {
				if strings.HasSuffix(rest, "\\") || strings.HasPrefix(rest, "[") {
					t.Fatalf("deploy/Dockerfile: %q: keep the build stage's RUN lines one plain shell command each", line)
				}
				steps = append(steps, rest)
			}
		}
	}
	if stages != 2 || len(steps) == 0 || workdir == "" {
		t.Fatalf("deploy/Dockerfile: %d stages, %d build steps, WORKDIR %q: want a build stage with RUN lines and a runtime stage", stages, len(steps), workdir)
	}
	return steps, workdir
}

// TestDockerfileBuildSteps runs the build stage of deploy/Dockerfile as the
// image build would, without Docker: its RUN lines, in order, as one bash
// script (-e), in a copy of the checkout standing for the stage's
// `COPY . .`, with Go's caches and $(go env GOPATH)/bin on PATH as in the
// golang image. The binary they leave must hold queengate, and the runtime
// stage must copy it from where they left it.
func TestDockerfileBuildSteps(t *testing.T) {
	steps, workdir := dockerfileBuildSteps(t)
	raw, _ := os.ReadFile("../deploy/Dockerfile")
	if !strings.Contains(string(raw), "COPY --from=build "+filepath.Join(workdir, "caddy")+" /usr/bin/caddy") {
		t.Fatalf("the runtime stage does not copy %s/caddy from the build stage", workdir)
	}

	// COPY . . : the checkout's files as git sees them (tracked, and new
	// ones not ignored).
	src := t.TempDir()
	list, err := exec.Command("git", "-C", "..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join("..", f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	script := strings.Join(steps, "\n")
	sh := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	sh.Dir = src
	// xcaddy's default flags add -trimpath, which gives every package a
	// cache key of its own: Caddy and its dependencies compiled once more,
	// minutes of CPU on every run. The same flags without it (as .ci/run
	// builds xcaddy.txt's line) reuse what the tests' own builds compiled;
	// the binary differs from an image's only in the source paths it records.
	sh.Env = append(os.Environ(),
		"PATH="+filepath.Join(strings.TrimSpace(string(gopath)), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		`XCADDY_GO_BUILD_FLAGS=-ldflags "-w -s"`)
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the Dockerfile's build steps failed: %v\n%s\nscript:\n%s", err, out, script)
	}
	modules, err := exec.Command(filepath.Join(src, "caddy"), "list-modules", "--skip-standard").Output()
	if err != nil || !strings.Contains(string(modules), "http.handlers.queen_gateway") {
		t.Fatalf("the built caddy lacks queengate: %v\n%s", err, modules)
	}
	t.Logf("deploy/Dockerfile's %d build steps built a caddy with queengate", len(steps))
}
