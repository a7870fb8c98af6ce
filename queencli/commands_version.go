package queencli

import (
	"github.com/spf13/cobra"

	"github.com/queengate/queengate/internal/buildversion"
)

func versionCommand() *cobra.Command {
	version := &cobra.Command{
		Use:   "version",
		Short: "Prints the queengate module version and commit this binary was built from",
		Long: `
Prints the version of the queengate module in this binary and its commit, as
the Go toolchain recorded them (runtime/debug.ReadBuildInfo): a release tag or
pseudo-version when queengate was a dependency of the build (xcaddy), or
"(devel)" with the git commit (and whether the checkout had uncommitted
changes) when it was built in its own checkout. What the build did not record
is said, not guessed. "caddy version" prints Caddy's own version.
It does not touch the database.`,
	}
	version.RunE = action(exactly(0), func(r *run, _ []string) error {
		info := buildversion.Read()
		return r.emit(info, func() error {
			r.printf("%s", info)
			return nil
		})
	})
	return version
}
