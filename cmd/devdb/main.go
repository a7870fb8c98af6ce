// Command devdb runs a throwaway PostgreSQL for the README's walk-through
// and other local work: it starts a server on a free loopback port from the
// machine's server binaries (on Debian, as root, it installs the
// postgresql package first when they are missing), creates an empty
// database, writes the line that points queengate at it to a file, and
// stops the server, deleting its data, when it is interrupted or killed.
//
//	devdb -env devdb.env &     # then: . ./devdb.env
//
// The file holds `export QUEENGATE_DATABASE_URL='postgres://…'`; it is
// written only once the database accepts connections, so a script waits
// for it to be there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/queengate/queengate/internal/pgserver"
)

func main() {
	envFile := flag.String("env", "devdb.env", "file to write `export QUEENGATE_DATABASE_URL=...` to")
	dbname := flag.String("db", "queengate", "name of the database to create")
	flag.Parse()
	if err := run(*envFile, *dbname); err != nil {
		fmt.Fprintln(os.Stderr, "devdb:", err)
		os.Exit(1)
	}
}

func run(envFile, dbname string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pgserver.EnsureInstalled(ctx, os.Stderr); err != nil {
		return err
	}
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.CreateDatabase(ctx, dbname); err != nil {
		return err
	}
	url := srv.URL(dbname)
	// Written whole under another name, then renamed: a reader waiting for
	// the file never sees half a line.
	tmp := filepath.Join(filepath.Dir(envFile), "."+filepath.Base(envFile)+".tmp")
	if err := os.WriteFile(tmp, []byte("export QUEENGATE_DATABASE_URL='"+url+"'\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, envFile); err != nil {
		return err
	}
	defer os.Remove(envFile)
	fmt.Fprintf(os.Stderr, "devdb: PostgreSQL at %s, database %s (written to %s); stops on interrupt\n", url, dbname, envFile)
	<-ctx.Done()
	return nil
}
