package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestReloadHandover holds waitServing to what the reload tests need from
// it: once it returns, fresh connections reach only the new configuration,
// so none is closed unanswered. It also measures, with a bare Caddy
// configuration and clients running through the reloads, how many fresh
// connections a reload loses on this machine (docs/troubleshooting.md).
func TestReloadHandover(t *testing.T) {
	port := freePort(t)
	config := func(body string) []byte {
		return []byte(fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"http":{"http_port":%d,"servers":{"s":{"listen":[":%d"],`+
			`"routes":[{"handle":[{"handler":"static_response","body":%q}]}]}}}}}`, port, port, body))
	}
	if err := caddy.Load(config("start"), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	if n := listeningSockets(t, port); n != 1 {
		t.Fatalf("the kernel's tables show %d sockets listening on port %d, want 1", n, port)
	}

	const reloads = 50
	for i := 0; i < reloads; i++ {
		if err := caddy.Load(config(fmt.Sprint("sequential ", i)), false); err != nil {
			t.Fatal(err)
		}
		waitServing(t, port)
		for j := 0; j < 4; j++ {
			if err := getOnFreshConnection(port); err != nil {
				t.Fatalf("reload %d, request %d after waitServing: %v", i, j, err)
			}
		}
	}

	var answered, lost atomic.Int64
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if getOnFreshConnection(port) != nil {
					lost.Add(1)
				} else {
					answered.Add(1)
				}
			}
		}()
	}
	for i := 0; i < reloads; i++ {
		if err := caddy.Load(config(fmt.Sprint("concurrent ", i)), false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	clients.Wait()
	if answered.Load() == 0 {
		t.Fatal("no request was answered while reloading")
	}
	t.Logf("with 4 clients through %d reloads: %d answered, %d lost (%.1f per reload); tcp_migrate_req=%s",
		reloads, answered.Load(), lost.Load(), float64(lost.Load())/reloads, migrateSetting())
}

// getOnFreshConnection sends one GET on a new connection and wants the
// start of an answer.
func getOnFreshConnection(port int) error {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: handover.test\r\nConnection: close\r\n\r\n"); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	head := make([]byte, 12)
	if _, err := io.ReadFull(conn, head); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("closed without an answer")
		}
		return fmt.Errorf("read: %w", err)
	}
	if string(head[:9]) != "HTTP/1.1 " {
		return fmt.Errorf("answer starts %q", head)
	}
	return nil
}

func migrateSetting() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
