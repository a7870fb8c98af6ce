package buildversion

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module with vcs", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "(devel)"}, Settings: vcs},
			"github.com/queengate/queengate (devel) (commit 0123456789abcdef0123456789abcdef01234567 with uncommitted changes, 2026-12-01T12:00:00Z)"},
		{"main module without vcs", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}},
			"github.com/queengate/queengate (devel) (no VCS information: built outside a git checkout, with -buildvcs=false, or by go test/go run)"},
		{"tagged main module", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v1.2.0"}, Settings: vcs[:3]},
			"github.com/queengate/queengate v1.2.0 (commit 0123456789abcdef0123456789abcdef01234567, 2026-12-01T12:00:00Z)"},
		// Under xcaddy, the vcs settings are the build module's, not queengate's.
		{"released dependency", debug.BuildInfo{Main: debug.Module{Path: "caddy"}, Settings: vcs,
			Deps: []*debug.Module{{Path: "github.com/caddyserver/caddy/v2", Version: "v2.11.9"}, {Path: ModulePath, Version: "v1.3.0"}}},
			"github.com/queengate/queengate v1.3.0"},
		{"pseudo-version dependency", debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0-20261201120000-abcdef012345"}}},
			"github.com/queengate/queengate v0.0.0-20261201120000-abcdef012345 (commit abcdef012345)"},
		{"dependency from a local checkout", debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "/src/queengate"}}}},
			"github.com/queengate/queengate v0.0.0 (replaced by /src/queengate, built from a local directory: its commit is not recorded)"},
		{"absent", debug.BuildInfo{Main: debug.Module{Path: "other"}},
			"github.com/queengate/queengate unknown (queengate is not a module of this binary)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FromBuildInfo(&c.bi).String(); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestPseudoCommit(t *testing.T) {
	for v, want := range map[string]string{
		"v0.0.0-20261201120000-abcdef012345":              "abcdef012345",
		"v1.2.4-0.20261201120000-abcdef012345":            "abcdef012345",
		"v1.2.3-pre.0.20261201120000-abcdef012345":        "abcdef012345",
		"v2.0.0-20261201120000-abcdef012345+incompatible": "abcdef012345",
		"v1.2.3":                   "",
		"v1.2.3-rc1":               "",
		"v1.2.3-beta-abcdef012345": "",
		"(devel)":                  "",
	} {
		if got, _ := pseudoCommit(v); got != want {
			t.Errorf("pseudoCommit(%q) = %q, want %q", v, got, want)
		}
	}
}

// The test binary's own build information: queengate is its main module
// and go test records no VCS state, which Read must say rather than hide.
func TestReadInTestBinary(t *testing.T) {
	i := Read()
	if !i.Main || i.Module != ModulePath || i.Version == "" || i.GoVersion == "" {
		t.Fatalf("Read() = %+v", i)
	}
	if i.Commit == "" && i.Note == "" {
		t.Fatalf("no commit and no note: %+v", i)
	}
}
