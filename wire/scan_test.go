package wire

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/threadcpu"
)

// eventLog keeps every Watcher event with its arguments, each string
// piece on its own, so that two readers agree only when they report the
// same events at the same places.
type eventLog struct{ b strings.Builder }

func (l *eventLog) Open(depth int, kind byte) { fmt.Fprintf(&l.b, "O%d%c ", depth, kind) }
func (l *eventLog) Close(depth int)           { fmt.Fprintf(&l.b, "C%d ", depth) }
func (l *eventLog) StringStart(depth int, key bool) {
	fmt.Fprintf(&l.b, "S%d%v ", depth, key)
}
func (l *eventLog) StringPart(raw []byte)        { fmt.Fprintf(&l.b, "P%q ", raw) }
func (l *eventLog) StringEnd()                   { l.b.WriteString("E ") }
func (l *eventLog) Scalar(depth int, first byte) { fmt.Fprintf(&l.b, "V%d%c ", depth, first) }

// errText is an error as the comparison sees it: its words, problem and
// offset.
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	var se *SyntaxError
	if e, ok := err.(*SyntaxError); ok {
		se = e
	}
	if se == nil {
		return "not a SyntaxError: " + err.Error()
	}
	return fmt.Sprintf("%d@%d %s", se.Problem, se.Offset, se.Error())
}

// piecesOf writes b to w cut at each of cuts (in order, within b) and
// closes: the verdict of the whole.
func piecesOf(b []byte, cuts []int, write func([]byte) error, closeFn func() error) error {
	from := 0
	for _, c := range cuts {
		if err := write(b[from:c]); err != nil {
			return err
		}
		from = c
	}
	if err := write(b[from:]); err != nil {
		return err
	}
	return closeFn()
}

// coreAgrees holds the scanner core to the readers it replaced on one
// text: Check and CheckStored give the same error (problem, offset,
// words); a Checker fed the text in pieces (every cut a caller may make,
// inside escapes and UTF-8 sequences too) gives the same error and tells
// its Watcher the same events, piece by piece, at any depth limit; and
// SkipValid and SkipValidString end at the same index from every start.
func coreAgrees(t *testing.T, b []byte) {
	t.Helper()
	for _, nul := range []bool{false, true} {
		check, old := Check, oldCheck
		if nul {
			check, old = CheckStored, oldCheckStored
		}
		if got, want := errText(check(b)), errText(old(b)); got != want {
			t.Fatalf("%q (refuse NUL %v): core %s, old %s", b, nul, got, want)
		}
	}
	// Cuts: none, each single cut of a short text, and a few spread
	// over a long one from its own bytes.
	cutSets := [][]int{nil}
	if len(b) <= 48 {
		for k := 0; k <= len(b); k++ {
			cutSets = append(cutSets, []int{k})
		}
	} else {
		var cuts []int
		for k := 0; k < len(b); k += 1 + int(b[k])%13 {
			cuts = append(cuts, k)
		}
		cutSets = append(cutSets, cuts, []int{len(b) / 2})
	}
	for _, cuts := range cutSets {
		for _, depth := range []int{0, 2} {
			var gotLog, wantLog eventLog
			nc := Checker{MaxDepth: depth, Watch: &gotLog, RefuseNUL: len(cuts)%2 == 1}
			oc := oldChecker{MaxDepth: depth, Watch: &wantLog, RefuseNUL: nc.RefuseNUL}
			got := errText(piecesOf(b, cuts, nc.Write, nc.Close))
			want := errText(piecesOf(b, cuts, oc.Write, oc.Close))
			if got != want || gotLog.b.String() != wantLog.b.String() {
				t.Fatalf("%q cut at %v, depth %d: core %s\n%s\nold %s\n%s", b, cuts, depth, got, gotLog.b.String(), want, wantLog.b.String())
			}
			if nc.Offset() != oc.Offset() {
				t.Fatalf("%q cut at %v: offset %d, old %d", b, cuts, nc.Offset(), oc.Offset())
			}
		}
	}
	for i := 0; i <= len(b) && i < 64; i++ {
		for _, outer := range []int{0, 1, DefaultMaxDepth - 2, DefaultMaxDepth} {
			for _, nul := range []bool{false, true} {
				if got, want := SkipValid(b, i, outer, nul), oldSkipValid(b, i, outer, nul); got != want {
					t.Fatalf("%q from %d (outer %d, NUL %v): SkipValid %d, old %d", b, i, outer, nul, got, want)
				}
			}
		}
		gotEnd, gotEsc := SkipValidString(b, i, true)
		wantEnd, wantEsc := oldSkipValidString(b, i, true)
		if gotEnd != wantEnd || gotEsc != wantEsc {
			t.Fatalf("%q from %d: SkipValidString %d %v, old %d %v", b, i, gotEnd, gotEsc, wantEnd, wantEsc)
		}
	}
}

// coreSeeds are texts at the places the core resumes from: every kind of
// token cut anywhere, escapes and surrogate pairs in every state, UTF-8
// sequences of every length cut and broken, and structure refused at each
// of its places.
var coreSeeds = []string{
	`{"a":[1,-2.5e+3,true,false,null,"x\u00e9\ud83d\ude00"],"b":{}}`,
	"[\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]", "[\"\xe2\x82\"]", "[\"\xf0\x9f\x98\"]", "[\"\xe0\x80\x80\"]",
	`["\ud83d\ude00\ud83d"]`, `["\ud83d\"`, `["\ud83d\u00e9"]`, `["\u00"]`, `{"\u0000":1}`, `{"k\u0000":"\u0000"}`,
	`[123456789012345678901234567890]`, `[-0.000001e-0009]`, `[1E+]`, `[-a]`, `[0.]`, `1 `, ` -1`, `12`, `1.5`,
	`[truth]`, `[nul]`, `[fals]`, ` true `, `{"a" :1 }`, `{"a":1 ,"b":2}`, `[1 ,2 ]`, `{"a":1]`, `[1}`, `{"a"1}`,
	`[[[[]]]]`, `[{"a":[{"b":[]}]}]`, `{"a":{"b":{"c":{}}}}`, `"a" "b"`, "\t\n\r ", "\xef\xbb\xbf1", " \xef",
	strings.Repeat(`{"k":"vvvvvvvvvv","n":12345,"f":1.25,"t":true},`, 4),
}

func TestCoreSeedsAgree(t *testing.T) {
	for _, s := range append(append(append([]string{}, coreSeeds...), fastSeeds...), storedSeeds...) {
		coreAgrees(t, []byte(s))
	}
}

// FuzzCoreAgreesWithOld holds the one scanner core to the two readers it
// replaced, on every input: the same verdicts, errors, Watcher events and
// ends (coreAgrees).
func FuzzCoreAgreesWithOld(f *testing.F) {
	for _, s := range coreSeeds {
		f.Add([]byte(s))
	}
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { coreAgrees(t, b) })
}

// TestCheckWholeAllocatesNothing: a whole body is read with the bit stack
// on the Go stack, at any depth a body has (128 levels).
func TestCheckWholeAllocatesNothing(t *testing.T) {
	body := []byte(strings.Repeat(`{"a":[`, 64) + `"x\u00e9"` + strings.Repeat("]}", 64))
	if n := testing.AllocsPerRun(20, func() {
		if err := CheckStored(body); err != nil {
			t.Fatal(err)
		}
		if SkipValid(body, 0, 0, true) != len(body) {
			t.Fatal("SkipValid")
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// BenchmarkCoreVsOld times the core against the readers it replaced on
// the same texts, in alternating blocks of the benchmark thread's CPU
// time (a neighbour taking the core inflates neither), and reports
// x-old: the median of the blocks' old time over the core's (above 1, the
// core is faster).
func BenchmarkCoreVsOld(b *testing.B) {
	item := `{"queue":"orders","partition":"customer-1","payload":{"orderId":1042,"customer":"customer-1","amount":10.95,"currency":"EUR","items":[{"sku":"SKU-0042","qty":2}],"note":"standard delivery","gift":false,"ref":null},"transactionId":"01a22ac0-e963-7042-986d-86e1125b0042"}`
	push := []byte(`{"items":[` + strings.TrimSuffix(strings.Repeat(item+",", 100), ",") + `]}`)
	accents := []byte(`{"items":[` + strings.TrimSuffix(strings.Repeat(`{"note":"crème brûlée für Müller, 東京 ✓ naïve façade"},`, 100), ",") + `]}`)
	escapes := []byte(`{"items":[` + strings.TrimSuffix(strings.Repeat(`{"note":"cr\u00e8me br\u00fbl\u00e9e \"quoted\"\n\ud83d\ude00"},`, 100), ",") + `]}`)
	pieces := func(write func([]byte) error, closeFn func() error, p []byte) bool {
		for k := 0; k < len(p); k += 4096 {
			if write(p[k:min(k+4096, len(p))]) != nil {
				return false
			}
		}
		return closeFn() == nil
	}
	for _, body := range []struct {
		name string
		b    []byte
	}{{"push100", push}, {"accents", accents}, {"escapes", escapes},
		{"strings", []byte("[" + strings.Repeat(`"abcdef",`, 999) + `"x"]`)},
		{"ints", []byte("[" + strings.Repeat(`1042,`, 999) + `1]`)},
		{"floats", []byte("[" + strings.Repeat(`10.95,`, 999) + `1]`)},
		{"members", []byte("{" + strings.Repeat(`"k":"v",`, 999) + `"x":1}`)},
		{"long", []byte(`["` + strings.Repeat("a", 8000) + `"]`)},
	} {
		for _, r := range []struct {
			name      string
			old, core func([]byte) bool
		}{
			{"check", func(p []byte) bool { return oldCheck(p) == nil }, func(p []byte) bool { return Check(p) == nil }},
			{"checker4k",
				func(p []byte) bool { var c oldChecker; return pieces(c.Write, c.Close, p) },
				func(p []byte) bool { var c Checker; return pieces(c.Write, c.Close, p) }},
			{"skipitems", func(p []byte) bool { return skipItems(p, oldSkipValid) }, func(p []byte) bool { return skipItems(p, SkipValid) }},
		} {
			if r.name == "skipitems" && !strings.HasPrefix(string(body.b), `{"items"`) {
				continue // a push's shape
			}
			b.Run(body.name+"/"+r.name, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				reps := max(1, 64<<10/len(body.b))
				block := func(read func([]byte) bool) func() {
					return func() {
						for range reps {
							if !read(body.b) {
								b.Fatal("refused")
							}
						}
					}
				}
				var p threadcpu.Paired
				b.SetBytes(int64(len(body.b) * reps))
				for b.Loop() {
					p.Block(block(r.old), block(r.core))
				}
				b.ReportMetric(p.Ratio(), "x-old")
			})
		}
	}
}

// skipItems reads the items of a push as the one-pass readers do: each
// member's value through skip on its own.
func skipItems(p []byte, skip func([]byte, int, int, bool) int) bool {
	ok := true
	Members(p, 0, func(_ []byte, at int) int {
		return Elements(p, at, func(at int) int {
			return Members(p, at, func(_ []byte, at int) int {
				e := skip(p, at, 2, true)
				if e < 0 {
					ok = false
					return ValueEnd(p, at)
				}
				return e
			})
		})
	})
	return ok
}
