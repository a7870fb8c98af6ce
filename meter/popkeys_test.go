package meter

import (
	"slices"
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

func popKeysOf(body []byte, piece int) (int64, []string) {
	p := NewPopKeys()
	for len(body) > 0 {
		n := min(piece, len(body))
		_, _ = p.Write(body[:n])
		body = body[n:]
	}
	return p.Result(200)
}

// On every recorded pop answer, the streamed keys are BillPop's, in any
// piece size.
func TestPopKeysMatchBillPopOnFixtures(t *testing.T) {
	pops := allFixtures(t, "GET", func(p string) bool { return strings.HasPrefix(p, "/api/v1/pop/queue/") })
	if len(pops) < 10 {
		t.Fatalf("only %d pop fixtures", len(pops))
	}
	for _, ex := range pops {
		body := ex.body(t)
		want, wantKeys := BillPop(200, body)
		for _, piece := range []int{1, 7, 4096} {
			n, keys := popKeysOf(body, piece)
			if n != want || !slices.Equal(keys, wantKeys) {
				t.Errorf("%s in pieces of %d: %d %q, BillPop %d %q", ex.ref, piece, n, keys, want, wantKeys)
			}
		}
	}
}

func TestPopKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want int64
		keys []string
	}{
		{"queue mode", `{"consumerGroup":"__QUEUE_MODE__","messages":[{"partitionId":"p","transactionId":"t1","data":{"transactionId":"no"}},{"partitionId":"p","transactionId":"t2"}]}`,
			2, []string{"p/t1/__QUEUE_MODE__", "p/t2/__QUEUE_MODE__"}},
		{"top-level group after the messages", `{"messages":[{"partitionId":"p","transactionId":"t"}],"consumerGroup":"g"}`, 1, []string{"p/t/g"}},
		{"own group wins", `{"consumerGroup":"g","messages":[{"partitionId":"p","transactionId":"t","consumerGroup":"own"}]}`, 1, []string{"p/t/own"}},
		{"ids only", `{"messages":[{"id":"m1"},{"id":"m2","data":[1,{"id":"x"}]}]}`, 2, []string{"id/m1/", "id/m2/"}},
		{"the last messages member wins", `{"messages":[{"id":"a"}],"messages":[{"id":"b"},{"id":"c"}]}`, 2, []string{"id/b/", "id/c/"}},
		{"the last field wins", `{"messages":[{"id":"a","id":"b"}]}`, 1, []string{"id/b/"}},
		{"an escaped name is read decoded", `{"messa\u0067es":[{"\u0069d":"a"}]}`, 1, []string{"id/a/"}},
		// Fail closed: what is not read exactly gets no key (billed as a
		// first delivery, not remembered); the count stays whole.
		{"escaped value", `{"messages":[{"partitionId":"p","transactionId":"t\u0031"},{"id":"ok"}]}`, 2, []string{"id/ok/"}},
		{"value not a string", `{"messages":[{"partitionId":"p","transactionId":7},{"id":{"x":1}}]}`, 2, nil},
		{"group null is no group", `{"consumerGroup":"g","messages":[{"id":"a","consumerGroup":null}]}`, 1, []string{"id/a/g"}},
		{"group not a string", `{"messages":[{"id":"a","consumerGroup":5}]}`, 1, nil},
		{"the last field wins, read or not", `{"consumerGroup":7,"consumerGroup":"g","messages":[{"id":5,"id":"a"},{"id":"b","id":5}]}`, 2, []string{"id/a/g"}},
		{"names are exact", `{"Messages":[{"id":"a"}],"messages":[{"ID":"x","Id":"y","id":"b"}]}`, 1, []string{"id/b/"}},
		{"top-level group not a string", `{"consumerGroup":["g"],"messages":[{"id":"a"},{"id":"b","consumerGroup":"own"}]}`, 2, []string{"id/b/own"}},
		{"escaped top-level group", `{"consumerGroup":"g\u0031","messages":[{"id":"a"}]}`, 1, nil},
		{"elements that are no object", `{"messages":[null,1,"s",[{"id":"x"}],{"id":"y"}]}`, 5, []string{"id/y/"}},
		{"field too long", `{"messages":[{"id":"` + strings.Repeat("z", maxPopKeyField+1) + `"}]}`, 1, nil},
		{"not an object", `[{"messages":[{"id":"a"}]}]`, 0, nil},
		{"unreadable", `{"messages":[{"id":"a"}]`, 0, nil},
	} {
		for _, piece := range []int{1, 5, 1 << 20} {
			n, keys := popKeysOf([]byte(tc.body), piece)
			if n != tc.want || !slices.Equal(keys, tc.keys) {
				t.Errorf("%s in pieces of %d: %d %q, want %d %q", tc.name, piece, n, keys, tc.want, tc.keys)
			}
		}
	}
	p := NewPopKeys()
	_, _ = p.Write([]byte(`{"messages":[{"id":"a"}]}`))
	if n, keys := p.Result(502); n != 0 || keys != nil {
		t.Fatalf("a 502 billed %d %q", n, keys)
	}
}

// Past maxStreamedPopKeys messages, the rest are counted but not keyed.
func TestPopKeysBounded(t *testing.T) {
	total := maxStreamedPopKeys + 10
	body := `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"id":"m"},`, total), ",") + `]}`
	n, keys := popKeysOf([]byte(body), 1<<16)
	if n != int64(total) || len(keys) != maxStreamedPopKeys {
		t.Fatalf("%d messages, %d keys; want %d and %d", n, len(keys), total, maxStreamedPopKeys)
	}
}

// FuzzPopKeys: the streamed count is the model's (modelPopCount) in
// pieces of any size, and every key it gives is one BillPop gives for the
// same answer: it never invents one, so it can only bill more than
// BillPop, never less. Both are the same reader, so where PopKeys' bounds
// cannot bite (an answer in one piece too short to hold a field past
// maxPopKeyField, or one too short to hold a field past what a cut string
// carries) the keys are BillPop's, in order.
func FuzzPopKeys(f *testing.F) {
	for _, s := range []string{
		`{"consumerGroup":"g","messages":[{"partitionId":"p","transactionId":"t"},{"id":"i"}]}`,
		`{"messages":[{"id":"a","consumerGroup":"c"}],"consumerGroup":"late"}`,
		`{"messages":[{"id":"a"}],"messages":[null]}`, `{"messages":[{"id":"\u0061"}]}`,
		`{"messages":[{"partitionId":1,"transactionId":"t","id":"x"}]}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		n, keys := popKeysOf(body, int(piece)+1)
		if want, ok := modelPopCount(body); ok && n != want {
			t.Fatalf("count %d, the model %d: %q", n, want, body)
		}
		if n != 0 && wire.Check(body) != nil {
			t.Fatalf("an answer the grammar refuses counted %d: %q", n, body)
		}
		if int64(len(keys)) > n {
			t.Fatalf("%d keys for %d messages: %q", len(keys), n, body)
		}
		_, ids := BillPop(200, body)
		left := map[string]int{}
		for _, id := range ids {
			left[id]++
		}
		for _, k := range keys {
			if left[k] == 0 {
				t.Fatalf("key %q that BillPop does not give (%q): %q", k, ids, body)
			}
			left[k]--
		}
		// Past those bounds PopKeys may key fewer: a field past
		// maxPopKeyField, or one past the 64 bytes wire.Stream carries
		// when the end of a piece cuts it.
		whole := len(body) <= int(piece)+1
		if len(body) <= maxPopKeyField && (whole || len(body) <= 64) && !slices.Equal(keys, ids) {
			t.Fatalf("keys %q, BillPop's %q: %q", keys, ids, body)
		}
	})
}
