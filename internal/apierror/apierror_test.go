package apierror

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

func TestWriteEnvelope(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, &Error{Status: 429, Code: RateLimited, Message: "request \"rate\"\n limit", RetryAfter: 3}, "0190abc")
	if rec.Code != 429 {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "3" {
		t.Fatalf("retry-after %q", ra)
	}
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	want := map[string]string{"error": "request \"rate\"\n limit", "code": "rate_limited", "request_id": "0190abc"}
	if len(body) != len(want) {
		t.Fatalf("body %v", body)
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("%s = %q, want %q", k, body[k], v)
		}
	}
	rec = httptest.NewRecorder()
	Write(rec, &Error{Status: 421, Code: ClusterUnknown, Message: "no cluster for this host"}, "x")
	if rec.Header().Get("Retry-After") != "" {
		t.Error("Retry-After must only be sent when set")
	}
}
