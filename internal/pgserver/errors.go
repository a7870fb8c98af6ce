package pgserver

import "errors"

// ErrNotFound is wrapped by the error Start returns when no usable PostgreSQL
// server binaries (initdb and postgres) can be found.
var ErrNotFound = errors.New("PostgreSQL server binaries (initdb, postgres) not found")

// InstallHint tells a person how to make PostgreSQL available. It is part of
// every error that Start returns because the server could not be found or run.
const InstallHint = "to fix: install PostgreSQL with `apt-get update && apt-get install -y postgresql` (Debian/Ubuntu), " +
	"or set QUEENGATE_PG_BIN to the directory that holds initdb and postgres, " +
	"or set QUEENGATE_TEST_DATABASE_URL to the URL of a running PostgreSQL server " +
	"(for example postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)"

// EnvBinDir names the environment variable that overrides binary discovery.
const EnvBinDir = "QUEENGATE_PG_BIN"
