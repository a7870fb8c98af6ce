package meter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// modelPopCount is the count as encoding/json reads the answer: the
// length of the top-level object's "messages" array (the last member of
// that name), else 0; ok is false when the model cannot read it.
func modelPopCount(body []byte) (n int64, ok bool) {
	if !json.Valid(body) || !utf8.Valid(body) || bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) ||
		bytes.Count(body, []byte("["))+bytes.Count(body, []byte("{")) >= 1000 {
		return 0, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return 0, true // not an object
	}
	var msgs []json.RawMessage
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return 0, true
	}
	return int64(len(msgs)), true
}

// popCountOf is PopKeys' count of body written in pieces of piece bytes.
func popCountOf(body []byte, piece int) int64 {
	p := NewPopKeys()
	writeInPieces(p, body, piece)
	n, _ := p.Result(200)
	return n
}

func TestPopCount(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int64
	}{
		{`{"messages":[],"success":true}`, 0},
		{`{"messages":[{"transactionId":"a","data":{"messages":[1,2,3]}},{"transactionId":"b"}]}`, 2},
		{`{"messages":[null,"x",1,[2],{"id":"y"}]}`, 5},
		{`{"messages":[{"id":1}],"messages":[{"id":2},{"id":3}]}`, 2},
		{`{"messages":[{"id":1}],"messages":null}`, 0},
		{`{"messa\u0067es":[{},{}]}`, 2},
		{`{"other":{"messages":[1,2]},"messages":[3]}`, 1},
		{`[{"messages":[1]}]`, 0},
		{`{"messages":[1,2]`, 0},
		{"", 0},
	} {
		for _, piece := range []int{1, 3, 1 << 20} {
			if got := popCountOf([]byte(tc.body), piece); got != tc.want {
				t.Errorf("%s in pieces of %d: %d, want %d", tc.body, piece, got, tc.want)
			}
		}
	}
	p := NewPopKeys()
	_, _ = p.Write([]byte(`{"messages":[{}]}`))
	if got, _ := p.Result(500); got != 0 {
		t.Fatalf("a 500 counted %d", got)
	}
}

// TestPopCountAgreesWithBillPop: where the copy suffices, PopKeys'
// streaming count and BillPop agree on what the answer delivered.
func TestPopCountAgreesWithBillPop(t *testing.T) {
	body := `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"transactionId":"t","partitionId":"p","data":{"n":1}},`, 500), ",") + `]}`
	n, _ := BillPop(200, []byte(body))
	if got := popCountOf([]byte(body), 4096); got != n || n != 500 {
		t.Fatalf("PopKeys %d, BillPop %d, want 500", got, n)
	}
}

func FuzzPopCount(f *testing.F) {
	for _, s := range []string{`{"messages":[{"id":"a"},{"id":"b"}]}`, `{"messages":[],"messages":[1]}`,
		`{"messages":"x"}`, `{"messages":[[[]]]}`, `{"a":1,"messages":[null]}`, "\xef\xbb\xbf{\"messages\":[1]}"} {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		got := popCountOf(body, int(piece)+1)
		want, ok := modelPopCount(body)
		if !ok {
			if got != 0 && !json.Valid(body) {
				t.Fatalf("an unreadable answer counted %d: %q", got, body)
			}
			return
		}
		if got != want {
			t.Fatalf("counted %d, model %d: %q", got, want, body)
		}
	})
}
