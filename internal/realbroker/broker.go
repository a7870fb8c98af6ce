package realbroker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/freeport"
	"github.com/queengate/queengate/internal/pgtest"
)

// Options adjust a broker started by StartWith. The zero value is what Start
// uses.
type Options struct {
	// Env is added to the broker's environment after the harness's own
	// settings, so it can also override them (e.g. "JWT_ENABLED=true",
	// "JWT_SECRET=...", "LOG_LEVEL=debug").
	Env []string
	// DatabaseURL, when set, is the database the broker runs on instead of a
	// new one from pgtest.NewDatabase (e.g. to start a broker again on the
	// data of one stopped with Kill). The caller owns it.
	DatabaseURL string
	// ReadyTimeout bounds the wait for /health to report the database
	// connected; 30 s when zero.
	ReadyTimeout time.Duration
}

// Broker is one running queen-server process.
type Broker struct {
	// URL is the broker's base URL, http://127.0.0.1:<port>.
	URL string
	// DatabaseURL is the broker's own PostgreSQL database, to read what it
	// stored (queen.messages, queen.queues, ...).
	DatabaseURL string
	// Port is the loopback port it listens on.
	Port int

	cmd     *exec.Cmd
	out     *output
	exited  chan struct{}
	waitErr error // set before exited is closed

	storeMu sync.Mutex
	store   *pgxpool.Pool // the helpers' pool, closed with the broker
}

// startAttempts bounds the retries when the port turns out to be shared with
// another process's broker (SO_REUSEPORT lets two bind it silently).
const startAttempts = 5

// Start starts a broker on a database of its own and a free loopback port,
// waits until it is ready and proves the port is its alone. It stops the
// broker when t ends, logging the broker's output if t failed. A missing
// broker fails t (see Dir).
func Start(t testing.TB) *Broker {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Broker {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatalf("realbroker: no broker to start: %v", err)
	}
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = pgtest.NewDatabase(t)
	}
	pgEnv, err := postgresEnv(dbURL)
	if err != nil {
		t.Fatalf("realbroker: %v", err)
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	for attempt := 1; ; attempt++ {
		port, err := freeport.Pick()
		if err != nil {
			t.Fatalf("realbroker: %v", err)
		}
		b, err := launch(t, dir, dbURL, port, pgEnv, opts.Env)
		if err != nil {
			t.Fatalf("realbroker: %v", err)
		}
		err = b.waitReady(timeout)
		if err == nil {
			err = b.proveOwnPort(t)
		}
		if err == nil {
			t.Cleanup(func() {
				b.closeStore()
				b.Stop()
				if t.Failed() {
					t.Logf("realbroker: output of the broker on port %d:\n%s", b.Port, b.out.tail(64<<10))
				}
			})
			return b
		}
		b.Kill()
		var shared *sharedPortError
		if errors.As(err, &shared) && attempt < startAttempts {
			t.Logf("realbroker: %v; starting again on another port", err)
			continue
		}
		t.Fatalf("realbroker: %v\nbroker output:\n%s", err, b.out.tail(64<<10))
	}
}

// launch starts the process without waiting for it to be ready.
func launch(t testing.TB, dir, dbURL string, port int, pgEnv, extraEnv []string) (*Broker, error) {
	bufDir := filepath.Join(t.TempDir(), "file-buffer")
	if err := os.MkdirAll(bufDir, 0o700); err != nil {
		return nil, fmt.Errorf("file buffer directory: %w", err)
	}
	cmd := exec.Command(filepath.Join(dir, serverBinary))
	// The broker finds its schema at ../lib/schema from its working directory.
	cmd.Dir = filepath.Join(dir, "server")
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(port),
		"FILE_BUFFER_DIR=" + bufDir,
		"NUM_WORKERS=1",
		"DB_POOL_SIZE=5",
		"SIDECAR_POOL_SIZE=5",
		"LOG_LEVEL=info",
	}
	if v, ok := os.LookupEnv("LD_LIBRARY_PATH"); ok {
		env = append(env, "LD_LIBRARY_PATH="+v)
	}
	env = append(env, pgEnv...)
	cmd.Env = append(env, extraEnv...)
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and killed with the test binary, so that no
	// broker outlives a crashed test run holding its port and database.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	b := &Broker{
		URL:         "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		DatabaseURL: dbURL,
		Port:        port,
		cmd:         cmd,
		out:         out,
		exited:      make(chan struct{}),
	}
	go func() {
		b.waitErr = cmd.Wait()
		close(b.exited)
	}()
	return b, nil
}

// postgresEnv turns a postgres:// URL into the broker's PG_* settings.
func postgresEnv(dbURL string) ([]string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	db := u.Path
	if len(db) > 0 && db[0] == '/' {
		db = db[1:]
	}
	if db == "" {
		return nil, fmt.Errorf("database URL %s names no database", u.Redacted())
	}
	user := u.User.Username()
	if user == "" {
		user = "postgres"
	}
	password, _ := u.User.Password()
	return []string{
		"PG_HOST=" + host,
		"PG_PORT=" + port,
		"PG_DB=" + db,
		"PG_USER=" + user,
		"PG_PASSWORD=" + password,
	}, nil
}

// waitReady polls /health until it answers 200 with the database connected.
func (b *Broker) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		select {
		case <-b.exited:
			return fmt.Errorf("broker exited before it was ready (%v); last /health: %s", b.waitErr, last)
		default:
		}
		status, body, err := get(client, b.URL+"/health")
		switch {
		case err != nil:
			last = err.Error()
		case status == http.StatusOK && healthConnected(body):
			return nil
		default:
			last = fmt.Sprintf("%d %s", status, truncate(body, 300))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker on port %d not ready within %v; last /health: %s", b.Port, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func healthConnected(body []byte) bool {
	var h struct {
		Database string `json:"database"`
	}
	return json.Unmarshal(body, &h) == nil && h.Database == "connected"
}

func get(client *http.Client, u string) (int, []byte, error) {
	resp, err := client.Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Stop sends SIGTERM and waits for the broker to exit, killing it after 10 s.
// It is safe to call more than once and after Kill.
func (b *Broker) Stop() { b.signal(syscall.SIGTERM, 10*time.Second) }

// Kill stops the broker with SIGKILL, as a crash would, and waits for it.
func (b *Broker) Kill() { b.signal(syscall.SIGKILL, 0) }

func (b *Broker) signal(sig syscall.Signal, grace time.Duration) {
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-b.exited:
			return
		case <-time.After(grace):
		}
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// Exited is closed once the broker process has exited (stopped, killed or
// crashed, e.g. on a request body it aborts on).
func (b *Broker) Exited() <-chan struct{} { return b.exited }

// ExitError is the process's exit status once Exited is closed, nil before.
func (b *Broker) ExitError() error {
	select {
	case <-b.exited:
		return b.waitErr
	default:
		return nil
	}
}

// Output returns what the broker has written to stdout and stderr so far.
func (b *Broker) Output() string { return b.out.String() }

// Pool returns a pool on the broker's own database, closed when t ends.
func (b *Broker) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.PoolFor(t, b.DatabaseURL)
}

// Do sends one request straight to the broker and returns its status and
// body; a nil body sends none, otherwise it is sent as application/json.
// Transport errors fail t.
func (b *Broker) Do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	status, answer, err := b.do(context.Background(), method, path, body)
	if err != nil {
		t.Fatalf("realbroker: %s %s: %v", method, path, err)
	}
	return status, answer
}

func (b *Broker) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.URL+path, reader)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A connection of its own per request: on a shared port each new
	// connection may reach either broker, which is what proveOwnPort relies on.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// output collects the broker's stdout and stderr.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// tail returns at most the last n bytes, marked when cut.
func (o *output) tail(n int) string {
	s := o.String()
	if len(s) <= n {
		return s
	}
	return "[... " + strconv.Itoa(len(s)-n) + " bytes cut ...]\n" + s[len(s)-n:]
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
