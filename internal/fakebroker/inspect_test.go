package fakebroker

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMissingPayloadIsStoredAsAnEmptyObject: like the real broker, an item
// without payload is stored (and popped) as {}, while an explicit null
// stays null.
func TestMissingPayloadIsStoredAsAnEmptyObject(t *testing.T) {
	b := New(Options{})
	call := func(method, path, body string) string {
		t.Helper()
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		b.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
		}
		return w.Body.String()
	}
	call("POST", "/api/v1/push", `{"items":[{"queue":"mp"},{"queue":"mp","payload":null}]}`)
	got := call("GET", "/api/v1/pop/queue/mp?batch=2&autoAck=true", "")
	if !strings.Contains(got, `"data":{}`) || !strings.Contains(got, `"data":null`) {
		t.Fatalf("popped %s, want one {} and one null payload", got)
	}
	if names := b.QueueNames(""); len(names) != 1 || names[0] != "mp" {
		t.Fatalf("queues %v", names)
	}
}
