package meter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"
)

// modelTxnBilled is M3 written with encoding/json into maps (exact keys,
// the last duplicate wins), for the fuzz target to hold TxnTally against.
// sure is false where modelPushOutcome's is (a half surrogate pair or a
// real U+FFFD; nesting near the limit).
func modelTxnBilled(body []byte, counted int) (int64, bool) {
	if _, sure := modelPushOutcome(body); !sure {
		return 0, false
	}
	if counted <= 0 || bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) || !utf8.Valid(body) || !json.Valid(body) {
		return 0, true
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return 0, true
	}
	if string(top["success"]) != "true" {
		return 0, true
	}
	var results []json.RawMessage
	_ = json.Unmarshal(top["results"], &results)
	if r := top["results"]; len(r) == 0 || r[0] != '[' {
		results = nil
	}
	n := int64(counted)
	for _, raw := range results {
		var m map[string]json.RawMessage
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
			continue
		}
		var typ string
		if t := m["type"]; len(t) > 0 && t[0] == '"' && json.Unmarshal(t, &typ) == nil && typ == "push" && string(m["duplicate"]) == "true" {
			n--
		}
	}
	return max(n, 0), true
}

func TestTxnTallyInPieces(t *testing.T) {
	body := []byte(`{"results":[{"type":"ack","duplicate":true},{"type":"push","duplicate":true},{"type":"p\u0075sh","duplicate":true,"duplicate":false},{"type":"push","type":"ack","duplicate":true},{"type":"push","duplicate":"true"},{"type":"push","duplicate":true,"x":{"type":"ack"}},null,3],"success":true,"transactionId":"t"}`)
	for split := 0; split <= len(body); split++ {
		tally := NewTxnTally()
		_, _ = tally.Write(body[:split])
		_, _ = tally.Write(body[split:])
		if got := tally.Billed(200, 10); got != 8 {
			t.Fatalf("split at %d: billed %d, want 8", split, got)
		}
	}
	if got, _ := modelTxnBilled(body, 10); got != 8 {
		t.Fatalf("model %d", got)
	}
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"success":true,"success":false}`, 0},
		{`{"success":false,"success":true}`, 5},
		{`{"success":"true"}`, 0},
		{`{"success":true,"results":[{"type":"push","duplicate":true}],"results":{}}`, 5},
		{`{"success":true,"results":[{"type":"push","duplicate":true}],"results":[]}`, 5},
		{`{"Success":true}`, 0},
		{`[{"success":true}]`, 0},
		{`{"success":true`, 0},
	} {
		if got := BillTransaction(200, []byte(c.body), 5); got != c.want {
			t.Errorf("%s: billed %d, want %d", c.body, got, c.want)
		}
	}
}

// TestTxnTallyLargeAnswer: a committed transaction whose answer is over the
// billing copy limit is billed from the answer as it streams.
func TestTxnTallyLargeAnswer(t *testing.T) {
	const items = 320_000
	tally := NewTxnTally()
	var written int64
	var chunk bytes.Buffer
	chunk.WriteString(`{"results":[`)
	for i := range items {
		if i > 0 {
			chunk.WriteByte(',')
		}
		dup := ""
		if i%1000 == 0 {
			dup = `,"duplicate":true`
		}
		fmt.Fprintf(&chunk, `{"index":0,"messageId":"01a22ac1-1864-7000-b275-3d182c33c1f1","partitionId":"eff8e77a-c055-4054-b749-1f2d67043dfd","queueName":"cat-next","success":true,"transactionId":"01a22ac1-1864-7000-b275-3d18%08d","type":"push"%s}`, i, dup)
		if chunk.Len() >= 32<<10 {
			written += int64(chunk.Len())
			_, _ = tally.Write(chunk.Bytes())
			chunk.Reset()
		}
	}
	chunk.WriteString(`],"success":true,"transactionId":"t"}`)
	written += int64(chunk.Len())
	_, _ = tally.Write(chunk.Bytes())
	if written <= MaxBilledBody {
		t.Fatalf("the answer is %d bytes, not over the copy limit", written)
	}
	if got := tally.Billed(200, items); got != items-items/1000 {
		t.Fatalf("billed %d, want %d", got, items-items/1000)
	}
}

func FuzzTxnTally(f *testing.F) {
	for _, s := range []string{
		`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"tx-9","type":"ack"},{"index":1,"messageId":"m","partitionId":"p","queueName":"cat-next","success":true,"transactionId":"tx-n9","type":"push"}],"success":true,"transactionId":"t"}`,
		`{"error":"ACK operation failed: Message not found","results":[{"dlq":false,"error":"Message not found","index":0,"success":false,"transactionId":"no-such-tx","type":"ack"}],"success":false,"transactionId":"b9"}`,
		`{"results":[{"type":"push","duplicate":true},{"type":"push","duplicate":true,"duplicate":null}],"success":true}`,
		`{"success":true,"results":{"type":"push","duplicate":true}}`, `{"success":1}`, `{}`, `[]`, ``,
	} {
		f.Add([]byte(s), uint8(3), uint16(4))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8, counted uint16) {
		want, sure := modelTxnBilled(body, int(counted))
		got := BillTransaction(200, body, int(counted))
		if sure && got != want {
			t.Fatalf("%q (%d counted): tally %d, model %d", body, counted, got, want)
		}
		size := int(piece%16) + 1
		tally := NewTxnTally()
		for rest := body; len(rest) > 0; {
			n := min(size, len(rest))
			_, _ = tally.Write(rest[:n])
			rest = rest[n:]
		}
		if pieces := tally.Billed(200, int(counted)); pieces != got {
			t.Fatalf("%q in pieces of %d: %d, whole %d", body, size, pieces, got)
		}
	})
}
