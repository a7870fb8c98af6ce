package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestDeleteStopsPushesInFlight: the first step of a cluster delete stops
// what the gateway had admitted, not only what comes after it. A push whose
// body is still arriving when the delete starts is refused once it is in,
// and nothing of it reaches the broker; a push already on its way to the
// broker holds the first step until its exchange has ended, so that the
// purge (step 2) finds it. After --purged nothing of the cluster's is left.
func TestDeleteStopsPushesInFlight(t *testing.T) {
	db := pgtest.NewDatabase(t)
	cp := newControlPlane(t, db)
	broker, brokerURL := startFakeBroker(t, fakebroker.Options{Name: "slow-cell"})
	cell := cp.cell("slow-cell", brokerURL, "")
	slow := cp.cluster(cp.tenant("slow"), "slow", cell)
	_, key := cp.key(slow.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, db, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), ""))
	c := client(port)
	pushURL := fmt.Sprintf("http://slow.eu1.example.test:%d/api/v1/push", port)
	if r := do(t, c, "POST", pushURL, key, `{"items":[{"queue":"warmup","payload":{}}]}`); r.status != http.StatusOK {
		t.Fatalf("warm-up push: %d %s", r.status, r.body)
	}
	purge := func(queue string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodDelete, brokerURL+"/api/v1/resources/queues/"+queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-queen-tenant", slow.brokerTenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("purging queue %s: %d", queue, resp.StatusCode)
		}
	}
	purge("warmup")
	q := cliFor(t)(db)

	// A push whose head is in and whose body is not.
	body := `{"items":[{"queue":"late","payload":{"secret":"arrived after the delete began"}}]}`
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := len(body) / 2
	if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: slow.eu1.example.test\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the gateway has the head and is reading the body

	// A push on its way to the broker, whose answer takes 4 s.
	broker.SetAnswerFault(fakebroker.AnswerFault{Path: "/api/v1/push", HeadDelay: 4 * time.Second})
	var wg sync.WaitGroup
	var sentAnswered time.Time
	var sent response
	wg.Go(func() {
		sent = do(t, c, "POST", pushURL, key, `{"items":[{"queue":"sent","payload":{"v":1}}]}`)
		sentAnswered = time.Now()
	})
	eventually(t, 5*time.Second, func() error {
		for _, r := range broker.Requests() {
			if r.Path == "/api/v1/push" && strings.Contains(string(r.Body), `"sent"`) {
				return nil
			}
		}
		return fmt.Errorf("the second push has not reached the broker")
	})

	// Step 1 waits for the push on its way.
	q.ok(t, "cluster", "delete", "slow")
	stepOneDone := time.Now()
	wg.Wait()
	broker.SetAnswerFault(fakebroker.AnswerFault{})
	if sent.status != http.StatusOK {
		t.Fatalf("the push on its way when the delete began: %d %s", sent.status, sent.body)
	}
	if stepOneDone.Before(sentAnswered) {
		t.Fatalf("step 1 returned %s before the push it had admitted was answered", sentAnswered.Sub(stepOneDone))
	}

	// The rest of the slow body: refused, and nothing reaches the broker.
	if _, err := conn.Write([]byte(body[half:])); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the push whose body arrived after the delete began: %d, want 403", resp.StatusCode)
	}
	for _, r := range broker.Requests() {
		if strings.Contains(string(r.Body), `"late"`) {
			t.Fatalf("the slow push reached the broker: %s %s", r.Method, r.Path)
		}
	}

	// Step 2, the purge: what step 1 waited for is there to purge.
	names := broker.QueueNames(slow.brokerTenant)
	if strings.Join(names, ",") != "sent" {
		t.Fatalf("the cluster's queues after step 1: %v, want [sent]", names)
	}
	purge("sent")
	q.ok(t, "cluster", "delete", "slow", "--purged")
	time.Sleep(200 * time.Millisecond)
	if names := broker.QueueNames(slow.brokerTenant); len(names) != 0 {
		t.Fatalf("the deleted cluster's queues on the broker after --purged: %v", names)
	}
}
