package wire

import (
	"bytes"
	"math/bits"
	"math/rand"
	"strings"
	"testing"
)

// checkerVerdict is the Checker's reading of b, the reference the fast
// reader is held to.
func checkerVerdict(b []byte, refuseNUL bool) error {
	c := Checker{RefuseNUL: refuseNUL}
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

// fastSeeds are texts at the fast reader's edges: every byte class at
// every lane of the eight-byte loop, escapes cut short, surrogate pairs in
// every state, numbers at their grammar's corners, literals cut short,
// nesting at and past the limit, and space where the fast path skips its
// look for it.
var fastSeeds = []string{
	`"abcdefg"`, `"abcdefgh"`, `"abcdefghi"`, `"abcdefg\"`, `"abcdefgh\u0041"`,
	"\"abcdefg\x7f\"", "\"abcdefg\x1f\"", "\"abc\x00\"", "\"abcdefgh\xc3\"", "\"abcdefgh\xc3\xa9\"",
	"\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xc0\x80\"", "\"\xef\xbf\xbd\"", "\"\xf0\x9f\x98\x80abcdefgh\"",
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\n"`, `"\ud83d\ud83d"`, `"\ude00"`, `"\ud83d\u0041"`,
	`"\ud83d\ude0"`, `"\u12"`, `"\u12G4"`, `"\x"`, `"\`, `"`, `"\u0000"`, `"\u00000"`,
	`0`, `-0`, `-`, `01`, `1.`, `1.e5`, `1e`, `1e+`, `1E-7`, `-0.0e+00`, `.5`, `+1`, `1.5.5`, `00`, `-01`, `1x`,
	`true`, `tru`, `truex`, `false`, `fals`, `null`, `nul`, `nulll`, `[true,false,null]`, `[truefalse]`,
	`{}`, `[]`, `{ }`, `[ ]`, `{"a":1}`, `{"a" : 1 , "b" :[ 2 ] }`, " \t\r\n[1]\n", `{"a":1,}`, `[1,]`, `[,1]`,
	`{"a"}`, `{"a":}`, `{1:1}`, `{"a":1 "b":2}`, `[1 2]`, `[}`, `{]`, `{"a":[}]}`, `[[[]]]`, `[[[]]`, `]`, `}`,
	"\xef\xbb\xbf[]", "", " ", "[1]x", "[1] 2",
	strings.Repeat("[", DefaultMaxDepth) + strings.Repeat("]", DefaultMaxDepth),
	strings.Repeat("[", DefaultMaxDepth+1) + strings.Repeat("]", DefaultMaxDepth+1),
	strings.Repeat(`{"a":`, DefaultMaxDepth) + "1" + strings.Repeat("}", DefaultMaxDepth),
	strings.Repeat(`{"a":[`, 70) + "1" + strings.Repeat("]}", 70),
}

func TestFastSeedsAgree(t *testing.T) {
	for _, s := range append(append([]string{}, fastSeeds...), storedSeeds...) {
		fastAgrees(t, []byte(s))
	}
}

// fastAgrees holds the fast reader to the Checker on one text, with and
// without the U+0000 rule, and at every start a caller may give it.
func fastAgrees(t *testing.T, b []byte) {
	t.Helper()
	for _, nul := range []bool{false, true} {
		want := checkerVerdict(b, nul)
		if got := validWhole(b, nul); got != (want == nil) {
			t.Fatalf("%q (refuse NUL %v): fast reader %v, Checker %v", b, nul, got, want)
		}
		check := Check
		if nul {
			check = CheckStored
		}
		if err := check(b); (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Fatalf("%q: Check %v, Checker %v", b, err, want)
		}
	}
	// From a value's start, SkipValid ends where the value ends: a valid
	// text followed by anything is read up to its end.
	i := SkipSpace(b, 0)
	if i >= len(b) {
		return
	}
	tail := append(bytes.Clone(b), ` ,]}x`...)
	end := SkipValid(tail, i, 0, false)
	if checkerVerdict(b, false) == nil {
		if want := len(bytes.TrimRight(b, " \t\r\n")); end != want {
			t.Fatalf("%q: SkipValid ends at %d, the value at %d", b, end, want)
		}
	}
	if end >= 0 && checkerVerdict(tail[:end], false) != nil {
		t.Fatalf("%q: SkipValid took %q, which the Checker refuses", b, tail[:end])
	}
	if b[i] == '"' {
		sEnd, escaped := SkipValidString(tail, i, false)
		if sEnd != end {
			t.Fatalf("%q: SkipValidString ends at %d, SkipValid at %d", b, sEnd, end)
		}
		if sEnd >= 0 && escaped != bytes.Contains(tail[i:sEnd], []byte(`\`)) {
			t.Fatalf("%q: escaped %v", b, escaped)
		}
	}
	// Nested one level deeper than the caller says, the limit comes one
	// level sooner.
	if end >= 0 {
		wrapped := append(append([]byte("["), tail[i:end]...), ']')
		if deeper := SkipValid(tail, i, 1, false) >= 0; deeper != (checkerVerdict(wrapped, false) == nil) {
			t.Fatalf("%q: read at depth 1: %v, the Checker on it wrapped in an array: %v", b, deeper, checkerVerdict(wrapped, false))
		}
	}
}

// FuzzFastAgrees holds the fast reader to the Checker: the same verdict on
// every input, with and without the U+0000 rule, and the same refusal
// from Check and CheckStored.
func FuzzFastAgrees(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	for _, s := range storedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { fastAgrees(t, b) })
}

// TestFastEveryByteEveryLane puts each byte value at each position of a
// string long enough for two rounds of the eight-byte loop and its tail,
// and after a multi-byte character.
func TestFastEveryByteEveryLane(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 20; pos++ {
			for _, prefix := range []string{`["`, "[\"\xc3\xa9"} {
				run := []byte(strings.Repeat("a", 20))
				run[pos] = byte(c)
				body := append(append([]byte(prefix), run...), `"]`...)
				fastAgrees(t, body)
			}
		}
	}
}

// TestSpecialBytesLowestLaneExact holds the string loop's word test to a
// byte-by-byte reading: the lowest marked lane of specialBytes is the
// first byte of the eight that needs a look, and no lane is marked when
// none does, on random words rich in the bytes near the edges (quote,
// backslash, 0x1f/0x20, 0x7f/0x80) and on every pair of bytes at both
// ends of a word.
func TestSpecialBytesLowestLaneExact(t *testing.T) {
	needsLook := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	check := func(w uint64) {
		t.Helper()
		want := -1
		for k := 0; k < 8; k++ {
			if needsLook(byte(w >> (8 * k))) {
				want = k
				break
			}
		}
		got := -1
		if m := SpecialBytes(w); m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != want {
			t.Fatalf("%016x: lowest marked lane %d, want %d", w, got, want)
		}
	}
	const edges = "\"\\\x00\x01\x1f\x20\x21\x23\x5b\x5c\x5d\x7f\x80\xa2\xdc\xff"
	r := rand.New(rand.NewSource(26))
	for n := 0; n < 2_000_000; n++ {
		var w uint64
		for k := 0; k < 8; k++ {
			var c byte
			switch r.Intn(4) {
			case 0:
				c = byte(r.Intn(256))
			case 1:
				c = edges[r.Intn(len(edges))]
			default:
				c = byte(0x20 + r.Intn(0x60))
			}
			w |= uint64(c) << (8 * k)
		}
		check(w)
	}
	for a := 0; a < 256; a++ {
		for b := 0; b < 256; b++ {
			check(uint64(a) | uint64(b)<<8 | 0x4141414141410000)
			check(0x0000414141414141 | uint64(a)<<48 | uint64(b)<<56)
		}
	}
}

// validWhole is the whole-buffer verdict through SkipValid: one value,
// surrounding whitespace allowed.
func validWhole(b []byte, refuseNUL bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) {
		return false
	}
	i = SkipValid(b, i, 0, refuseNUL)
	return i >= 0 && SkipSpace(b, i) == len(b)
}
