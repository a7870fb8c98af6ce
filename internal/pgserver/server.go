package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queengate/queengate/internal/freeport"
)

// Options configures Start. The zero value is a fresh server in a new
// temporary directory on a free port.
type Options struct {
	// Dir is the directory holding the data directory ("data"), the unix
	// socket and the server log ("postgres.log"). Empty means a fresh
	// temporary directory that Close removes. A Dir given by the caller is
	// never removed, and a data directory already initialised in it is reused.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// BinDir holds initdb and postgres; empty means FindBinDir.
	BinDir string
	// OSUser is the user the binaries run as when the current process is
	// root. Default "postgres".
	OSUser string
	// Settings are extra server settings passed as `-c name=value`.
	Settings map[string]string
}

// Server is a running (or stopped) throwaway PostgreSQL server. Its methods
// are safe for concurrent use.
type Server struct {
	binDir  string
	root    string
	dataDir string
	logPath string
	ownRoot bool
	user    runAs
	port    int
	extra   map[string]string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// superuser is the bootstrap superuser created by initdb.
const superuser = "postgres"

// Start initialises a data directory (unless Options.Dir already holds one),
// starts the server on 127.0.0.1 and waits until it accepts connections.
// Errors say how to install PostgreSQL and include the tail of the server log.
func Start(ctx context.Context, opts Options) (*Server, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if err := hasServerBinaries(binDir); err != nil {
		return nil, fmt.Errorf("pgserver: BinDir %q: %w: %v; %s", binDir, ErrNotFound, err, InstallHint)
	}
	osUser := opts.OSUser
	if osUser == "" {
		osUser = "postgres"
	}
	who, err := chooseUser(osUser)
	if err != nil {
		return nil, err
	}
	s := &Server{binDir: binDir, user: who, port: opts.Port, extra: opts.Settings}
	if opts.Dir == "" {
		if s.root, err = os.MkdirTemp("", "queengate-pg-"); err != nil {
			return nil, fmt.Errorf("pgserver: create temporary directory: %w", err)
		}
		s.ownRoot = true
	} else {
		if s.root, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("pgserver: directory %q: %w", opts.Dir, err)
		}
		if err = os.MkdirAll(s.root, 0o700); err != nil {
			return nil, fmt.Errorf("pgserver: create directory %s: %w", s.root, err)
		}
	}
	s.dataDir = filepath.Join(s.root, "data")
	s.logPath = filepath.Join(s.root, "postgres.log")
	if err = s.init(ctx); err == nil {
		err = s.startPickingPort(ctx, opts.Port == 0)
	}
	if err != nil {
		if s.ownRoot {
			_ = os.RemoveAll(s.root)
		}
		return nil, err
	}
	return s, nil
}

// init runs initdb unless the data directory is already initialised.
func (s *Server) init(ctx context.Context) error {
	if err := s.user.chown(s.root); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	cmd := s.user.command(ctx, s.root, filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir, "-A", "trust", "-U", superuser, "--no-sync", "-E", "UTF8", "--locale=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: initdb -D %s (as OS user %s) failed: %w\n%s\n(the directory and all its parents must be writable/searchable by %s); %s",
			s.dataDir, s.user.name, err, tail(string(out), 20), s.user.name, InstallHint)
	}
	return nil
}

// startPickingPort starts the server; when the port was picked by us and
// another process grabbed it meanwhile, it retries with a new port.
func (s *Server) startPickingPort(ctx context.Context, pick bool) error {
	for attempt := 0; ; attempt++ {
		if pick {
			port, err := freeport.Pick()
			if err != nil {
				return err
			}
			s.port = port
		}
		err := s.start(ctx)
		if err == nil || !pick || attempt >= 4 || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
}

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("port already in use")

// args returns the postmaster command line.
func (s *Server) args() []string {
	socketDir := s.root
	if len(socketDir)+len("/.s.PGSQL.65535") > 100 {
		socketDir = "" // too long for a unix socket path: TCP only
	}
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": socketDir,
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "200",
		"shared_buffers":          "32MB",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
	}
	for k, v := range s.extra {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", s.dataDir, "-p", strconv.Itoa(s.port)}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// start launches the postmaster and waits until it accepts connections.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return nil
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: open server log: %w", err)
	}
	defer logFile.Close() // the child has its own copy of the descriptor
	logStart, _ := logFile.Seek(0, 2)
	// The postmaster outlives ctx, which only bounds the wait for readiness.
	cmd := s.user.command(context.Background(), s.root, filepath.Join(s.binDir, "postgres"), s.args()...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("pgserver: run %s: %w; %s", cmd.Path, err, InstallHint)
	}
	if err := s.waitReady(ctx, p); err != nil {
		_ = p.signalAndWait(immediateShutdown)
		log := s.logSince(logStart)
		if strings.Contains(log, "Address already in use") || strings.Contains(log, "could not bind") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("pgserver: postgres on 127.0.0.1:%d did not start: %w\nserver log (%s) tail:\n%s\n%s",
			s.port, err, s.logPath, tail(log, 30), InstallHint)
	}
	s.proc = p
	return nil
}

// waitReady polls until the server accepts a connection, the process exits,
// or ctx ends (bounded to one minute).
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("postgres exited: %v", p.waitErr)
		}
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(attempt, s.URL("postgres"))
		cancelAttempt()
		if err == nil {
			return conn.Close(ctx)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last attempt: %v)", ctx.Err(), last)
		case <-p.done:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// URL returns the connection URL of database dbname for the superuser.
func (s *Server) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the server listens on (kept across restarts).
func (s *Server) Port() int { return s.port }

// Dir returns the directory holding the data directory, socket and log.
func (s *Server) Dir() string { return s.root }

// LogPath returns the path of the server log.
func (s *Server) LogPath() string { return s.logPath }

// Running reports whether the postmaster is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Stop shuts the server down (fast shutdown: open transactions are rolled
// back, connections are closed) and keeps its data directory. Stopping a
// stopped server is a no-op.
func (s *Server) Stop() error {
	return s.stop(fastShutdown)
}

func (s *Server) stop(steps []shutdownStep) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	if err := s.proc.signalAndWait(steps); err != nil {
		return err
	}
	s.proc = nil
	return nil
}

// Restart starts the server again on the same port and data directory,
// stopping it first if it is running. After Stop it is how the server comes
// back.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start(ctx)
}

// Close stops the server at once and removes its temporary directory (a
// directory given in Options.Dir is kept).
func (s *Server) Close() error {
	err := s.stop(immediateShutdown)
	if s.ownRoot {
		if rmErr := os.RemoveAll(s.root); rmErr != nil && err == nil {
			err = fmt.Errorf("pgserver: remove %s: %w", s.root, rmErr)
		}
	}
	return err
}

// logSince returns what the server log gained after offset.
func (s *Server) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

// tail returns the last n lines of text.
func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
