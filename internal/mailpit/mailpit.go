// Package mailpit runs a real SMTP server for tests: the Mailpit binary
// (github.com/axllent/mailpit, a Go module), started as a process on
// loopback, whose HTTP API reads back what it received. Mailpit's own
// packages are internal to its module, so it cannot run in-process; the
// binary is built from the Go module proxy once (scripts/test does it
// before the tests, Binary does it when missing) and kept per version.
package mailpit

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/freeport"
)

//go:embed VERSION
var versionFile string

// Version is the Mailpit release the tests run.
var Version = strings.TrimSpace(versionFile)

// Module is Mailpit's module path.
const Module = "github.com/axllent/mailpit"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Dir is where the binary of Version is kept: <GOPATH>/bin/mailpit-<version>.
func Dir() (string, error) {
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("mailpit: go env GOPATH: %w", err)
	}
	gopath := strings.SplitN(strings.TrimSpace(string(out)), string(os.PathListSeparator), 2)[0]
	return filepath.Join(gopath, "bin", "mailpit-"+Version), nil
}

// Binary returns the path of the Mailpit binary: $QG_MAILPIT, else the
// one kept in Dir, built there with go install when missing.
func Binary() (string, error) {
	binOnce.Do(func() {
		if p := os.Getenv("QG_MAILPIT"); p != "" {
			binPath = p
			return
		}
		dir, err := Dir()
		if err != nil {
			binErr = err
			return
		}
		p := filepath.Join(dir, "mailpit")
		if _, err := os.Stat(p); err == nil {
			binPath = p
			return
		}
		cmd := exec.Command("go", "install", Module+"@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("mailpit: go install %s@%s: %w\n%s", Module, Version, err, out)
			return
		}
		binPath = p
	})
	return binPath, binErr
}

// Options configure one server.
type Options struct {
	// TLSCert and TLSKey (PEM files) enable STARTTLS; with RequireTLS the
	// server speaks TLS from the first byte instead.
	TLSCert, TLSKey string
	// RequireSTARTTLS refuses a client that does not upgrade.
	RequireSTARTTLS bool
	// RequireTLS is implicit TLS.
	RequireTLS bool
	// AuthFile is an htpasswd-style file of accepted credentials.
	AuthFile string
}

// Server is one running Mailpit.
type Server struct {
	// SMTPHost and SMTPPort are where it takes mail.
	SMTPHost string
	SMTPPort int
	// API is the base URL of its HTTP API.
	API string
}

// Start runs a Mailpit for the test, stopped when it ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		smtpPort, httpPort := freePort(t), freePort(t)
		args := []string{"--smtp", "127.0.0.1:" + strconv.Itoa(smtpPort), "--listen", "127.0.0.1:" + strconv.Itoa(httpPort),
			"--database", filepath.Join(dir, fmt.Sprintf("mail%d.db", attempt)), "--disable-version-check", "--quiet",
			"--smtp-disable-rdns"}
		if o.TLSCert != "" {
			args = append(args, "--smtp-tls-cert", o.TLSCert, "--smtp-tls-key", o.TLSKey)
		}
		if o.RequireSTARTTLS {
			args = append(args, "--smtp-require-starttls")
		}
		if o.RequireTLS {
			args = append(args, "--smtp-require-tls")
		}
		if o.AuthFile != "" {
			args = append(args, "--smtp-auth-file", o.AuthFile)
		}
		cmd := exec.Command(bin, args...)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("mailpit%d.log", attempt)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("mailpit: start: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			_ = logf.Close()
		})
		s := &Server{SMTPHost: "127.0.0.1", SMTPPort: smtpPort, API: "http://127.0.0.1:" + strconv.Itoa(httpPort)}
		if err := s.waitReady(exited); err == nil {
			return s
		} else if attempt >= 2 {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("mailpit did not come up: %v\n%s", err, log)
		}
		_ = cmd.Process.Kill()
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// waitReady waits for both the API and the SMTP port.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("mailpit exited")
		default:
		}
		resp, err := http.Get(s.API + "/api/v1/info")
		if err == nil {
			resp.Body.Close()
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(s.SMTPHost, strconv.Itoa(s.SMTPPort)), time.Second); err == nil {
				c.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("timed out")
}

// Address is one address of a message.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Message is a received message as the API reads it.
type Message struct {
	ID      string    `json:"ID"`
	From    Address   `json:"From"`
	To      []Address `json:"To"`
	Subject string    `json:"Subject"`
	Text    string    `json:"Text"`
	HTML    string    `json:"HTML"`
}

func (s *Server) getJSON(path string, v any) error {
	resp, err := http.Get(s.API + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mailpit %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// To returns the messages received for an address, newest first.
func (s *Server) To(t testing.TB, addr string) []Message {
	t.Helper()
	var list struct {
		Messages []Message `json:"messages"`
	}
	if err := s.getJSON("/api/v1/search?query="+url.QueryEscape(`to:"`+addr+`"`), &list); err != nil {
		t.Fatal(err)
	}
	out := make([]Message, 0, len(list.Messages))
	for _, m := range list.Messages {
		var full Message
		if err := s.getJSON("/api/v1/message/"+url.PathEscape(m.ID), &full); err != nil {
			t.Fatal(err)
		}
		out = append(out, full)
	}
	return out
}

// Wait waits up to timeout for the n-th message to an address and returns
// the newest.
func (s *Server) Wait(t testing.TB, addr string, n int, timeout time.Duration) Message {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if got := s.To(t, addr); len(got) >= n {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message %d to %s within %v", n, addr, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Raw is a message's source as received.
func (s *Server) Raw(t testing.TB, id string) string {
	t.Helper()
	resp, err := http.Get(s.API + "/api/v1/message/" + url.PathEscape(id) + "/raw")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
