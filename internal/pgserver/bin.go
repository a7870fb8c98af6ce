package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// debianGlob is where Debian and Ubuntu install versioned server binaries.
const debianGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the directory that holds initdb and postgres. It tries,
// in order: the QUEENGATE_PG_BIN environment variable (an error if it is set
// but unusable), `pg_config --bindir` when pg_config is on PATH, the highest
// /usr/lib/postgresql/<version>/bin, and finally the directory of an initdb on
// PATH. The error wraps ErrNotFound and includes InstallHint.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if err := hasServerBinaries(dir); err != nil {
			return "", fmt.Errorf("pgserver: %s=%q is not usable: %w: %v; %s", EnvBinDir, dir, ErrNotFound, err, InstallHint)
		}
		return dir, nil
	}
	var tried []string
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.Command(pgConfig, "--bindir").Output()
		if err == nil {
			dir := strings.TrimSpace(string(out))
			if hasServerBinaries(dir) == nil {
				return dir, nil
			}
			tried = append(tried, dir+" (from pg_config --bindir)")
		}
	}
	if dir, ok := highestDebianBinDir(); ok {
		return dir, nil
	}
	tried = append(tried, debianGlob)
	if initdb, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(initdb)
		if hasServerBinaries(dir) == nil {
			return dir, nil
		}
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("pgserver: %w (looked in %s); %s", ErrNotFound, strings.Join(tried, ", "), InstallHint)
}

// hasServerBinaries reports why dir cannot be used, or nil when it holds
// executable initdb and postgres files.
func hasServerBinaries(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return errors.New(filepath.Join(dir, name) + " is not an executable file")
		}
	}
	return nil
}

// highestDebianBinDir picks the usable /usr/lib/postgresql/<v>/bin with the
// highest numeric version.
func highestDebianBinDir() (string, bool) {
	dirs, _ := filepath.Glob(debianGlob)
	type candidate struct {
		dir     string
		version float64
	}
	var found []candidate
	for _, dir := range dirs {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil || hasServerBinaries(dir) != nil {
			continue
		}
		found = append(found, candidate{dir, v})
	}
	if len(found) == 0 {
		return "", false
	}
	sort.Slice(found, func(i, j int) bool { return found[i].version > found[j].version })
	return found[0].dir, true
}
