package meter

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/threadcpu"
)

// proxyPiece is the size of the pieces reverse_proxy writes an answer in
// (its copy buffer), as the tallies see it.
const proxyPiece = 32 << 10

// benchAgainstValid times read against encoding/json.Valid on the same
// body, in interleaved blocks of the same benchmark run, and reports the
// median of the blocks' throughput ratios (x-vs-json.Valid) beside both
// rates. The machine is shared, so only a ratio says anything; the blocks
// are timed in the CPU time of the benchmark's thread, which a neighbour
// taking the core does not inflate (x-wall is the same ratio in wall
// time), and the median keeps an odd block from deciding it.
func benchAgainstValid(b *testing.B, body []byte, read func([]byte)) {
	if !json.Valid(body) {
		b.Fatal("the benchmark body is not valid JSON")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	block := max(1, (64<<10)/len(body)) // runs per timed block
	var p threadcpu.Paired
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(block, b.N-done)
		p.Block(func() {
			for range n {
				if !json.Valid(body) {
					b.Fatal("invalid")
				}
			}
		}, func() {
			for range n {
				read(body)
			}
		})
		done += n
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(len(body)) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(p.Base), "valid-MB/s")
	b.ReportMetric(mbps(p.Subject), "tally-MB/s")
	b.ReportMetric(p.WallRatio(), "x-wall")
	b.ReportMetric(p.Ratio(), "x-vs-json.Valid")
}

// inPieces writes body to w as the proxy does.
func inPieces(w interface{ Write([]byte) (int, error) }, body []byte) {
	for len(body) > 0 {
		n := min(proxyPiece, len(body))
		_, _ = w.Write(body[:n])
		body = body[n:]
	}
}

var answerSizes = []int{1, 100, 1000}

func BenchmarkAnswerPushTally(b *testing.B) {
	for _, n := range answerSizes {
		body := pushAnswer(n)
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			t := NewPushTally()
			benchAgainstValid(b, body, func(body []byte) {
				t.Reset()
				inPieces(t, body)
				if t.Outcome(200).Accepted != int64(n) {
					b.Fatal("miscounted")
				}
			})
		})
	}
}

func BenchmarkAnswerTxnTally(b *testing.B) {
	for _, n := range answerSizes {
		body := txnAnswer(n)
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			t := NewTxnTally()
			benchAgainstValid(b, body, func(body []byte) {
				t.Reset()
				inPieces(t, body)
				if t.Billed(200, n+5) != int64(n+5) {
					b.Fatal("miscounted")
				}
			})
		})
	}
}

// BenchmarkAnswerPop is BillPop, what bills every pop answer up to
// MaxBilledBody (with the keys of the redelivery filter).
func BenchmarkAnswerPop(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, n := range answerSizes {
			body := popAnswerBody(n, size)
			b.Run(fmt.Sprintf("payload=%dB/items=%d", size, n), func(b *testing.B) {
				benchAgainstValid(b, body, func(body []byte) {
					if got, ids := BillPop(200, body); got != int64(n) || len(ids) != n {
						b.Fatal("miscounted")
					}
				})
			})
		}
	}
}

// BenchmarkAnswerPopAnswer is what the gateway bills a kept pop answer
// with: ReadPopAnswer, then every redelivery key spelled once, as the
// redelivery filter takes them.
func BenchmarkAnswerPopAnswer(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, n := range answerSizes {
			body := popAnswerBody(n, size)
			b.Run(fmt.Sprintf("payload=%dB/items=%d", size, n), func(b *testing.B) {
				var key []byte
				benchAgainstValid(b, body, func(body []byte) {
					a := ReadPopAnswer(200, body)
					if a.Messages() != int64(n) || a.Keys() != n {
						b.Fatal("miscounted")
					}
					for i := range a.Keys() {
						key = a.AppendKey(key[:0], i)
					}
					a.Release()
				})
			})
		}
	}
}

// BenchmarkAnswerPopKeys is the count and keys of a pop answer past
// MaxBilledBody, read as it streams.
func BenchmarkAnswerPopKeys(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, n := range answerSizes {
			body := popAnswerBody(n, size)
			b.Run(fmt.Sprintf("payload=%dB/items=%d", size, n), func(b *testing.B) {
				benchAgainstValid(b, body, func(body []byte) {
					p := NewPopKeys()
					inPieces(p, body)
					if got, _ := p.Result(200); got != int64(n) {
						b.Fatal("miscounted")
					}
				})
			})
		}
	}
}

// BenchmarkAnswerScanOnly is the reader alone on the largest answers,
// for profiles.
func BenchmarkAnswerScanOnly(b *testing.B) {
	for name, body := range map[string][]byte{"push": pushAnswer(1000), "pop1k": popAnswerBody(100, 1000)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			t := NewPushTally()
			for range b.N {
				t.Reset()
				_, _ = t.Write(body)
			}
		})
	}
}

// BenchmarkAnswerOracle is the readers as they were before answerScan
// (oracle_test.go), on the same answers, for the before-and-after figures
// of docs/benchmarks.md.
func BenchmarkAnswerOracle(b *testing.B) {
	for _, n := range answerSizes {
		push, txn, pop := pushAnswer(n), txnAnswer(n), popAnswerBody(n, 1000)
		b.Run(fmt.Sprintf("push/items=%d", n), func(b *testing.B) {
			benchAgainstValid(b, push, func(body []byte) {
				t := oldNewPushTally()
				inPieces(t, body)
				if t.Outcome(200).Accepted != int64(n) {
					b.Fatal("miscounted")
				}
			})
		})
		b.Run(fmt.Sprintf("transaction/items=%d", n), func(b *testing.B) {
			benchAgainstValid(b, txn, func(body []byte) {
				t := oldNewTxnTally()
				inPieces(t, body)
				if t.Billed(200, n+5) != int64(n+5) {
					b.Fatal("miscounted")
				}
			})
		})
		b.Run(fmt.Sprintf("pop/payload=1000B/items=%d", n), func(b *testing.B) {
			benchAgainstValid(b, pop, func(body []byte) {
				if got, _ := oldBillPop(200, body); got != int64(n) {
					b.Fatal("miscounted")
				}
			})
		})
		b.Run(fmt.Sprintf("popcount/payload=1000B/items=%d", n), func(b *testing.B) {
			benchAgainstValid(b, pop, func(body []byte) {
				p := oldNewPopCount()
				inPieces(p, body)
				if p.Messages(200) != int64(n) {
					b.Fatal("miscounted")
				}
			})
		})
	}
}
