package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func problemOf(err error) Problem {
	var se *SyntaxError
	if errors.As(err, &se) {
		return se.Problem
	}
	return 0
}

func TestCheck(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		body string
		want Problem // 0: accepted
		at   int64
	}{
		{`{"items":[{"queue":"q","payload":{"a":[1,-2.5e+3,true,false,null,"x\u00e9\ud83d\ude00"]}}]}`, 0, 0},
		{" \t\n[]\r\n", 0, 0},
		{`0`, 0, 0},
		{`-0.5E-7`, 0, 0},
		{`"top"`, 0, 0},
		{`null`, 0, 0},
		{"\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", 0, 0},
		{deep(DefaultMaxDepth), 0, 0},
		{``, ProblemEmpty, 0},
		{"  \n", ProblemEmpty, 3},
		{"\xef\xbb\xbf{}", ProblemBOM, 0},
		{`{"items":[{"queue":"u","payload":"` + "\xff\xfe" + `"}]}`, ProblemUTF8, 34},
		{"\"\xe2\x28\xa1\"", ProblemUTF8, 1},
		{"\"\xed\xa0\x80\"", ProblemUTF8, 1}, // an encoded surrogate
		{"\"\xc0\xaf\"", ProblemUTF8, 1},     // overlong
		{"\"\xf4\x90\x80\x80\"", ProblemUTF8, 1},
		{deep(DefaultMaxDepth + 1), ProblemDepth, DefaultMaxDepth},
		{`"\ud800"`, ProblemSyntax, 7},
		{`"\ud800x"`, ProblemSyntax, 7},
		{`"\ud800\n"`, ProblemSyntax, 8},
		{`"\udc00"`, ProblemSyntax, 6},
		{`"\ud800\ud800"`, ProblemSyntax, 12},
		{`{"a":1,}`, ProblemSyntax, 7},
		{`[1,]`, ProblemSyntax, 3},
		{`[01]`, ProblemSyntax, 2},
		{`[1.]`, ProblemSyntax, 3},
		{`[.5]`, ProblemSyntax, 1},
		{`[-]`, ProblemSyntax, 2},
		{`[1e]`, ProblemSyntax, 3},
		{`{"a" 1}`, ProblemSyntax, 5},
		{`{1:2}`, ProblemSyntax, 1},
		{`[1}`, ProblemSyntax, 2},
		{`{}}`, ProblemSyntax, 2},
		{`{} {}`, ProblemSyntax, 3},
		{`[tru]`, ProblemSyntax, 4},
		{"[\"a\tb\"]", ProblemSyntax, 3},
		{`["\x"]`, ProblemSyntax, 3},
		{`["\u12G4"]`, ProblemSyntax, 6},
		{`{"a":`, ProblemTruncated, 5},
		{`"abc`, ProblemTruncated, 4},
		{`-`, ProblemTruncated, 1},
		{`NaN`, ProblemSyntax, 0},
		{`// c` + "\n{}", ProblemSyntax, 0},
	}
	for _, c := range cases {
		err := Check([]byte(c.body))
		if got := problemOf(err); got != c.want {
			t.Errorf("%q: problem %d (%v), want %d", c.body, got, err, c.want)
			continue
		}
		var se *SyntaxError
		if c.want != 0 && errors.As(err, &se) && se.Offset != c.at {
			t.Errorf("%q: offset %d (%v), want %d", c.body, se.Offset, err, c.at)
		}
	}
}

func TestCheckMessages(t *testing.T) {
	body := []byte(`{"items":[{"queue":"u","payload":"` + "\xff\xfe" + `"}]}`)
	if err := Check(body); err == nil || err.Error() != "body is not valid UTF-8 at byte 34" {
		t.Fatalf("%v", err)
	}
	if got := InvalidUTF8(body); got != 34 {
		t.Fatalf("InvalidUTF8 %d", got)
	}
	if got := InvalidUTF8([]byte("plain \xe2\x82\xac")); got != -1 {
		t.Fatalf("InvalidUTF8 of valid text %d", got)
	}
	if err := Check([]byte(`{"a":1,}`)); err == nil || err.Error() != "body is not valid JSON: expected a member name, found '}' at byte 7" {
		t.Fatalf("%v", err)
	}
	if err := Check([]byte(strings.Repeat("[", 1001))); err == nil || err.Error() != "body nests deeper than 1000 levels at byte 1000" {
		t.Fatalf("%v", err)
	}
}

// TestCheckAnyDepthWithLimitOff shows the checker holds no recursion: a
// nesting far past encoding/json's limit is read to its end.
func TestCheckAnyDepthWithLimitOff(t *testing.T) {
	const n = 200_000
	body := strings.Repeat(`{"a":[`, n) + "1" + strings.Repeat("]}", n)
	c := Checker{MaxDepth: 2*n + 1}
	if err := c.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// recorder keeps what a Watcher is told, as text.
type recorder struct{ b strings.Builder }

func (r *recorder) Open(depth int, kind byte) { r.b.WriteString(string(kind)) }
func (r *recorder) Close(depth int)           { r.b.WriteString(")") }
func (r *recorder) StringStart(depth int, key bool) {
	if key {
		r.b.WriteString("k<")
	} else {
		r.b.WriteString("v<")
	}
}
func (r *recorder) StringPart(raw []byte)        { r.b.Write(raw) }
func (r *recorder) StringEnd()                   { r.b.WriteString(">") }
func (r *recorder) Scalar(depth int, first byte) { r.b.WriteString("#" + string(first)) }

func TestWatcherInPieces(t *testing.T) {
	body := []byte(`[{"status":"queued","q":"a\"b\u00e9"},{"n":[12,"x",true,null,-1]},false]`)
	const want = `[{k<status>v<queued>k<q>v<a\"b\u00e9>){k<n>[#1v<x>#t#n#-))#f)`
	for split := 0; split <= len(body); split++ {
		var r recorder
		c := Checker{Watch: &r}
		if err := c.Write(body[:split]); err != nil {
			t.Fatal(err)
		}
		if err := c.Write(body[split:]); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := r.b.String(); got != want {
			t.Fatalf("split %d: %s", split, got)
		}
	}
}

// modelCheck is what the checker must decide, from encoding/json and
// unicode/utf8: valid JSON, valid UTF-8, no byte-order mark, no nesting
// past the limit, and no half surrogate pair in an escape. sure is false
// when the model cannot tell a half pair from a U+FFFD the text really
// holds.
func modelCheck(body []byte) (ok, sure bool) {
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) || !utf8.Valid(body) || !json.Valid(body) {
		return false, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, replaced := 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
				if depth > DefaultMaxDepth {
					return false, true
				}
			} else {
				depth--
			}
		case string:
			replaced = replaced || strings.ContainsRune(v, utf8.RuneError)
		}
	}
	if !replaced {
		return true, true
	}
	lower := bytes.ToLower(body)
	if bytes.Contains(lower, []byte(`\ufffd`)) || bytes.Contains(body, []byte("\xef\xbf\xbd")) {
		return false, false
	}
	return false, true // encoding/json replaced a half pair
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"queue":"q","payload":{"a":[1,-2.5e+3,true,false,null,"x\u00e9\ud83d\ude00"]}}]}`,
		`{"items":[{"queue":"u","payload":"` + "\xff\xfe" + `"}]}`,
		"\xef\xbb\xbf{\"operations\":[{\"op\":\"put\"}]}",
		`"\ud800"`, `"\ud800\udc00"`, `"\ufffd"`, `[1e5,-0,0.0e-0]`,
		`{"a":1,}`, `[01]`, ``, ` `, `{"a":`,
		strings.Repeat("[", DefaultMaxDepth+1) + strings.Repeat("]", DefaultMaxDepth+1),
	} {
		f.Add([]byte(s))
	}
	for _, s := range storedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := Check(body)
		want, sure := modelCheck(body)
		if sure && (err == nil) != want {
			t.Fatalf("%q: checker %v, model accepts=%v", body, err, want)
		}
		checkStoredAgrees(t, body, err)
		if !sure && err != nil && problemOf(err) != ProblemSyntax {
			t.Fatalf("%q: checker %v, model unsure about a surrogate", body, err)
		}
		// The same text in two pieces gets the same verdict.
		split := len(body) / 2
		if len(body) > 0 {
			split = int(body[0]) % (len(body) + 1)
		}
		var c Checker
		err2 := c.Write(body[:split])
		if err2 == nil {
			err2 = c.Write(body[split:])
		}
		if err2 == nil {
			err2 = c.Close()
		}
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("%q split at %d: %v, whole: %v", body, split, err2, err)
		}
		if at := InvalidUTF8(body); (at >= 0) == utf8.Valid(body) {
			t.Fatalf("%q: InvalidUTF8 %d", body, at)
		}
	})
}

func TestMembersAndElements(t *testing.T) {
	body := []byte(` { "a" : [1, {"b":"x\"y"}, null] , "c\"d":"e" , "f": -1.5e3, "g":{}, "h":[]}`)
	var got []string
	end := Members(body, SkipSpace(body, 0), func(key []byte, at int) int {
		got = append(got, string(key))
		if string(key) == "a" {
			return Elements(body, at, func(at int) int {
				e := ValueEnd(body, at)
				got = append(got, "["+string(body[at:e])+"]")
				return e
			})
		}
		e := ValueEnd(body, at)
		got = append(got, string(body[at:e]))
		return e
	})
	want := `a [1] [{"b":"x\"y"}] [null] c\"d "e" f -1.5e3 g {} h []`
	if strings.Join(got, " ") != want || end != len(body) {
		t.Fatalf("walked %q to %d of %d", strings.Join(got, " "), end, len(body))
	}
}

// BenchmarkCheck is the checker over a 100-item push as SDKs send it.
func BenchmarkCheck(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"queue":"orders","partition":"customer-1","payload":{"orderId":1042,"customer":"customer-1","amount":10.95,"currency":"EUR","items":[{"sku":"SKU-0042","qty":2}],"note":"standard delivery","gift":false,"ref":null},"transactionId":"01a22ac0-e963-7042-986d-86e1125b0042"}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckLongStringRuns puts every interesting byte at every position of
// a long string, across the eight-byte fast path's lanes and its tail.
func TestCheckLongStringRuns(t *testing.T) {
	for _, c := range []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7e, 0x7f, 0x80, 0xc3, 0xff} {
		for pos := 0; pos < 40; pos++ {
			run := []byte(strings.Repeat("a", 40))
			run[pos] = c
			body := append(append([]byte(`["`), run...), `"]`...)
			err := Check(body)
			want, sure := modelCheck(body)
			if sure && (err == nil) != want {
				t.Errorf("byte %#x at %d: checker %v, model accepts=%v", c, pos, err, want)
			}
		}
	}
}
