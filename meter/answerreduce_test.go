package meter

import (
	"strings"
	"testing"

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
	a := NewCycleAnswer()
	streamInPieces(a, body, piece)
	n, _ := a.Bill(status, groups)
	return n
}

func streamedReplay(status int, body []byte, piece int) (bool, bool) {
	a := NewReplayAnswer()
	streamInPieces(a, body, piece)
	return a.Bill(status)
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

// The reduced answer bills what the whole answer bills, in any piece size,
// with the messages a cycle popped (which are not kept) in between.
func TestCycleAnswerBillsAsBillCycle(t *testing.T) {
	groups := []CycleGroup{{"q", "a", 3}, {"q", "b", 2}, {"q", "Default", 2}, {`q"`, "Default", 1}}
	popped := `"messages":[` + strings.TrimSuffix(strings.Repeat(`{"data":{"success":false,"push_results":[]},"id":"m"},`, 50), ",") + `]`
	for _, body := range cycleBodies {
		for _, b := range []string{body, strings.Replace(body, "{", "{"+popped+",", 1)} {
			want := BillCycle(200, []byte(b), groups)
			for _, piece := range []int{1, 3, 1 << 20} {
				if got := streamedCycle(200, []byte(b), groups, piece); got != want {
					t.Errorf("%s in pieces of %d: %d, BillCycle %d", b, piece, got, want)
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

func TestReplayAnswerBillsAsBillReplay(t *testing.T) {
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
		ws, wr := BillReplay(c.status, []byte(c.body))
		for _, piece := range []int{1, 4, 1 << 20} {
			if s, r := streamedReplay(c.status, []byte(c.body), piece); s != ws || r != wr {
				t.Errorf("%d %s in pieces of %d: %v %v, BillReplay %v %v", c.status, c.body, piece, s, r, ws, wr)
			}
		}
	}
}

// An answer whose kept members alone are over MaxBilledBody is reported,
// not billed as if it said nothing.
func TestCycleAnswerOverflow(t *testing.T) {
	a := NewCycleAnswer()
	_, _ = a.Write([]byte(`{"success":true,"push_results":["`))
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range MaxBilledBody>>20 + 1 {
		_, _ = a.Write(chunk)
	}
	_, _ = a.Write([]byte(`"]}`))
	if n, overflow := a.Bill(200, []CycleGroup{{"q", "Default", 1}}); !overflow || n != 0 {
		t.Fatalf("billed %d, overflow %v", n, overflow)
	}
}

// FuzzCycleAnswer: on every answer the Checker reads, the reduced answer
// bills what BillCycle bills on the whole one; on one it refuses, nothing.
func FuzzCycleAnswer(f *testing.F) {
	for _, b := range cycleBodies {
		f.Add([]byte(b), uint8(2))
	}
	groups := []CycleGroup{{"q", "a", 3}, {"q", "b", 2}, {"q", "Default", 2}, {"q", "A", 1}}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		got := streamedCycle(200, body, groups, int(piece)+1)
		if wire.Check(body) != nil {
			if got != 0 {
				t.Fatalf("an answer the Checker refuses billed %d: %q", got, body)
			}
			return
		}
		if want := BillCycle(200, body, groups); got != want {
			t.Fatalf("streamed %d, BillCycle %d: %q", got, want, body)
		}
	})
}

// FuzzReplayAnswer is FuzzCycleAnswer for BillReplay.
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
		if ws, wr := BillReplay(200, body); stored != ws || readable != wr {
			t.Fatalf("streamed %v %v, BillReplay %v %v: %q", stored, readable, ws, wr, body)
		}
	})
}
