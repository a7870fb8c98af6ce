// Package shared locates the project's shared folder (the reference texts
// and the recorded broker fixtures), which tests read.
package shared

import (
	"errors"
	"os"
	"path/filepath"
)

// EnvDir names the shared folder explicitly.
const EnvDir = "QUEENGATE_SHARED_DIR"

// Dir returns $QUEENGATE_SHARED_DIR, or else the "shared" sibling of the
// repository root (the first folder above the working directory holding a
// go.mod).
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (go.mod) above the working directory; set " + EnvDir)
		}
		dir = parent
	}
}
