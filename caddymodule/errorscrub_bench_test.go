package caddymodule

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

var nopLogger = zap.NewNop()

// jsonCell answers like the broker does: JSON with a Content-Length, so
// that the error scrub holds and inspects the answer.
func jsonCell(status int, answer string) caddyhttp.Handler {
	body := []byte(answer)
	length := []string{strconv.Itoa(len(body))}
	ct := []string{"application/json"}
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = ct, length
		w.WriteHeader(status)
		_, err := w.Write(body)
		return err
	})
}

// BenchmarkPipelinePopJSONAnswer is BenchmarkPipelinePop with the answer
// typed and sized as the broker sends it, the case the error scrub looks
// at: the pop stage's cost with the scrub on the path.
func BenchmarkPipelinePopJSONAnswer(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("GET", "/api/v1/pop/queue/orders?batch=1&autoAck=true", "")
	w := &discardWriter{h: http.Header{}}
	next := jsonCell(http.StatusOK, benchPopAnswer)
	b.ReportAllocs()
	for b.Loop() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	}
}

// benchScrub runs one answer through the error scrub alone.
func benchScrub(b *testing.B, answer string) {
	body := []byte(answer)
	length := []string{strconv.Itoa(len(body))}
	ct := []string{"application/json"}
	w := &discardWriter{h: http.Header{}}
	r, _ := http.NewRequest("GET", "/api/v1/pop/queue/orders", nil)
	var s cellErrorScrub
	rid := "rid"
	b.ReportAllocs()
	for b.Loop() {
		out := s.attach(w.reset(), r, nopLogger, &rid)
		h := out.Header()
		h["Content-Type"], h["Content-Length"] = ct, length
		out.WriteHeader(http.StatusOK)
		if _, err := out.Write(body); err != nil {
			b.Fatal(err)
		}
		s.finish()
	}
}

// BenchmarkStageScrubPopAnswer: a pop answer with a message, the common
// case (no error field: one substring scan).
func BenchmarkStageScrubPopAnswer(b *testing.B) { benchScrub(b, benchPopAnswer) }

// BenchmarkStageScrubEmptyPop: an empty pop ({"error":"no_available_partition",...}),
// which has an error field and is decoded to read it.
func BenchmarkStageScrubEmptyPop(b *testing.B) {
	benchScrub(b, `{"error":"no_available_partition","messages":[],"success":false}`)
}
