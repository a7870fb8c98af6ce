package realbroker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sharedPortError says another process listens on the broker's port too.
type sharedPortError struct {
	port   int
	detail string
}

func (e *sharedPortError) Error() string {
	return fmt.Sprintf("port %d is shared with another listener (%s)", e.port, e.detail)
}

// probeQueues is how many queues proveOwnPort configures, each over a new
// connection: with a second broker on the port each lands on it with even
// odds, so all of them reaching this database leaves 1 chance in 2^n.
const probeQueues = 3

// proveOwnPort makes sure the broker answering on b.Port is this process
// with this database: every socket listening on the port must be one of the
// process's own, and queues configured over HTTP must appear in b's
// database. Two brokers may bind one port (SO_REUSEPORT), and tests of
// several checkouts run at once on one machine.
func (b *Broker) proveOwnPort(t testing.TB) error {
	if err := b.listenersAreOurs(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to the broker's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i := 0; i < probeQueues; i++ {
		name := "realbroker-probe-" + randomHex(8)
		body, _ := json.Marshal(map[string]string{"queue": name})
		status, answer, err := b.do(ctx, http.MethodPost, "/api/v1/configure", body)
		if err != nil {
			return fmt.Errorf("configure probe queue: %w", err)
		}
		if status != http.StatusOK {
			return fmt.Errorf("configure probe queue: %d %s", status, truncate(answer, 300))
		}
		var found bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.queues WHERE name = $1)`, name).Scan(&found); err != nil {
			return fmt.Errorf("look for probe queue: %w", err)
		}
		if !found {
			return &sharedPortError{port: b.Port, detail: "a queue configured on it is not in this broker's database"}
		}
		// Leave the database as a fresh broker's: tests may list queues.
		status, answer, err = b.do(ctx, http.MethodDelete, "/api/v1/resources/queues/"+name, nil)
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("delete probe queue %s: %d %s %v", name, status, truncate(answer, 300), err)
		}
	}
	// Checked again: a broker that bound the port meanwhile shows up here.
	return b.listenersAreOurs()
}

// listenersAreOurs compares the sockets listening on b.Port (from
// /proc/net/tcp{,6}) with the broker process's open sockets.
func (b *Broker) listenersAreOurs() error {
	listening, err := listeningInodes(b.Port)
	if err != nil {
		return err
	}
	ours, err := socketInodes(b.cmd.Process.Pid)
	if err != nil {
		return err
	}
	own := 0
	for _, inode := range listening {
		if !ours[inode] {
			return &sharedPortError{port: b.Port, detail: "a listening socket belongs to another process"}
		}
		own++
	}
	if own == 0 {
		return &sharedPortError{port: b.Port, detail: "the broker process holds none of the sockets listening on it"}
	}
	return nil
}

// listeningInodes returns the inodes of the TCP sockets in LISTEN state on
// port, IPv4 and IPv6.
func listeningInodes(port int) ([]string, error) {
	const listenState = "0A"
	want := fmt.Sprintf("%04X", port)
	var inodes []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if os.IsNotExist(err) && table == "/proc/net/tcp6" {
				continue
			}
			return nil, fmt.Errorf("read listening sockets: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != listenState {
				continue
			}
			local := fields[1]
			if i := strings.LastIndexByte(local, ':'); i >= 0 && local[i+1:] == want {
				inodes = append(inodes, fields[9])
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
	}
	return inodes, nil
}

// socketInodes returns the inodes of the sockets process pid has open.
func socketInodes(pid int) (map[string]bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the broker's open files: %w", err)
	}
	inodes := make(map[string]bool)
	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return inodes, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
