package meter

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

// answerSeeds are the fuzz targets' first inputs: the broker's answers
// (testdata/broker) and the corners of the grammar the tallies read.
var answerSeeds = []string{
	`[{"index":0,"message_id":"01a22ac0-ccb5-7000-a144-332b2003e635","partition_id":"f3aeed7b-8ab3-4a4b-a9ab-ae82f0377e54","queueName":"sdk-orders","status":"queued","trace_id":null,"transaction_id":"01a22ac0-ccac-725c-8d92-b23f2625cbe8"}]`,
	`[{"index":0,"message_id":"01a22ac0-cdaa-7000-b416-c78661b283e6","queueName":"sdk-orders","status":"duplicate","transaction_id":"order-1001"},{"status":"buffered"}]`,
	`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"job-1","type":"ack"},{"index":1,"messageId":"m","success":true,"type":"push","duplicate":true}],"success":true,"transactionId":"t"}`,
	`{"consumerGroup":"__QUEUE_MODE__","leaseId":"l","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-30T04:40:08.368188Z","data":{"orderId":1001,"note":"Zo\u00eb \"x\" – ok"},"id":"01a22ac0-cdaa-7000-b416-c78661b283e6","partitionId":"b4038af2","producerSub":null,"traceId":null,"transactionId":"order-1001"}],"partition":"customer-42","success":true}`,
	`{"error":"lease_held","messages":[],"success":false}`,
	`{"messages":[null,"x",1,[2],{"id":"y"}],"messages":[{"id":"z"}]}`,
	`[{"st\u0061tus":"qu\u0065ued"},{"status":"\ud83d\ude00"},{"status":"\ud800"},{"status":"\udc00x"}]`,
	`[{"status":"queued","status":{"status":"x"}},{"status":[1,{"a":-0.5e+3}]},true,false,null,-1,0,1.5E-7]`,
	"[\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"\xed\xa0\x80\",\"\xc0\xaf\",\"\xf4\x90\x80\x80\",\"\xe0\x80\x80\"]",
	"\xef\xbb\xbf[]", `[]`, `{}`, ``, ` `, `[`, `]`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `[01]`, `[1.]`, `[-]`, `[1e]`, `0`, `-0 `, `1e5`, `tru`, `nul`, `"\u00"`, `"\x"`,
	"[\"a\x01\"]", `{"consumerGroup":"g","consumerGroup":null,"messages":[{"id":"a","id":null},{"partitionId":"p","transactionId":""},{"consumerGroup":"","id":"b"}]}`,
	`{"messages":[{"partitionId":"p","tranſactionId":"x","transactionId":"t"}]}`, `{"meſſages":[{"id":"hidden"}],"messages":[]}`,
	`{"consumerGroup":{"x":1},"messages":[{"id":{"a":"b"}}]}`, `{"messages":{"id":"x"}}`, `{"messages":"x"}`,
	`[{"` + strings.Repeat("k", 70) + `":"queued","status":"` + strings.Repeat("q", 70) + `"}]`,
	strings.Repeat("[", 1000) + strings.Repeat("]", 1000), strings.Repeat("[", 1001) + strings.Repeat("]", 1001),
}

// writeInPieces writes body to w in pieces of size, the last one shorter.
func writeInPieces(w interface{ Write([]byte) (int, error) }, body []byte, size int) {
	for len(body) > 0 {
		n := min(size, len(body))
		_, _ = w.Write(body[:n])
		body = body[n:]
	}
}

// scanVerdict reads body with wire.Stream, as BillPop does, in pieces of
// size (0: whole).
func scanVerdict(body []byte, size int) bool {
	var s wire.Stream
	s.Reset(&popWatch{}, 3, popNames)
	if size <= 0 {
		s.Feed(body)
	} else {
		for rest := body; len(rest) > 0; {
			n := min(size, len(rest))
			s.Feed(rest[:n])
			rest = rest[n:]
		}
	}
	return s.OK()
}

func addAnswerSeeds(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s), uint16(7))
	}
	f.Add(pushAnswer(3), uint16(100))
	f.Add(txnAnswer(3), uint16(64))
	f.Add(popAnswerBody(2, 300), uint16(33))
}

// FuzzAnswerScanVerdict: answerScan accepts exactly what wire.Checker
// accepts, whole and in pieces of any size.
func FuzzAnswerScanVerdict(f *testing.F) {
	addAnswerSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, piece uint16) {
		want := wire.Check(body) == nil
		if got := scanVerdict(body, 0); got != want {
			t.Fatalf("%q: answerScan %v, wire.Check %v (%v)", body, got, want, wire.Check(body))
		}
		if got := scanVerdict(body, int(piece%97)+1); got != want {
			t.Fatalf("%q in pieces of %d: answerScan %v, wire.Check %v", body, piece%97+1, got, want)
		}
	})
}

// FuzzPushTallyMatchesOracle: the same outcome as the tally before
// answerScan, whole and in pieces.
func FuzzPushTallyMatchesOracle(f *testing.F) {
	addAnswerSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, piece uint16) {
		old := oldNewPushTally()
		_, _ = old.Write(body)
		want := old.Outcome(200)
		size := int(piece%97) + 1
		for _, n := range []int{len(body) + 1, size} {
			tally := NewPushTally()
			writeInPieces(tally, body, n)
			if got := tally.Outcome(200); got != want {
				t.Fatalf("%q in pieces of %d: %+v, the old tally %+v", body, n, got, want)
			}
		}
	})
}

// FuzzTxnTallyMatchesOracle: the same bill as the tally before
// answerScan, whole and in pieces.
func FuzzTxnTallyMatchesOracle(f *testing.F) {
	addAnswerSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, piece uint16) {
		counted := int(piece%50) + 1
		old := oldNewTxnTally()
		_, _ = old.Write(body)
		want := old.Billed(200, counted)
		for _, n := range []int{len(body) + 1, int(piece%97) + 1} {
			tally := NewTxnTally()
			writeInPieces(tally, body, n)
			if got := tally.Billed(200, counted); got != want {
				t.Fatalf("%q in pieces of %d: %d, the old tally %d", body, n, got, want)
			}
		}
	})
}

// FuzzPopCountMatchesOracle: PopKeys counts what the count before
// answerScan did, whole and in pieces.
func FuzzPopCountMatchesOracle(f *testing.F) {
	addAnswerSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, piece uint16) {
		old := oldNewPopCount()
		_, _ = old.Write(body)
		want := old.Messages(200)
		for _, n := range []int{len(body) + 1, int(piece%97) + 1} {
			p := NewPopKeys()
			writeInPieces(p, body, n)
			if got, _ := p.Result(200); got != want {
				t.Fatalf("%q in pieces of %d: %d, the old count %d", body, n, got, want)
			}
		}
	})
}

// FuzzBillPopMatchesOracle: BillPop bills and keys every answer as the
// model of the rules of answers does, and as it did before those rules
// wherever they agree (checkBillPop).
func FuzzBillPopMatchesOracle(f *testing.F) {
	addAnswerSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, _ uint16) {
		checkBillPop(t, "fuzz", body)
		checkPopAnswer(t, body)
	})
}

// checkBillPop holds BillPop to modelBillPop on every answer, and to the
// BillPop of before the rules of answers (oldBillPop: its fast path, which
// declined what it could not read as encoding/json does, and
// encoding/json for the rest) where the old fast path answered and no
// object names a member BillPop reads twice. Only there do the two
// semantics agree; elsewhere the old one differed by design:
//   - it read member names in any letter case (encoding/json folds them);
//     the broker and its SDKs read them exactly, and so does BillPop;
//   - a repeated "messages" merged into the first array's messages, and a
//     null member kept what an earlier one of its name set; the broker's
//     parser keeps the last member, null or not, and so does BillPop;
//   - it decoded escaped keying values and ignored ones of another type;
//     BillPop leaves such a message unkeyed (a first delivery: fail closed);
//   - it billed what encoding/json accepts and wire.Check refuses (bad
//     UTF-8, half surrogate pairs, nesting past the limit); such an answer
//     is unreadable and bills nothing, as for every other answer.
func checkBillPop(t *testing.T, name string, body []byte) {
	t.Helper()
	n, ids := BillPop(200, body)
	wantN, wantIDs, repeats := modelBillPop(body)
	if n != wantN || !slices.Equal(ids, wantIDs) {
		t.Fatalf("%s: BillPop of %q: %d %q, the model %d %q", name, body, n, ids, wantN, wantIDs)
	}
	if _, _, oldOK := oldScanPopBilling(body); oldOK && !repeats {
		oldN, oldIDs := oldBillPop(200, body)
		if n != oldN || !slices.Equal(ids, oldIDs) {
			t.Fatalf("%s: BillPop of %q: %d %q, the old BillPop %d %q", name, body, n, ids, oldN, oldIDs)
		}
	}
	_, _, ok := scanPopBilling(body)
	if want := wire.Check(body) == nil && body[wire.SkipSpace(body, 0)] == '{'; ok != want {
		t.Fatalf("%s: BillPop's reader on %q answers %v, want %v", name, body, ok, want)
	}
}

func TestAnswerScanOnTheSeeds(t *testing.T) {
	for _, s := range answerSeeds {
		body := []byte(s)
		want := wire.Check(body) == nil
		for _, size := range []int{0, 1, 2, 3, 5, 8, 13} {
			if got := scanVerdict(body, size); got != want {
				t.Errorf("%q in pieces of %d: %v, wire.Check %v", s, size, got, want)
			}
		}
	}
}

// TestAnswersOfTheBenchmarksAreBilled: the benchmark bodies are read in
// full by the tallies and the oracle alike, in the proxy's pieces and in
// small ones.
func TestAnswersOfTheBenchmarksAreBilled(t *testing.T) {
	for _, n := range answerSizes {
		for _, piece := range []int{proxyPiece, 7} {
			push := NewPushTally()
			writeInPieces(push, pushAnswer(n), piece)
			if got := push.Outcome(200); got.Accepted != int64(n) || got.Items != int64(n) {
				t.Errorf("push of %d in pieces of %d: %+v", n, piece, got)
			}
			txn := NewTxnTally()
			writeInPieces(txn, txnAnswer(n), piece)
			if got := txn.Billed(200, n+1); got != int64(n+1) {
				t.Errorf("transaction of %d: billed %d", n, got)
			}
			for _, size := range []int{100, 1000} {
				pop := NewPopKeys()
				writeInPieces(pop, popAnswerBody(n, size), piece)
				if got, _ := pop.Result(200); got != int64(n) {
					t.Errorf("pop of %d × %d B: counted %d", n, size, got)
				}
			}
		}
		for _, size := range []int{100, 1000} {
			body := popAnswerBody(n, size)
			got, ids := BillPop(200, body)
			wantN, wantIDs := oldBillPop(200, body)
			_, _, fast := scanPopBilling(body)
			if !fast || got != int64(n) || got != wantN || !slices.Equal(ids, wantIDs) {
				t.Errorf("pop of %d × %d B: fast %v, %d %d ids, the old %d %d ids", n, size, fast, got, len(ids), wantN, len(wantIDs))
			}
		}
	}
}

// allocsOf measures the allocations of read, count and bytes per run: the
// least of a few measurements, since what the rest of the process
// allocates meanwhile only adds to them.
func allocsOf(read func()) (count, bytes float64) {
	const runs, tries = 50, 5
	count, bytes = math.Inf(1), math.Inf(1)
	for range tries {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		n := testing.AllocsPerRun(runs, read)
		runtime.ReadMemStats(&after)
		count = min(count, n)
		bytes = min(bytes, float64(after.TotalAlloc-before.TotalAlloc)/(runs+1))
	}
	return count, bytes
}

// TestAnswerAllocationsDoNotGrowWithItems: allocations independent of the
// item count, for the answers: reading the answer to 1,000 items allocates no more, in count
// and in bytes, than reading the answer to 10. BillPop has a test of its
// own (allocs_norace_test.go); PopKeys keeps a few short strings per
// message by design (the keys of an oversized pop).
func TestAnswerAllocationsDoNotGrowWithItems(t *testing.T) {
	push := NewPushTally()
	txn := NewTxnTally()
	readers := map[string]func(n int) func(){
		"push": func(n int) func() {
			body := pushAnswer(n)
			return func() {
				push.Reset()
				writeInPieces(push, body, proxyPiece)
				if push.Outcome(200).Accepted != int64(n) {
					t.Fatal("miscounted")
				}
			}
		},
		"transaction": func(n int) func() {
			body := txnAnswer(n)
			return func() {
				txn.Reset()
				writeInPieces(txn, body, proxyPiece)
				if txn.Billed(200, n+1) != int64(n+1) {
					t.Fatal("miscounted")
				}
			}
		},
	}
	for name, reader := range readers {
		count10, bytes10 := allocsOf(reader(10))
		count1000, bytes1000 := allocsOf(reader(1000))
		t.Logf("%s: 10 items %v allocations, %.0f B; 1,000 items %v allocations, %.0f B", name, count10, bytes10, count1000, bytes1000)
		if count1000 > count10 || bytes1000 > bytes10 {
			t.Errorf("%s: 1,000 items allocate %v times, %.0f B; 10 items %v times, %.0f B", name, count1000, bytes1000, count10, bytes10)
		}
	}
}

// TestAnswerScanRefusesWhatCheckerRefuses names the refusals one by one,
// in pieces of one byte and whole.
func TestAnswerScanRefusesWhatCheckerRefuses(t *testing.T) {
	for _, body := range []string{
		"\xef\xbb\xbf[]", "[\"\xff\"]", `["\ud800"]`, `["\udc00"]`, `["\ud800\u0041"]`, `["\ud800\n"]`,
		strings.Repeat("[", 1001) + strings.Repeat("]", 1001), `[1,]`, `[01]`, `{"a":1}x`, `[]]`, `{]`, "[\"\t\"]", ``,
	} {
		var se *wire.SyntaxError
		if err := wire.Check([]byte(body)); !errors.As(err, &se) {
			t.Fatalf("%q: wire.Check says %v", body, err)
		}
		for _, size := range []int{0, 1} {
			if scanVerdict([]byte(body), size) {
				t.Errorf("%q in pieces of %d: accepted", body, size)
			}
		}
	}
	for _, body := range []string{`["\ud83d\ude00"]`, strings.Repeat("[", 1000) + strings.Repeat("]", 1000), ` 0 `, `"x"`, "[\"\xf4\x8f\xbf\xbf\"]"} {
		for _, size := range []int{0, 1} {
			if !scanVerdict([]byte(body), size) {
				t.Errorf("%q in pieces of %d: refused", body, size)
			}
		}
	}
}

// TestSpecialBytesFindsTheFirst holds the eight-lane test to the byte
// table, lane by lane, for every byte in every lane after plain ones.
func TestSpecialBytesFindsTheFirst(t *testing.T) {
	for lane := range 8 {
		for c := range 256 {
			var w [8]byte
			for i := range w {
				w[i] = 'a'
			}
			w[lane] = byte(c)
			for _, after := range []byte{'a', 0, '"', 0xff} {
				for i := lane + 1; i < 8; i++ {
					w[i] = after
				}
				got := wire.PlainEnd(w[:], 0)
				want := lane
				if wire.PlainByte[c] {
					want = 8
					if after != 'a' && lane < 7 {
						want = lane + 1
					}
				}
				if got != want {
					t.Fatalf("% x: wire.PlainEnd %d, want %d", w, got, want)
				}
			}
		}
	}
}

func TestPayloadSizes(t *testing.T) {
	for _, size := range []int{100, 1000} {
		if got := len(payload(7, size)); got < size-8 || got > size+8 {
			t.Errorf("payload of %d B is %d B", size, got)
		}
	}
}

// TestUnreadiedTalliesBillNothing: a tally used without Reset (its zero
// value) bills nothing rather than failing, as before answerScan.
func TestUnreadiedTalliesBillNothing(t *testing.T) {
	var push PushTally
	_, _ = push.Write(pushAnswer(2))
	var txn TxnTally
	_, _ = txn.Write(txnAnswer(2))
	if got := push.Outcome(200); got != (PushOutcome{}) {
		t.Errorf("push: %+v", got)
	}
	if got := txn.Billed(200, 3); got != 0 {
		t.Errorf("transaction: %d", got)
	}
}
