package meter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// benchMeter returns a Meter whose pool is never used (pgxpool connects
// lazily), with 100 clusters' keys already present.
func benchMeter(b *testing.B) (*Meter, []string) {
	b.Helper()
	pool, err := pgxpool.New(b.Context(), "postgres://bench@127.0.0.1:1/bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	m, err := New(Config{Pool: pool, SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		m.Record(Sample{ClusterID: ids[i], Op: OpPush, Reqs: 1})
	}
	return m, ids
}

// running starts m.Run, as the gateway does, for the benchmark's length.
func running(b *testing.B, m *Meter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	for !m.coarseOn.Load() {
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkRecord is the metering cost of one proxied push on an existing
// (cluster, op, minute) key, with the real clock and Run running.
func BenchmarkRecord(b *testing.B) {
	m, ids := benchMeter(b)
	running(b, m)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Record(Sample{ClusterID: ids[i%len(ids)], Op: OpPush, Reqs: 1, Msgs: 10, BytesIn: 1200, BytesOut: 600})
	}
}

// BenchmarkRecordWithoutRun is Record before Run started or after it
// returned: it reads the clock itself.
func BenchmarkRecordWithoutRun(b *testing.B) {
	m, ids := benchMeter(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Record(Sample{ClusterID: ids[i%len(ids)], Op: OpPush, Reqs: 1, Msgs: 10, BytesIn: 1200, BytesOut: 600})
	}
}

// BenchmarkRecordParallel records from every P at once across 100 clusters.
func BenchmarkRecordParallel(b *testing.B) {
	m, ids := benchMeter(b)
	running(b, m)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Record(Sample{ClusterID: ids[i%len(ids)], Op: OpPush, Reqs: 1, Msgs: 10, BytesIn: 1200, BytesOut: 600})
			i++
		}
	})
}

// BenchmarkBillPush is the body check of a 10-item push answer.
func BenchmarkBillPush(b *testing.B) {
	body := []byte(`[`)
	for i := 0; i < 10; i++ {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, fmt.Sprintf(`{"index":%d,"message_id":"01a22ac0-e963-7000-986d-86e1125b9970","partition_id":"9827ba6f-7345-4942-8385-39c3bcb79254","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"tx-%d"}`, i, i)...)
	}
	body = append(body, ']')
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		if BillPush(200, body) != 10 {
			b.Fatal("miscounted")
		}
	}
}

// BenchmarkRequestTallyRecord is the per-request cost of the console's
// request counts, next to BenchmarkRecord (the usage meter) in one run.
func BenchmarkRequestTallyRecord(b *testing.B) {
	_, ids := benchMeter(b)
	pool, err := pgxpool.New(b.Context(), "postgres://bench@127.0.0.1:1/bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	tally := NewRequestTally(pool, nil, nil)
	runningTally(b, tally)
	keys := []string{"", "1c2d0000-0000-4000-8000-000000000001", "1c2d0000-0000-4000-8000-000000000002"}
	for _, id := range ids {
		for _, k := range keys {
			tally.Record(id, k, 200)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tally.Record(ids[i%len(ids)], keys[i%len(keys)], 200)
	}
}

// BenchmarkRequestTallyRecordParallel records from every P at once.
func BenchmarkRequestTallyRecordParallel(b *testing.B) {
	_, ids := benchMeter(b)
	pool, err := pgxpool.New(b.Context(), "postgres://bench@127.0.0.1:1/bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	tally := NewRequestTally(pool, nil, nil)
	runningTally(b, tally)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tally.Record(ids[i%len(ids)], "", 200)
			i++
		}
	})
}

// runningTally runs the tally (its writes fail: the pool reaches no
// database) so that Record takes the minute from its ticker, as in a
// gateway.
func runningTally(b *testing.B, tally *RequestTally) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tally.Run(ctx, time.Hour); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	for !tally.coarseOn.Load() {
		time.Sleep(time.Millisecond)
	}
}
