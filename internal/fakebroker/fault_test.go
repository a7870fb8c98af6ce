package fakebroker

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func pushOnce(t *testing.T, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", url+"/api/v1/push",
		strings.NewReader(`{"items":[{"queue":"q","payload":1},{"queue":"q","payload":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return (&http.Transport{}).RoundTrip(req)
}

// Each fault lets the push commit first, then holds, cuts or drops the
// answer.
func TestAnswerFaults(t *testing.T) {
	b, url := startBroker(t, Options{})

	b.SetAnswerFault(AnswerFault{Path: "/api/v1/push", HeadDelay: 300 * time.Millisecond})
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		resp, err := pushOnce(t, url)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if n := b.StoredMessages(""); n != 2 {
		t.Fatalf("stored %d while the answer is held, want 2", n)
	}
	if err := <-done; err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("delayed answer: %v after %v", err, time.Since(start))
	}

	b.SetAnswerFault(AnswerFault{Reset: true})
	if resp, err := pushOnce(t, url); err == nil {
		resp.Body.Close()
		t.Fatalf("reset fault answered %d", resp.StatusCode)
	}
	if n := b.StoredMessages(""); n != 4 {
		t.Fatalf("stored %d after the reset, want 4", n)
	}

	b.SetAnswerFault(AnswerFault{CutBody: true, BodyDelay: 50 * time.Millisecond})
	resp, err := pushOnce(t, url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("cut answer: status %d, %d bytes, %v; want 200, half a body, an error", resp.StatusCode, len(body), err)
	}

	b.SetAnswerFault(AnswerFault{})
	resp, err = pushOnce(t, url)
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(body), `"queued"`) {
		t.Fatalf("answer after the fault was removed: %v %s", err, body)
	}
}
