package meter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// modelPushOutcome is the billing rule written with encoding/json, for the
// fuzz target to hold PushTally against: a well-formed array (valid UTF-8,
// no byte-order mark, no half surrogate pair) of which every object
// element is an item, billed when its last exact "status" member is the
// string "queued" or "buffered". sure is false when the model cannot tell
// a half surrogate pair from a real U+FFFD.
func modelPushOutcome(body []byte) (out PushOutcome, sure bool) {
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) || !utf8.Valid(body) || !json.Valid(body) {
		return PushOutcome{}, true
	}
	if bytes.Contains(body, []byte(`\u`)) || bytes.Contains(body, []byte(`\U`)) {
		// Escapes: see whether encoding/json replaced anything.
		var v any
		_ = json.Unmarshal(body, &v)
		if s, _ := json.Marshal(v); bytes.Contains(s, []byte("\ufffd")) {
			return PushOutcome{}, false
		}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return PushOutcome{}, true
	}
	if bytes.Count(body, []byte("[")) > 900 {
		return PushOutcome{}, false // near the depth limit: not modelled
	}
	for _, e := range elems {
		var m map[string]json.RawMessage
		if len(e) == 0 || e[0] != '{' || json.Unmarshal(e, &m) != nil {
			continue
		}
		out.Items++
		var status string
		if raw, ok := m["status"]; ok && len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &status) == nil {
			switch status {
			case "queued":
				out.Accepted++
			case "buffered":
				out.Accepted++
				out.Buffered++
			}
		}
	}
	return out, true
}

func tallyInPieces(body []byte, sizes ...int) PushOutcome {
	t := NewPushTally()
	for _, n := range sizes {
		n = min(n, len(body))
		_, _ = t.Write(body[:n])
		body = body[n:]
	}
	_, _ = t.Write(body)
	return t.Outcome(200)
}

func TestPushTallyInPieces(t *testing.T) {
	body := []byte(`[{"index":0,"status":"queued","queueName":"q\"\u00e9"},{"status":"buffered"},{"st\u0061tus":"qu\u0065ued"},{"status":"duplicate"},{"status":"queued","status":"failed"},{"status":"failed","status":7},{"status":"queued","status":{"status":"x"}},null,"queued"]`)
	want := PushOutcome{Items: 7, Accepted: 3, Buffered: 1}
	for split := 0; split <= len(body); split++ {
		if got := tallyInPieces(body, split, 1, 3); got != want {
			t.Fatalf("split at %d: %+v, want %+v", split, got, want)
		}
	}
	if got, _ := modelPushOutcome(body); got != want {
		t.Fatalf("model %+v", got)
	}
}

func TestPushTallyRefusesUnreadableAnswers(t *testing.T) {
	for _, body := range []string{
		`[{"status":"queued"}`, `[{"status":"queued"}]]`, `{"status":"queued"}`, `"queued"`, ``,
		"\xef\xbb\xbf[{\"status\":\"queued\"}]", "[{\"status\":\"queued\",\"q\":\"\xff\"}]",
	} {
		if got := tallyInPieces([]byte(body), 5); got != (PushOutcome{}) {
			t.Errorf("%q: %+v", body, got)
		}
	}
	if got := NewPushTally().Outcome(500); got != (PushOutcome{}) {
		t.Errorf("500: %+v", got)
	}
}

// TestPushTallyLargeAnswer: an answer far over the
// billing copy limit is billed in full, in the pieces a proxy writes, with
// memory that does not grow with it.
func TestPushTallyLargeAnswer(t *testing.T) {
	const items = 320_000
	elem := `{"index":%d,"message_id":"01a22ac0-e963-7000-986d-86e1125b9970","partition_id":"9827ba6f-7345-4942-8385-39c3bcb79254","queueName":"tiny","status":"queued","trace_id":null,"transaction_id":"01a22ac0-e963-7000-986d-86e1125b%04d"}`
	tally := NewPushTally()
	var written int64
	var chunk bytes.Buffer
	chunk.WriteByte('[')
	for i := range items {
		if i > 0 {
			chunk.WriteByte(',')
		}
		fmt.Fprintf(&chunk, elem, i, i%10000)
		if chunk.Len() >= 32<<10 {
			written += int64(chunk.Len())
			_, _ = tally.Write(chunk.Bytes())
			chunk.Reset()
		}
	}
	chunk.WriteByte(']')
	written += int64(chunk.Len())
	_, _ = tally.Write(chunk.Bytes())
	if written <= MaxBilledBody {
		t.Fatalf("the answer is %d bytes, not over the copy limit", written)
	}
	if got := tally.Outcome(200); got.Accepted != items || got.Items != items {
		t.Fatalf("%d-byte answer billed %+v, want %d", written, got, items)
	}
}

func FuzzPushTally(f *testing.F) {
	for _, s := range []string{
		`[{"index":0,"status":"queued","queueName":"q"},{"status":"buffered"},{"status":"duplicate"}]`,
		`[{"status":"queued","status":"failed"}]`, `[{"status":"failed","status":"queued"}]`,
		`[{"Status":"queued"}]`, `[{"st\u0061tus":"queued"}]`, `[{"status":"qu\u0065ued"}]`,
		`[{"status":null},{"status":7},null,3,{}]`, `[{"status":"\ud800"}]`,
		`[{"a":{"status":"queued"}},[{"status":"queued"}]]`,
		`[]`, `[`, `{}`, ``, "\xef\xbb\xbf[]", `[{"status":"queued","x":"` + strings.Repeat("y", 100) + `"}]`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		want, sure := modelPushOutcome(body)
		got := BillPushDetail(200, body)
		if sure && got != want {
			t.Fatalf("%q: tally %+v, model %+v", body, got, want)
		}
		if !sure && got != want && got != (PushOutcome{}) {
			t.Fatalf("%q: tally %+v, model %+v (unsure)", body, got, want)
		}
		size := int(piece%16) + 1
		t2 := NewPushTally()
		for rest := body; len(rest) > 0; {
			n := min(size, len(rest))
			_, _ = t2.Write(rest[:n])
			rest = rest[n:]
		}
		if pieces := t2.Outcome(200); pieces != got {
			t.Fatalf("%q in pieces of %d: %+v, whole %+v", body, size, pieces, got)
		}
	})
}
