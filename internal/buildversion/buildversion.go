// Package buildversion says which queengate a binary carries, from the build
// information the Go toolchain embeds (runtime/debug.ReadBuildInfo), for
// `caddy queen version` and the gateway's /readyz. It reports what the
// toolchain recorded and nothing else: a build without version control
// information says so rather than guessing.
package buildversion

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// ModulePath is queengate's module path.
const ModulePath = "github.com/queengate/queengate"

// Info is queengate's version in one binary.
type Info struct {
	// Module is queengate's module path.
	Module string `json:"module"`
	// Version is the module version the build recorded: a release tag
	// such as v1.2.0, a pseudo-version (v0.0.0-20261201120000-0123456789ab),
	// "(devel)" for a build from a checkout, or "" when the binary carries
	// no queengate at all (or no build information).
	Version string `json:"version"`
	// Main is whether queengate was the main module of the build (go build
	// in its own tree) rather than a dependency (xcaddy, or another
	// program's go.mod).
	Main bool `json:"main_module"`
	// Replace is where a replace directive took the module from (a local
	// directory or another module), when one did.
	Replace string `json:"replaced_by,omitempty"`
	// Commit is the VCS revision: from vcs.revision when queengate is the
	// main module, else the one a pseudo-version names (12 hex digits).
	// Empty when the build recorded none.
	Commit string `json:"commit,omitempty"`
	// CommitTime is vcs.time (main module only).
	CommitTime string `json:"commit_time,omitempty"`
	// Modified is vcs.modified: the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version,omitempty"`
	// Note says why something is missing, in words.
	Note string `json:"note,omitempty"`
}

// Read returns queengate's version in the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Module: ModulePath, Note: "the binary carries no build information"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo reads queengate's version out of build information.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Module: ModulePath, GoVersion: bi.GoVersion}
	var mod *debug.Module
	if bi.Main.Path == ModulePath {
		mod, info.Main = &bi.Main, true
	} else {
		for _, d := range bi.Deps {
			if d.Path == ModulePath {
				mod = d
				break
			}
		}
	}
	if mod == nil {
		info.Note = "queengate is not a module of this binary"
		return info
	}
	info.Version = mod.Version
	if r := mod.Replace; r != nil {
		info.Replace = r.Path
		if r.Version != "" {
			info.Replace += "@" + r.Version
		}
	}
	if info.Main {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.time":
				info.CommitTime = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
		if info.Commit == "" {
			info.Note = "no VCS information: built outside a git checkout, with -buildvcs=false, or by go test/go run"
		}
		return info
	}
	// A dependency's VCS state is not recorded (vcs.* describe the main
	// module); a pseudo-version names its commit.
	v := mod.Version
	if mod.Replace != nil && mod.Replace.Version != "" {
		v = mod.Replace.Version
	}
	if c, ok := pseudoCommit(v); ok {
		info.Commit = c
	} else if mod.Replace != nil && mod.Replace.Version == "" {
		info.Note = "built from a local directory: its commit is not recorded"
	}
	return info
}

// pseudoCommit returns the commit prefix of a pseudo-version
// (vX.Y.Z-[pre.]yyyymmddhhmmss-abcdefabcdef).
func pseudoCommit(v string) (string, bool) {
	v, _, _ = strings.Cut(v, "+") // +incompatible, +dirty
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 {
		return "", false
	}
	rev, rest := v[i+1:], v[:i]
	for _, r := range rev {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return "", false
		}
	}
	j := strings.LastIndexAny(rest, "-.")
	if j < 0 || len(rest)-j-1 != 14 || strings.Trim(rest[j+1:], "0123456789") != "" {
		return "", false
	}
	return rev, true
}

// String is the one-line form, e.g.
// "github.com/queengate/queengate v1.2.0 (commit 0123456789ab, 2026-12-01T12:00:00Z)".
func (i Info) String() string {
	v := i.Version
	if v == "" {
		v = "unknown"
	}
	var extra []string
	if i.Replace != "" {
		extra = append(extra, "replaced by "+i.Replace)
	}
	if i.Commit != "" {
		c := "commit " + i.Commit
		if i.Modified {
			c += " with uncommitted changes"
		}
		extra = append(extra, c)
	}
	if i.CommitTime != "" {
		extra = append(extra, i.CommitTime)
	}
	if i.Note != "" {
		extra = append(extra, i.Note)
	}
	s := fmt.Sprintf("%s %s", i.Module, v)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}
