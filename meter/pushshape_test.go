package meter

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/threadcpu"
	"github.com/queengate/queengate/wire"
)

// TestPushShapeGuessesMatchOracle: an item read at the lengths the item
// before it had is read as the old tally reads it, whatever byte breaks
// the guess: every byte of the later items of a broker answer replaced by
// a quote, a backslash, a control byte, a non-ASCII byte, a brace or a
// plain letter, whole and in pieces.
func TestPushShapeGuessesMatchOracle(t *testing.T) {
	base := pushAnswer(3)
	second := bytes.IndexByte(base[1:], '{') + 1
	second = bytes.IndexByte(base[second+1:], '{') + second + 1 // the second item's '{'
	for at := second; at < len(base); at++ {
		for _, c := range []byte{'"', '\\', 0x1f, 0x80, '}', 'a', '0', ','} {
			if base[at] == c {
				continue
			}
			body := bytes.Clone(base)
			body[at] = c
			tallyAgreesWithOld(t, body, len(body), 7, 64)
		}
	}
}

// TestPushShapeLengthsChange: strings longer and shorter than the item
// before's, a trace id that is a string after null, and one that holds an
// escaped quote where the guess ends it, are counted as the old tally
// counts them.
func TestPushShapeLengthsChange(t *testing.T) {
	body := []byte(`[` +
		`{"index":0,"message_id":"0123456789abcdef0123","partition_id":"p","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"t-0123456789"},` +
		`{"index":1,"message_id":"0123456789abcdef012345678","partition_id":"pp","queueName":"orders-long-name","status":"buffered","trace_id":"0123456789abcdef","transaction_id":"t-01234"},` +
		`{"index":2,"message_id":"0123456789ab","partition_id":"p","queueName":"orders","status":"duplicate","trace_id":"0123456789abcdef","transaction_id":"t-0123456789"},` +
		`{"index":3,"message_id":"0123456789ab","partition_id":"p","queueName":"orders","status":"queued","trace_id":"0123456789abcde\"","transaction_id":"t-0123456789"}` +
		`]`)
	fixed := bytes.Replace(body, []byte(`abcde\"`), []byte(`abcdef`), 1)
	old := oldNewPushTally()
	_, _ = old.Write(fixed)
	if want := old.Outcome(200); want.Items != 4 || want.Accepted != 3 || want.Buffered != 1 {
		t.Fatalf("oracle %+v", want)
	}
	for _, b := range [][]byte{body, fixed} {
		tallyAgreesWithOld(t, b, len(b), 5, 40)
	}
}

// tallyAgreesWithOld fails t unless the push tally, fed body in pieces of
// each size, counts what the old tally counts from it whole.
func tallyAgreesWithOld(t *testing.T, body []byte, pieces ...int) {
	t.Helper()
	old := oldNewPushTally()
	_, _ = old.Write(body)
	want := old.Outcome(200)
	for _, n := range pieces {
		tally := NewPushTally()
		writeInPieces(tally, body, n)
		if got := tally.Outcome(200); got != want {
			t.Fatalf("%q in pieces of %d: %+v, the old tally %+v", body, n, got, want)
		}
	}
}

// BenchmarkPushShapeGuess times the items of a 1,000-item broker answer
// read by MatchShape and by MatchShapeGuessing, in turns, on the thread's CPU
// clock: old/new is how many times faster the guess is.
func BenchmarkPushShapeGuess(b *testing.B) {
	body := pushAnswer(1000)
	var scan wire.Stream
	var vals wire.ShapeValues
	var lens wire.ShapeLengths
	sh := pushShapes[0].shape
	walk := func(guess bool) {
		for i := 1; i < len(body); {
			end := -1
			if guess {
				end = wire.MatchShapeGuessing(sh, &lens, body, i, &vals)
			} else {
				end = scan.MatchShape(sh, body, i, 2, &vals)
			}
			if end < 0 {
				b.Fatal("an item of the answer did not match its shape")
			}
			i = end + 1
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var tOld, tNew time.Duration
	for b.Loop() {
		c0 := threadcpu.Now()
		walk(false)
		c1 := threadcpu.Now()
		walk(true)
		c2 := threadcpu.Now()
		tOld += c1 - c0
		tNew += c2 - c1
	}
	b.ReportMetric(float64(tOld)/float64(b.N)/1000, "old-ns/item")
	b.ReportMetric(float64(tNew)/float64(b.N)/1000, "new-ns/item")
	b.ReportMetric(float64(tOld)/float64(tNew), "old/new")
}
