//go:build realbroker

package realbroker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/pgtest"
)

func push(t *testing.T, b *Broker, queue string, n int) {
	t.Helper()
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"queue": queue, "payload": map[string]int{"n": i}}
	}
	body, _ := json.Marshal(map[string]any{"items": items})
	if status, answer := b.Do(t, http.MethodPost, "/api/v1/push", body); status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("push: %d %s", status, answer)
	}
}

func TestStartServesTheRealBrokerOnItsOwnDatabase(t *testing.T) {
	b := Start(t)
	if !strings.HasPrefix(b.URL, "http://127.0.0.1:") || b.Port == 0 {
		t.Fatalf("URL %q, port %d", b.URL, b.Port)
	}
	status, body := b.Do(t, http.MethodGet, "/health", nil)
	if status != http.StatusOK || !healthConnected(body) || !strings.Contains(string(body), "C++ Queen Server") {
		t.Fatalf("/health: %d %s", status, body)
	}
	if q := b.Queues(t); len(q) != 0 {
		t.Fatalf("a fresh broker should list no queues (the port probe cleans up), got %q", q)
	}
	push(t, b, "harness-orders", 3)
	if n := b.CountMessages(t, "harness-orders"); n != 3 {
		t.Fatalf("stored %d messages, want 3", n)
	}
	if n := b.CountAllMessages(t); n != 3 {
		t.Fatalf("stored %d messages in all, want 3", n)
	}
	if q := b.Queues(t); len(q) != 1 || q[0] != "harness-orders" {
		t.Fatalf("queues %q", q)
	}
	var inPool int
	if err := b.Pool(t).QueryRow(t.Context(), `SELECT count(*) FROM queen.messages`).Scan(&inPool); err != nil || inPool != 3 {
		t.Fatalf("Pool sees %d messages, %v", inPool, err)
	}
}

func TestTwoBrokersShareNothing(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port == b.Port || a.DatabaseURL == b.DatabaseURL {
		t.Fatalf("two brokers on port %d/%d, databases %s / %s", a.Port, b.Port, a.DatabaseURL, b.DatabaseURL)
	}
	push(t, a, "only-in-a", 2)
	if n := a.CountMessages(t, "only-in-a"); n != 2 {
		t.Fatalf("a stored %d, want 2", n)
	}
	if n := b.CountAllMessages(t); n != 0 {
		t.Fatalf("b stored %d messages pushed to a", n)
	}
}

func TestKillThenStartAgainOnTheSameData(t *testing.T) {
	db := pgtest.NewDatabase(t)
	first := StartWith(t, Options{DatabaseURL: db})
	push(t, first, "survives", 1)
	first.Kill()
	select {
	case <-first.Exited():
	default:
		t.Fatal("Kill returned before the broker exited")
	}
	if first.ExitError() == nil {
		t.Fatal("a killed broker should report a non-zero exit")
	}
	if _, err := http.Get(first.URL + "/health"); err == nil {
		t.Fatal("the killed broker still answers")
	}
	first.Stop() // harmless after Kill

	second := StartWith(t, Options{DatabaseURL: db})
	if n := second.CountMessages(t, "survives"); n != 1 {
		t.Fatalf("after a restart the broker has %d messages, want 1", n)
	}
	second.Stop()
	if second.ExitError() != nil {
		t.Logf("exit after SIGTERM: %v", second.ExitError())
	}
	select {
	case <-second.Exited():
	case <-time.After(time.Second):
		t.Fatal("Stop returned before the broker exited")
	}
}

// A second broker started on the same port (as another checkout's tests may
// do) must be caught by the proof of ownership, not silently shared.
func TestASharedPortIsCaught(t *testing.T) {
	mine := Start(t)
	if err := mine.proveOwnPort(t); err != nil {
		t.Fatalf("alone on its port: %v", err)
	}
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	otherDB := pgtest.NewDatabase(t)
	pgEnv, err := postgresEnv(otherDB)
	if err != nil {
		t.Fatal(err)
	}
	intruder, err := launch(t, dir, otherDB, mine.Port, pgEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(intruder.Kill)
	// Its /health may be answered by mine: wait until it listens too.
	deadline := time.Now().Add(30 * time.Second)
	for {
		inodes, err := listeningInodes(mine.Port)
		if err != nil {
			t.Fatal(err)
		}
		if len(inodes) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the intruder never listened on port %d:\n%s", mine.Port, intruder.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var shared *sharedPortError
	if err := mine.proveOwnPort(t); !errors.As(err, &shared) {
		t.Fatalf("with a second broker on port %d, proveOwnPort = %v, want a shared-port error", mine.Port, err)
	}
	if err := intruder.proveOwnPort(t); !errors.As(err, &shared) {
		t.Fatalf("the intruder's proveOwnPort = %v, want a shared-port error", err)
	}
}
