// Package pgserver runs a throwaway PostgreSQL server from the server binaries
// installed on the machine (Debian puts them in /usr/lib/postgresql/<v>/bin).
//
// The server listens only on 127.0.0.1, on a free port, with its data directory
// and unix socket in a private directory, and with durability switched off
// (fsync=off): it is meant for tests and for local development, never for data
// that matters. PostgreSQL refuses to run as root, so when the current process
// is root the binaries run as the unprivileged "postgres" OS user.
//
// The postmaster is started directly (not daemonised through pg_ctl) so that
// the package can signal it, and it is asked to quit when the process that
// started it dies, so a crashed test binary does not leave a server behind.
package pgserver
