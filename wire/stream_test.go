package wire_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

// streamWords are the member names the recording watchers ask for: the
// words the meter's readers look for, and one past 64 bytes.
var streamWords = []string{"status", "success", "results", "type", "duplicate", "messages", "consumerGroup", "id", "partitionId", "transactionId"}

// recorder writes down everything a reader tells it, and asks for the
// value of every member named one of streamWords, as the meter's readers
// do: what it hears is what a reader over either would hear.
type recorder struct{ log strings.Builder }

func (r *recorder) Open(depth int, kind byte) { fmt.Fprintf(&r.log, "open %d %c\n", depth, kind) }
func (r *recorder) Close(depth int)           { fmt.Fprintf(&r.log, "close %d\n", depth) }
func (r *recorder) Key(depth int, raw []byte, plain bool) bool {
	want := false
	for _, w := range streamWords {
		want = want || wire.WordIs(raw, plain, w)
	}
	fmt.Fprintf(&r.log, "key %d %q %v %v\n", depth, raw, raw == nil, want)
	return want
}
func (r *recorder) Value(depth int, first byte, raw []byte, plain bool) {
	fmt.Fprintf(&r.log, "value %d %c %q %v\n", depth, first, raw, raw == nil)
}

// The old reader's watcher methods are lower case: the same recorder.
type oldRecorder struct{ recorder }

func (r *oldRecorder) open(depth int, kind byte)                  { r.Open(depth, kind) }
func (r *oldRecorder) close(depth int)                            { r.Close(depth) }
func (r *oldRecorder) key(depth int, raw []byte, plain bool) bool { return r.Key(depth, raw, plain) }
func (r *oldRecorder) value(depth int, first byte, raw []byte, plain bool) {
	r.Value(depth, first, raw, plain)
}

// pieces cuts body in pieces of size (0: whole).
func pieces(body []byte, size int) [][]byte {
	if size <= 0 || size >= len(body) {
		return [][]byte{body}
	}
	var out [][]byte
	for len(body) > 0 {
		n := min(size, len(body))
		out = append(out, body[:n])
		body = body[n:]
	}
	return out
}

// streamLog is what wire.Stream tells a recorder watching to depth, and
// its verdict.
func streamLog(body []byte, depth, size int) (string, bool) {
	var r recorder
	var s wire.Stream
	s.Reset(&r, depth, wire.NamesOf(streamWords...))
	for _, p := range pieces(body, size) {
		s.Feed(p)
	}
	return r.log.String(), s.OK()
}

// oldLog is the same for the reader wire.Stream replaced.
func oldLog(body []byte, depth, size int) (string, bool) {
	var r oldRecorder
	var s oldAnswerScan
	s.reset(&r, depth, oldNamesOf(false, streamWords...))
	for _, p := range pieces(body, size) {
		s.write(p)
	}
	return r.log.String(), s.ok()
}

// FuzzStreamMatchesOldScan: wire.Stream gives the verdict of the reader it
// replaced (meter's answerScan, oldscan_test.go) and tells its watcher the
// same events in the same order, whole and in pieces of any size, at any
// watched depth. There is no difference to allow for: the grammar and
// what it tells did not change when it moved; the member names a watcher
// hears are matched exactly by both (the old reader's one case-folding
// option, for pop billing, is not used by either side here, and is gone).
// The verdict is held to Check as well: both accept exactly what it does.
func FuzzStreamMatchesOldScan(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s), uint16(7), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint16, depth uint8) {
		d := int(depth%5) + 1
		check := wire.Check(body) == nil
		for _, size := range []int{0, int(piece%97) + 1} {
			got, ok := streamLog(body, d, size)
			want, oldOK := oldLog(body, d, size)
			if ok != oldOK || got != want {
				t.Fatalf("%q (depth %d, pieces of %d): Stream %v\n%s\nthe old reader %v\n%s", body, d, size, ok, got, oldOK, want)
			}
			if ok != check {
				t.Fatalf("%q (pieces of %d): Stream %v, Check %v", body, size, ok, check)
			}
		}
	})
}

// streamSeeds are the broker's answers and the corners of the grammar.
var streamSeeds = []string{
	`[{"index":0,"message_id":"01a22ac0-ccb5-7000-a144-332b2003e635","partition_id":"f3aeed7b-8ab3-4a4b-a9ab-ae82f0377e54","queueName":"sdk-orders","status":"queued","trace_id":null,"transaction_id":"01a22ac0-ccac-725c-8d92-b23f2625cbe8"}]`,
	`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"job-1","type":"ack"},{"index":1,"messageId":"m","success":true,"type":"push","duplicate":true}],"success":true,"transactionId":"t"}`,
	`{"consumerGroup":"__QUEUE_MODE__","leaseId":"l","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-30T04:40:08.368188Z","data":{"orderId":1001,"note":"Zo\u00eb \"x\" – ok"},"id":"01a22ac0-cdaa-7000-b416-c78661b283e6","partitionId":"b4038af2","producerSub":null,"traceId":null,"transactionId":"order-1001"}],"partition":"customer-42","success":true}`,
	`{"messages":[null,"x",1,[2],{"id":"y"}],"messages":[{"id":"z"}],"Messages":[1]}`,
	`[{"st\u0061tus":"qu\u0065ued"},{"status":"\ud83d\ude00"},{"status":"\ud800"},{"status":"\udc00x"}]`,
	`[{"status":"queued","status":{"status":"x"}},{"status":[1,{"a":-0.5e+3}]},true,false,null,-1,0,1.5E-7]`,
	"[\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"\xed\xa0\x80\",\"\xc0\xaf\",\"\xf4\x90\x80\x80\",\"\xe0\x80\x80\"]",
	"\xef\xbb\xbf[]", `[]`, `{}`, ``, ` `, `[`, `]`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `[01]`, `[1.]`, `[-]`, `[1e]`, `0`, `-0 `, `1e5`, `tru`, `nul`, `"\u00"`, `"\x"`,
	"[\"a\x01\"]", `{"messages":[{"partitionId":"p","tranſactionId":"x","transactionId":"t"}]}`,
	`[{"` + strings.Repeat("k", 70) + `":"queued","status":"` + strings.Repeat("q", 70) + `"}]`,
	strings.Repeat("[", 1000) + strings.Repeat("]", 1000), strings.Repeat("[", 1001) + strings.Repeat("]", 1001),
}

// TestStreamOnTheSeeds runs the fuzz target's comparison on its seeds at
// every depth and in small pieces, so a plain test run covers the cuts.
func TestStreamOnTheSeeds(t *testing.T) {
	// The comparison is of something: the watcher hears a push item's
	// status from both.
	if got, _ := streamLog([]byte(streamSeeds[0]), 2, 7); !strings.Contains(got, "value 2 \" \"queued\" false") {
		t.Fatalf("the recorder heard no status:\n%s", got)
	}
	for _, s := range streamSeeds {
		body := []byte(s)
		for d := 1; d <= 5; d++ {
			for _, size := range []int{0, 1, 2, 3, 5, 8, 13} {
				got, ok := streamLog(body, d, size)
				want, oldOK := oldLog(body, d, size)
				if ok != oldOK || got != want {
					t.Fatalf("%q (depth %d, pieces of %d): Stream %v\n%s\nthe old reader %v\n%s", s, d, size, ok, got, oldOK, want)
				}
			}
		}
	}
}

// countWatch is a tally's watcher at its cheapest: it asks for the
// values of two words and counts what it is told.
type countWatch struct{ n int }

func (c *countWatch) Open(int, byte) {}
func (c *countWatch) Close(int)      {}
func (c *countWatch) Key(_ int, raw []byte, plain bool) bool {
	return wire.WordIs(raw, plain, "id") || wire.WordIs(raw, plain, "status")
}
func (c *countWatch) Value(int, byte, []byte, bool) { c.n++ }

// BenchmarkStreamGeneral is the general reader alone, without the
// element shapes, on answers of the broker's kinds (a pop answer with
// nested payloads, a push answer), whole and in the proxy's 32 KiB
// pieces: what reading an answer in no known shape costs.
func BenchmarkStreamGeneral(b *testing.B) {
	msg := `{"consumerGroup":"worker","createdAt":"2026-11-30T04:40:08.409175Z","data":{"customer":{"id":"cust-000042","name":"Zoë Müller","tier":"gold"},"items":[{"qty":2,"sku":"A-42","unit":9.95}],"note":"ask for \"Zoë\" – deliver to the back door, ring twice","orderId":1042,"paid":true,"total":139.9},"id":"01a22ac0-cdd3-7042-9f54-11a670d52b36","leaseId":"01a22ac0-db68-7000-95a9-8adf68ece548","partition":"customer-7","partitionId":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","producerSub":null,"traceId":null,"transactionId":"01a22ac0-cdd0-739c-987b-5766b13d0042"}`
	item := streamSeeds[0][1 : len(streamSeeds[0])-1]
	for _, a := range []struct {
		name  string
		body  []byte
		depth int
	}{
		{"pop", []byte(`{"consumerGroup":"worker","messages":[` + strings.TrimSuffix(strings.Repeat(msg+",", 1000), ",") + `],"success":true}`), 3},
		{"push", []byte(`[` + strings.TrimSuffix(strings.Repeat(item+",", 1000), ",") + `]`), 2},
	} {
		for _, size := range []int{0, 32 << 10} {
			b.Run(fmt.Sprintf("%s/pieces=%d", a.name, size), func(b *testing.B) {
				parts := pieces(a.body, size)
				names := wire.NamesOf("id", "status")
				var s wire.Stream
				var w countWatch
				b.SetBytes(int64(len(a.body)))
				b.ReportAllocs()
				for range b.N {
					w.n = 0
					s.Reset(&w, a.depth, names)
					for _, p := range parts {
						s.Feed(p)
					}
					if !s.OK() || w.n != 1000 {
						b.Fatalf("ok %v, told %d values", s.OK(), w.n)
					}
				}
			})
		}
	}
}

// A string cut by the ends of pieces is told whole up to 64 bytes, and up
// to KeepLong's bound when the reader asked for more; past the bound, and
// with nothing asked past 64 bytes, it is told as nil. Within one piece
// it is told whole at any length.
func TestStreamKeepLong(t *testing.T) {
	for _, tc := range []struct {
		text     string
		keepLong int
		piece    int
		whole    bool
	}{
		{strings.Repeat("a", 64), 0, 1, true},
		{strings.Repeat("a", 65), 0, 1, false},
		{strings.Repeat("a", 65), 0, 0, true},
		{strings.Repeat(`\u00e9`, 300), 1800, 1, true},
		{strings.Repeat(`\u00e9`, 300), 1800, 7, true},
		{strings.Repeat(`\u00e9`, 300), 1799, 7, false},
		{strings.Repeat("b", 60) + strings.Repeat("c", 100), 160, 61, true},
	} {
		var r recorder
		var s wire.Stream
		s.Reset(&r, 1, wire.NamesOf(streamWords...))
		s.KeepLong(tc.keepLong)
		for _, p := range pieces([]byte(`{"status":"`+tc.text+`"}`), tc.piece) {
			s.Feed(p)
		}
		want := fmt.Sprintf("value 1 \" %q false\n", tc.text)
		if !tc.whole {
			want = "value 1 \" \"\" true\n"
		}
		if !s.OK() || !strings.Contains(r.log.String(), want) {
			t.Errorf("%d bytes, KeepLong(%d), pieces of %d: told\n%s\nwant a line %q", len(tc.text), tc.keepLong, tc.piece, r.log.String(), want)
		}
	}
}

// FuzzStreamKeepLong: a Stream that keeps strings as long as the whole
// text across the ends of pieces tells its watcher, in pieces of any size,
// what it tells of the text in one piece, and gives its verdict; only the
// names the watcher does not want may differ (one cut by the end of a
// piece is told whatever its length and first byte).
func FuzzStreamKeepLong(f *testing.F) {
	for _, seed := range []string{
		`{"status":"` + strings.Repeat("a", 100) + `"}`,
		`{"st\u0061tus":"` + strings.Repeat(`\u00e9`, 30) + `","x":[1,{"status":"queued"}]}`,
		`[{"status":"buffered"},{"` + strings.Repeat("k", 70) + `":"v"}]`,
	} {
		f.Add([]byte(seed), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		tell := func(size int) (string, bool) {
			var r recorder
			var s wire.Stream
			s.Reset(&r, 3, wire.NamesOf(streamWords...))
			s.KeepLong(len(body))
			for _, p := range pieces(body, size) {
				s.Feed(p)
			}
			var wanted strings.Builder
			for line := range strings.Lines(r.log.String()) {
				if !strings.HasPrefix(line, "key ") || strings.HasSuffix(line, " true\n") {
					wanted.WriteString(line)
				}
			}
			return wanted.String(), s.OK()
		}
		whole, wholeOK := tell(0)
		cut, cutOK := tell(int(piece) + 1)
		if cut != whole || cutOK != wholeOK {
			t.Fatalf("in pieces of %d:\n%s(ok %v)\nwhole:\n%s(ok %v)\nbody %q", int(piece)+1, cut, cutOK, whole, wholeOK, body)
		}
	})
}
