package meter

import (
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

// A pop answer cut at any byte bills the messages begun before the cut,
// whether its start arrived in one piece (a kept copy) or in several (an
// answer too large to keep); a whole answer bills what Result does, and a
// start that is not a JSON object bills nothing.
func TestPopBegunAtEveryCut(t *testing.T) {
	body := popAnswerBody(5, 40)
	s := string(body)
	// Where each message opens: the test finds them by the member each
	// starts with.
	var opens []int
	for i := 0; ; {
		j := strings.Index(s[i:], `{"consumerGroup":"worker","createdAt"`)
		if j < 0 {
			break
		}
		opens = append(opens, i+j)
		i += j + 1
	}
	if len(opens) != 5 {
		t.Fatalf("found %d messages in the answer, want 5", len(opens))
	}
	for at := 0; at <= len(body); at++ {
		var want int64
		for _, o := range opens {
			if o < at {
				want++
			}
		}
		c := NewPopKeys()
		_, _ = c.Write(body[:at])
		k := NewPopKeys()
		_, _ = k.Write(body[:at/2])
		_, _ = k.Write(body[at/2 : at])
		if got := c.Begun(200); got != want {
			t.Fatalf("cut at %d (%q): Begun of one piece %d, want %d", at, s[max(0, at-20):at], got, want)
		}
		if got := k.Begun(200); got != want {
			t.Fatalf("cut at %d (%q): Begun of two pieces %d, want %d", at, s[max(0, at-20):at], got, want)
		}
		if got := c.Begun(500); got != 0 {
			t.Fatalf("cut at %d: a 500 answer bills %d", at, got)
		}
	}
	whole := NewPopKeys()
	_, _ = whole.Write(body)
	if n, _ := whole.Result(200); whole.Begun(200) != 5 || n != 5 {
		t.Fatalf("the whole answer: Begun %d, Result %d, want 5", whole.Begun(200), n)
	}
	for _, bad := range []string{`[{"messages":[{}]`, `{"messages":[{}}`, `{"messages":[1,]`, `{"messages":7,`} {
		c := NewPopKeys()
		_, _ = c.Write([]byte(bad))
		if c.Begun(200) != 0 {
			t.Fatalf("%s: Begun %d, want 0", bad, c.Begun(200))
		}
	}
}

// FuzzPopBegun: at any cut of any answer, the start read in one piece and
// in pieces of any size begun the same messages; a whole answer read as a
// pop begun exactly the messages it delivered; and a longer start of an
// answer the broker's grammar accepts never begun fewer. (encoding/json's Valid is no
// oracle here: it takes bytes that are not UTF-8, which the broker never
// sends and the readers refuse, so such an answer bills 0 whole.)
func FuzzPopBegun(f *testing.F) {
	for _, s := range []string{`{"messages":[{"id":"a"},{"id":"b"}]}`, `{"messages":[],"messages":[1]}`,
		`{"messages":"x"}`, `{"messages":[[[]]]}`, `{"a":1,"messages":[null]}`, string(popAnswerBody(3, 10))} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		at := int(cut) % (len(body) + 1)
		c, k := NewPopKeys(), NewPopKeys()
		_, _ = c.Write(body[:at])
		writeInPieces(k, body[:at], int(cut%13)+1)
		if c.Begun(200) != k.Begun(200) {
			t.Fatalf("cut at %d: begun %d in one piece, %d in pieces of %d: %q", at, c.Begun(200), k.Begun(200), cut%13+1, body)
		}
		whole := NewPopKeys()
		_, _ = whole.Write(body)
		if n, _ := whole.Result(200); n > 0 && whole.Begun(200) != n {
			t.Fatalf("a whole answer of %d messages begun %d: %q", n, whole.Begun(200), body)
		}
		if wire.Check(body) == nil && c.Begun(200) > whole.Begun(200) && strings.Count(string(body), `"messages"`) <= 1 {
			t.Fatalf("the start to %d begun %d, the whole answer %d: %q", at, c.Begun(200), whole.Begun(200), body)
		}
	})
}
