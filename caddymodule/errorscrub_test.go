package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/queengate/queengate/meter"
)

var testRID = "rid-1"

const sqlLeak = `{"error":"ERROR:  invalid input syntax for type uuid: \"p1\"\nCONTEXT:  PL/pgSQL function queen.ack_messages_v2(jsonb) line 14 at FOR over SELECT rows\n","success":false}`

// scrubThrough writes an answer into a scrub the way reverse_proxy does:
// the headers, the status, the body in the given pieces.
func scrubThrough(t *testing.T, method, contentType string, status int, contentLength int, pieces ...string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	var s cellErrorScrub
	w := s.attach(rec, httptest.NewRequest(method, "/api/v1/ack", nil), zap.NewNop(), &testRID)
	if contentType != "" {
		w.Header().Set("Content-Type", contentType)
	}
	if contentLength >= 0 {
		w.Header().Set("Content-Length", strconv.Itoa(contentLength))
	}
	w.WriteHeader(status)
	for _, p := range pieces {
		if n, err := w.Write([]byte(p)); err != nil || n != len(p) {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	s.finish()
	return rec
}

// openJSONAnswer attaches s for a request of method to target and starts a
// JSON answer of status through it, of contentLength bytes (none when
// negative), as reverse_proxy starts one.
func openJSONAnswer(rec *httptest.ResponseRecorder, s *cellErrorScrub, method, target string, status, contentLength int) http.ResponseWriter {
	w := s.attach(rec, httptest.NewRequest(method, target, nil), zap.NewNop(), &testRID)
	w.Header().Set("Content-Type", "application/json")
	if contentLength >= 0 {
		w.Header().Set("Content-Length", strconv.Itoa(contentLength))
	}
	w.WriteHeader(status)
	return w
}

func assertWithheld(t *testing.T, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	var env map[string]string
	if rec.Code != status || json.Unmarshal(rec.Body.Bytes(), &env) != nil ||
		env["code"] != "internal_error" || env["request_id"] != "rid-1" || !strings.Contains(env["error"], "withheld") {
		t.Fatalf("%d %s, want %d with the envelope", rec.Code, rec.Body, status)
	}
	if rec.Header().Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
		t.Fatalf("Content-Length %q for %d bytes", rec.Header().Get("Content-Length"), rec.Body.Len())
	}
	if strings.Contains(rec.Body.String(), "PL/pgSQL") || strings.Contains(rec.Body.String(), "ERROR:") {
		t.Fatalf("internals still relayed: %s", rec.Body)
	}
}

func TestCellErrorScrub(t *testing.T) {
	t.Run("200 with SQL text, in one write", func(t *testing.T) {
		assertWithheld(t, scrubThrough(t, "POST", "application/json", 200, len(sqlLeak), sqlLeak), 200)
	})
	t.Run("500 with SQL text, in pieces", func(t *testing.T) {
		assertWithheld(t, scrubThrough(t, "POST", "application/json; charset=utf-8", 500, len(sqlLeak), sqlLeak[:10], sqlLeak[10:40], sqlLeak[40:]), 500)
	})
	t.Run("400 with SQL text, no Content-Length", func(t *testing.T) {
		assertWithheld(t, scrubThrough(t, "POST", "application/json", 400, -1, sqlLeak[:7], sqlLeak[7:]), 400)
	})
	kept := []struct {
		name, method, ct string
		status           int
		body             string
	}{
		{"the broker's own validation message", "POST", "application/json", 400, `{"error":"queue is required"}`},
		{"an empty pop", "GET", "application/json", 200, `{"error":"no_available_partition","messages":[],"success":false}`},
		{"a pop with an SQL-looking payload", "GET", "application/json", 200, `{"messages":[{"data":"ERROR:  PL/pgSQL"}],"success":true}`},
		{"not JSON", "GET", "text/html", 404, `<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>`},
		{"no content type", "GET", "", 500, `ERROR:  relation does not exist`},
	}
	for _, tc := range kept {
		t.Run(tc.name, func(t *testing.T) {
			rec := scrubThrough(t, tc.method, tc.ct, tc.status, len(tc.body), tc.body)
			if rec.Code != tc.status || rec.Body.String() != tc.body {
				t.Fatalf("%d %q, want %d %q unchanged", rec.Code, rec.Body, tc.status, tc.body)
			}
		})
	}
	t.Run("HEAD is not held", func(t *testing.T) {
		rec := scrubThrough(t, "HEAD", "application/json", 500, len(sqlLeak))
		if rec.Code != 500 || rec.Body.Len() != 0 {
			t.Fatalf("%d %q", rec.Code, rec.Body)
		}
	})
	t.Run("a large answer streams", func(t *testing.T) {
		big := `{"messages":[` + strings.Repeat(`{"data":1},`, maxInspectedAnswer/11+10) + `{}],"success":true}`
		rec := httptest.NewRecorder()
		var s cellErrorScrub
		w := openJSONAnswer(rec, &s, "GET", "/api/v1/pop/queue/q", 200, len(big))
		if _, err := w.Write([]byte(big[:100])); err != nil {
			t.Fatal(err)
		}
		if rec.Body.Len() != 100 {
			t.Fatalf("an answer over %d bytes was held: %d bytes relayed", maxInspectedAnswer, rec.Body.Len())
		}
		_, _ = w.Write([]byte(big[100:]))
		s.finish()
		if rec.Body.String() != big {
			t.Fatal("large answer changed")
		}
	})
	t.Run("a flush while held sends nothing early", func(t *testing.T) {
		rec := httptest.NewRecorder()
		var s cellErrorScrub
		w := s.attach(rec, httptest.NewRequest("POST", "/api/v1/ack", nil), zap.NewNop(), &testRID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(sqlLeak[:20]))
		if err := http.NewResponseController(w).Flush(); err != nil || rec.Flushed {
			t.Fatalf("flush while held: %v, flushed %v", err, rec.Flushed)
		}
		_, _ = w.Write([]byte(sqlLeak[20:]))
		s.finish()
		assertWithheld(t, rec, 200)
	})
}

// keptThrough is scrubThrough behind a copy that keeps every byte, as the
// metered response keeps a pop's answer: the scrub holds the answer in
// that copy, not in one of its own.
func keptThrough(t *testing.T, status int, contentLength int, pieces ...string) (*httptest.ResponseRecorder, *cellErrorScrub) {
	t.Helper()
	rec := httptest.NewRecorder()
	s := new(cellErrorScrub)
	var kept []byte
	w := openJSONAnswer(rec, s, "GET", "/api/v1/pop/queue/q", status, contentLength)
	s.holdInKept(&kept, nil)
	for _, p := range pieces {
		if n, err := w.Write([]byte(p)); err != nil || n != len(p) {
			t.Fatalf("write: %d, %v", n, err)
		}
		kept = append(kept, p...)
	}
	s.finish()
	return rec, s
}

func TestCellErrorScrubHoldsInTheKeptCopy(t *testing.T) {
	t.Run("SQL text in pieces is withheld", func(t *testing.T) {
		rec, s := keptThrough(t, 200, len(sqlLeak), sqlLeak[:10], sqlLeak[10:40], sqlLeak[40:])
		assertWithheld(t, rec, 200)
		if s.buf != nil {
			t.Fatal("the scrub took a buffer of its own")
		}
	})
	t.Run("SQL text, no Content-Length", func(t *testing.T) {
		rec, _ := keptThrough(t, 500, -1, sqlLeak[:7], sqlLeak[7:])
		assertWithheld(t, rec, 500)
	})
	t.Run("a normal pop in pieces is relayed unchanged", func(t *testing.T) {
		pop := `{"messages":[{"data":{"note":"ERROR:  SELECT * FROM x"},"id":"1"}],"success":true}`
		rec, _ := keptThrough(t, 200, len(pop), pop[:5], pop[5:30], pop[30:])
		if rec.Code != 200 || rec.Body.String() != pop {
			t.Fatalf("%d %q", rec.Code, rec.Body)
		}
	})
	t.Run("a large answer streams from where it passes the bound", func(t *testing.T) {
		big := `{"messages":[` + strings.Repeat(`{"data":1},`, maxInspectedAnswer/11+10) + `{}],"success":true}`
		rec := httptest.NewRecorder()
		var s cellErrorScrub
		var kept []byte
		w := openJSONAnswer(rec, &s, "GET", "/api/v1/pop/queue/q", 200, len(big))
		s.holdInKept(&kept, nil)
		for _, p := range []string{big[:100], big[100 : maxInspectedAnswer-10], big[maxInspectedAnswer-10 : maxInspectedAnswer+10], big[maxInspectedAnswer+10:]} {
			if rec.Body.Len() != 0 && rec.Body.Len() != len(kept) {
				t.Fatalf("relayed %d bytes of %d", rec.Body.Len(), len(kept))
			}
			_, _ = w.Write([]byte(p))
			kept = append(kept, p...)
		}
		s.finish()
		if rec.Body.String() != big {
			t.Fatal("large answer changed")
		}
	})
}

// An answer that opens no object cannot expose anything the scrub judges:
// it streams from its first piece, even one that carries per-item SQL
// text.
func TestCellErrorScrubStreamsArrays(t *testing.T) {
	answer := `[{"error":"ERROR:  per-item text is left alone","index":0,"success":false},{"index":1,"status":"queued"}]`
	rec := httptest.NewRecorder()
	var s cellErrorScrub
	w := openJSONAnswer(rec, &s, "POST", "/api/v1/push", 200, len(answer))
	_, _ = w.Write([]byte(answer[:20]))
	if rec.Body.String() != answer[:20] {
		t.Fatalf("an array was held: %q relayed", rec.Body)
	}
	_, _ = w.Write([]byte(answer[20:]))
	s.finish()
	if rec.Code != 200 || rec.Body.String() != answer {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
}

// The pop billing's reading judges a pop answer held in its copy: the
// broker's envelope is relayed unsearched (and that reading is the one
// billed), anything else is searched as before.
func TestCellErrorScrubTakesThePopReading(t *testing.T) {
	through := func(t *testing.T, status int, answer string, piece int) (*httptest.ResponseRecorder, *meteredResponse) {
		t.Helper()
		rec := httptest.NewRecorder()
		s := new(cellErrorScrub)
		w := openJSONAnswer(rec, s, "GET", "/api/v1/pop/queue/q", status, len(answer))
		rw := &meteredResponse{started: true, status: status, keep: true, rule: billPop}
		s.holdInKept(&rw.body, rw)
		for rest := answer; len(rest) > 0; {
			p := rest[:min(piece, len(rest))]
			rest = rest[len(p):]
			if n, err := w.Write([]byte(p)); err != nil || n != len(p) {
				t.Fatalf("write: %d, %v", n, err)
			}
			rw.body = append(rw.body, p...)
		}
		s.finish()
		return rec, rw
	}
	t.Run("SQL text is withheld", func(t *testing.T) {
		rec, rw := through(t, 200, sqlLeak, 10)
		assertWithheld(t, rec, 200)
		if rw.pop != nil && rw.pop.BrokerShaped() {
			t.Fatal("an error answer read as the broker's envelope")
		}
	})
	t.Run("an error member after the messages is searched", func(t *testing.T) {
		answer := `{"consumerGroup":null,"leaseId":null,"messages":[],"error":"ERROR:  relation \"queen.x\" does not exist","success":false}`
		rec, _ := through(t, 200, answer, 7)
		assertWithheld(t, rec, 200)
	})
	t.Run("the broker's envelope is relayed, and billed from the same reading", func(t *testing.T) {
		answer := string(batchPopAnswer(3, 20))
		rec, rw := through(t, 200, answer, 1000)
		if rec.Code != 200 || rec.Body.String() != answer {
			t.Fatalf("%d, %d bytes, want the answer's %d", rec.Code, rec.Body.Len(), len(answer))
		}
		if rw.pop == nil || !rw.pop.BrokerShaped() {
			t.Fatal("the benchmark's pop answer was not read as the broker's envelope")
		}
		read := rw.pop
		if a := rw.popAnswer(200); a != read || a.Messages() != 20 || a.Keys() != 20 {
			t.Fatalf("billing read again (%v) or miscounted: %d messages, %d keys", a != read, a.Messages(), a.Keys())
		}
		n, ids := meter.BillPop(200, rw.body)
		var key []byte
		for i, id := range ids {
			if key = read.AppendKey(key[:0], i); string(key) != id || n != 20 {
				t.Fatalf("key %d: %q, BillPop's %q", i, key, id)
			}
		}
		rw.releasePop()
	})
}
