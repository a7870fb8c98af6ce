package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// EnsureInstalled makes sure PostgreSQL server binaries are there to start
// a throwaway server from. On a Debian machine, as root, it installs
// Debian's postgresql package with apt-get, saying so on out first;
// anywhere else missing binaries are an error that says how to install
// them. A configured EnvBinDir is never second-guessed.
func EnsureInstalled(ctx context.Context, out io.Writer) error {
	_, err := FindBinDir()
	if err == nil || !errors.Is(err, ErrNotFound) || os.Getenv(EnvBinDir) != "" {
		return err
	}
	aptGet, lookErr := exec.LookPath("apt-get")
	if lookErr != nil || os.Geteuid() != 0 {
		return err
	}
	fmt.Fprintln(out, "No PostgreSQL server binaries: installing Debian's postgresql (apt-get update && apt-get install -y postgresql) ...")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "postgresql"}} {
		c := exec.CommandContext(ctx, aptGet, args...)
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		c.Stdout, c.Stderr = out, out
		if err := c.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	_, err = FindBinDir()
	return err
}
