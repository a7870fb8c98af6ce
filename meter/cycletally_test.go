package meter

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/queengate/queengate/wire"
)

func streamInPieces(w interface{ Write([]byte) (int, error) }, body []byte, piece int) {
	for len(body) > 0 {
		n := min(piece, len(body))
		_, _ = w.Write(body[:n])
		body = body[n:]
	}
}

func streamedCycle(status int, body []byte, groups []CycleGroup, piece int) int64 {
	t := NewCycleTally(groups)
	streamInPieces(t, body, piece)
	return t.Billed(status)
}

func streamedReplay(status int, body []byte, piece int) (bool, bool) {
	t := NewReplayTally()
	streamInPieces(t, body, piece)
	return t.Stored(status)
}

var cycleBodies = []string{
	`{"success":true,"push_results":[{"queue":"q","partition":"a","status":"queued"},{"queue":"q","partition":"b","status":"duplicate"}]}`,
	`{"success":true,"push_results":[{"queue":"q","partition":"A","status":"queued"}]}`,
	`{"success":true,"push_results":[{"queueName":"q","partition_id":"x","status":"queued","index":12.5e3},{"queueName":"q","status":"duplicate"},{"queueName":"q","status":"queued"}]}`,
	`{"success":true,"push_results":[{"queue":"q","partition":"Default","status":"buffered","extra":[1,{"a":[true,null]}]}]}`,
	`{"success":true}`,
	`{"success":false,"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`,
	`{"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`,
	`{"Success":true,"PUSH_RESULTS":[{"Queue":"q","Partition":"Default","Status":"queued"}]}`,
	`{"success":true,"push_results":[{"queue":"q","partition":"Default","status":"queued"}],"success":false}`,
	`{"succes\u0073":true,"push_results":[{"queue":"q\u0022","partition":"Default","status":"queued"},{"queue":"q","partition":"Default","status":"queued"}]}`,
	`{"success":1,"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`,
	`{"success":true,"push_results":{"queue":"q"}}`,
	`{"success":true,`,
	`[{"success":true}]`,
}

// The tally bills what the reading it replaced bills on the whole answer,
// in any piece size, with the messages a cycle popped in between.
func TestCycleTallyBillsAsTheOracle(t *testing.T) {
	groups := []CycleGroup{{"q", "a", 3}, {"q", "b", 2}, {"q", "Default", 2}, {`q"`, "Default", 1}}
	popped := `"messages":[` + strings.TrimSuffix(strings.Repeat(`{"data":{"success":false,"push_results":[]},"id":"m"},`, 50), ",") + `]`
	for _, body := range cycleBodies {
		for _, b := range []string{body, strings.Replace(body, "{", "{"+popped+",", 1)} {
			want := oracleBillCycle(200, []byte(b), groups)
			for _, piece := range []int{1, 3, 1 << 20} {
				if got := streamedCycle(200, []byte(b), groups, piece); got != want {
					t.Errorf("%s in pieces of %d: %d, the oracle %d", b, piece, got, want)
				}
			}
		}
	}
	ex := fx(t, "C170")
	groups = cycleGroups(t, ex.RequestBody)
	if got := streamedCycle(ex.status(t), ex.body(t), groups, 5); got != 1 {
		t.Errorf("C170 streamed: %d, want 1", got)
	}
	if got := streamedCycle(503, []byte(cycleBodies[0]), groups, 5); got != 0 {
		t.Errorf("a 503 billed %d", got)
	}
}

func TestReplayTallyBillsAsTheOracle(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
	}{
		{200, `{"success":true,"result":"moved"}`}, {200, `{"success":true}`}, {200, `{"success":true,"result":"duplicate"}`},
		{200, `{"success":true,"result":null}`}, {200, `{"success":false,"error":"Message not found"}`},
		{200, `{"success":"true","result":"moved"}`}, {200, `{"success":tr`}, {200, `[{"success":true}]`}, {200, ``},
		{404, `<html>File Not Found</html>`}, {500, `{"success":true,"result":"moved"}`},
		{200, `{"Success":true,"result":"moved"}`}, {200, `{"success":true,"result":"moved","result":"skipped"}`},
		{200, `{"success":true,"result":"mo\u0076ed"}`}, {200, `{"message":{"data":{"x":[1,2,3]}},"success":true,"result":"moved"}`},
		{201, ` {"result" : "moved" , "success" : true } `},
	} {
		ws, wr := oracleBillReplay(c.status, []byte(c.body))
		for _, piece := range []int{1, 4, 1 << 20} {
			if s, r := streamedReplay(c.status, []byte(c.body), piece); s != ws || r != wr {
				t.Errorf("%d %s in pieces of %d: %v %v, the oracle %v %v", c.status, c.body, piece, s, r, ws, wr)
			}
		}
	}
}

// A cycle answer far past what the gateway keeps of any answer (the
// messages it popped) is billed from its push results all the same, and
// nothing of it is kept: the memory the tally takes does not grow with it.
func TestCycleTallyKeepsNothingOfTheMessages(t *testing.T) {
	groups := []CycleGroup{{"q", "a", 3}, {"q", "Default", 2}}
	tally := NewCycleTally(groups)
	message := []byte(`{"data":{"text":"` + strings.Repeat("x", 1<<20) + `"},"id":"m"},`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _ = tally.Write([]byte(`{"messages":[`))
	for range MaxBilledBody>>20 + 8 {
		streamInPieces(tally, message, 32<<10)
	}
	_, _ = tally.Write([]byte(`{"id":"last"}],"success":true,"push_results":[{"queue":"q","partition":"a","status":"queued"},` +
		`{"queueName":"q","status":"buffered"},{"queueName":"q","status":"queued"}]}`))
	runtime.ReadMemStats(&after)
	if got := tally.Billed(200); got != 5 {
		t.Fatalf("billed %d, want 5", got)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("streaming a %d MiB answer allocated %d bytes", MaxBilledBody>>20+8, grew)
	}
}

// A queue or partition name as long as the broker takes, every character
// escaped, is read whole across the ends of pieces: a result that names a
// group in such text confirms it at any piece size.
func TestCycleTallyReadsLongNamesAcrossPieces(t *testing.T) {
	queue := strings.Repeat("q", 255)
	partition := strings.Repeat("é", 255)
	escape := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			if r > 0xFFFF {
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		}
		return b.String()
	}
	for _, q := range []string{queue, strings.Repeat("😀", 255)} {
		groups := []CycleGroup{{q, partition, 4}, {q, "Default", 2}}
		body := `{"success":true,"push_results":[{"queue":"` + escape(q) + `","partition":"` + escape(partition) + `","status":"qu\u0065ued"},` +
			`{"queueName":"` + escape(q) + `","status":"queued"}]}`
		want := oracleBillCycle(200, []byte(body), groups)
		if want != 5 {
			t.Fatalf("the oracle billed %d, want 5", want)
		}
		for _, piece := range []int{1, 7, 64, 1000, 1 << 20} {
			if got := streamedCycle(200, []byte(body), groups, piece); got != want {
				t.Errorf("in pieces of %d: billed %d, want %d", piece, got, want)
			}
		}
	}
}

// FuzzCycleAnswer: on every answer the Checker reads, the tally bills, in
// pieces, what the oracle bills on the whole one; on one it refuses,
// nothing.
func FuzzCycleAnswer(f *testing.F) {
	for _, b := range cycleBodies {
		f.Add([]byte(b), uint8(2))
	}
	// Names and keys written with escapes, cut by every end of a piece:
	// one past the longest text a group's name can be written in.
	f.Add([]byte(`{"\u0073uccess":true,"push_results":[{"queue":"\u0071","partition":"\u0061","\u0073tatus":"queued"},`+
		`{"queueName":"\u0071","status":"buffered"},{"queue":"`+strings.Repeat(`\u0071`, 8)+`","status":"queued"}]}`), uint8(0))
	f.Add([]byte(`{"push_results":[{"queue":"q","partition":"a","status":"queued"}],"success":true,"push_results":[{"queue":"q","status":"queued"}]}`), uint8(4))
	groups := []CycleGroup{{"q", "a", 3}, {"q", "b", 2}, {"q", "Default", 2}, {"q", "A", 1}}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		got := streamedCycle(200, body, groups, int(piece)+1)
		if wire.Check(body) != nil {
			if got != 0 {
				t.Fatalf("an answer the Checker refuses billed %d: %q", got, body)
			}
			return
		}
		if want := oracleBillCycle(200, body, groups); got != want {
			t.Fatalf("streamed %d, the oracle %d: %q", got, want, body)
		}
	})
}

// FuzzReplayAnswer is FuzzCycleAnswer for ReplayTally.
func FuzzReplayAnswer(f *testing.F) {
	for _, b := range []string{`{"success":true,"result":"moved"}`, `{"success":true}`, `{"result":"x","success":true}`, `[]`, `{"success":false}`} {
		f.Add([]byte(b), uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		stored, readable := streamedReplay(200, body, int(piece)+1)
		if wire.Check(body) != nil {
			if stored || readable {
				t.Fatalf("an answer the Checker refuses: stored %v readable %v: %q", stored, readable, body)
			}
			return
		}
		if ws, wr := oracleBillReplay(200, body); stored != ws || readable != wr {
			t.Fatalf("streamed %v %v, the oracle %v %v: %q", stored, readable, ws, wr, body)
		}
	})
}
