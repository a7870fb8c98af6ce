package caddymodule

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The batch workloads of `go run ./bench -mode batch`, in process: the
// plugin's own work for a push of 100 items of 100 bytes, of 1,000 items
// of 1 KiB, and a pop of 100 messages, each answered as the broker does
// and relayed as reverse_proxy relays it (so the error scrub and the kept
// copy of an answer do the work they do in front of a cell).

// batchPushBody is a push of items messages of about payload bytes each,
// spelled as the load generator spells them.
func batchPushBody(items, payload int) string {
	filler := strings.Repeat("x", max(1, payload-36))
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"orders","payload":{"worker":3,"seq":%d,"data":%q}}`, i, filler)
	}
	b.WriteString(`]}`)
	return b.String()
}

func batchPushAnswer(items int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d,"message_id":"019a8c6e-5b2f-7c3a-9d41-%012x","partition_id":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"3c9e1f7a-2b4d-4e6f-8a0c-%012x"}`, i, i, i)
	}
	b.WriteByte(']')
	return b.String()
}

// batchPopAnswers returns the answer of the nth pop of batch messages,
// each message new (so the redelivery filter records every one).
func batchPopAnswer(n, batch int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[`)
	for i := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		seq := n*batch + i
		fmt.Fprintf(&b, `{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-30T07:00:00.000000Z","data":{"seq":%d,"data":"%s"},"id":"019a8c6e-5b2f-7c3a-9d41-%012x","leaseId":null,"partition":"Default","partitionId":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","producerSub":null,"traceId":null,"transactionId":"3c9e1f7a-2b4d-4e6f-8a0c-%012x"}`,
			seq, strings.Repeat("x", 64), seq, seq)
	}
	b.WriteString(`],"partition":"Default","partitionId":"7d3f0a52-9c1e-4b8a-8f2d-6e1c4a9b0d3e","partitionsClaimed":1,"queue":"orders","success":true}`)
	return b.Bytes()
}

// relayedAnswer writes a broker's answer as reverse_proxy relays it: the
// cell's Content-Type and Content-Length copied into the client's header,
// then the body in pieces of reverse_proxy's 32 KiB copy buffer.
func relayedAnswer(w http.ResponseWriter, status int, body []byte) error {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	for len(body) > 0 {
		n := min(len(body), relayPiece)
		if _, err := w.Write(body[:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

const relayPiece = 32 << 10

// transportCell is a cell reading the forwarded body to its end and
// closing it first, as reverse_proxy's transport does (which gives the
// gateway's body buffer back to its pool), then answering as relayed.
func transportCell(status int, answer string) caddyhttp.Handler {
	body := []byte(answer)
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		if r.Body != nil {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return err
			}
			_ = r.Body.Close()
		}
		return relayedAnswer(w, status, body)
	})
}

func benchmarkBatchPush(b *testing.B, items, payload int) {
	env := newBenchEnv(b)
	env.g.MaxBodyBytes = 16 << 20 // the default; the test gateway's is 1 MiB
	body := batchPushBody(items, payload)
	req := newBenchRequest("POST", "/api/v1/push", body)
	w := &discardWriter{h: http.Header{}}
	next := transportCell(http.StatusOK, batchPushAnswer(items))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	loopReportingCPU(b, func() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	})
}

func BenchmarkPipelinePush100x100B(b *testing.B) { benchmarkBatchPush(b, 100, 100) }
func BenchmarkPipelinePush1000x1KB(b *testing.B) { benchmarkBatchPush(b, 1000, 1024) }

// BenchmarkPipelinePop100 is a pop of 100 new messages: billed, each one
// remembered by the redelivery filter, taken from the bucket.
func BenchmarkPipelinePop100(b *testing.B) {
	env := newBenchEnv(b)
	req := newBenchRequest("GET", "/api/v1/pop/queue/orders?batch=100&autoAck=true", "")
	w := &discardWriter{h: http.Header{}}
	answers := make([][]byte, 64)
	for i := range answers {
		answers[i] = batchPopAnswer(i, 100)
	}
	n := 0
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		n++
		return relayedAnswer(w, http.StatusOK, answers[(n-1)%len(answers)])
	})
	b.SetBytes(int64(len(answers[0])))
	b.ReportAllocs()
	loopReportingCPU(b, func() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	})
}

// kvBatchBody is a KV batch of ops puts of about value bytes each, in the
// Kafka facade's key space (a carve-out) or in a namespace of the tenant's.
func kvBatchBody(ops, value int, carveOut bool) string {
	ns, prefix := "sessions", ""
	if carveOut {
		ns, prefix = "queen-kafka", "qk:"
	}
	filler := strings.Repeat("v", max(1, value-2))
	var b strings.Builder
	b.WriteString(`{"operations":[`)
	for i := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ns":%q,"op":"put","key":"%sgroup/orders/%d","value":%q}`, ns, prefix, i, filler)
	}
	b.WriteString(`]}`)
	return b.String()
}

// benchmarkKVBatch is a KV batch of 100 puts of 100 bytes: the batch read
// for the carve-out, the push block's verdict and the size caps.
func benchmarkKVBatch(b *testing.B, carveOut bool) {
	env := newBenchEnv(b)
	env.cluster.Features.KV = true
	body := kvBatchBody(100, 100, carveOut)
	req := newBenchRequest("POST", "/api/v1/kv", body)
	w := &discardWriter{h: http.Header{}}
	next := transportCell(http.StatusOK, `{"results":[]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	loopReportingCPU(b, func() {
		if err := env.g.ServeHTTP(w.reset(), req.reset(), next); err != nil || w.status != http.StatusOK {
			b.Fatalf("status %d, %v", w.status, err)
		}
	})
}

func BenchmarkPipelineKVBatch100(b *testing.B)         { benchmarkKVBatch(b, false) }
func BenchmarkPipelineKVCarveOutBatch100(b *testing.B) { benchmarkKVBatch(b, true) }
