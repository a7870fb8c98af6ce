package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// storedSeeds hold U+0000 and long or escaped strings where each rule of
// CheckStored, NULAt and StringChars could go wrong; they seed FuzzCheck.
var storedSeeds = []string{
	`{"items":[{"queue":"q","payload":{"a":"x\u0000y"}}]}`,
	`{"items":[{"queue":"q\u0000","payload":1}]}`,
	`{"k\u0000":1}`,
	`["\\u0000"]`,
	`["\\\u0000"]`,
	`["\\\\u0000"]`,
	`["\u00000"]`,
	`["\u0001\u0000"]`,
	`["\ud83d\ude00\u00e9\u0041x"]`,
	"[\"caf\xc3\xa9 \xf0\x9f\x98\x80\"]",
	`["` + strings.Repeat("\u00e9", 256) + `"]`,
	"[\"" + strings.Repeat("\xc3\xa9", 255) + "\"]",
}

func TestCheckStored(t *testing.T) {
	cases := []struct {
		body string
		at   int64 // -1: accepted
	}{
		{`{"a":"plain"}`, -1},
		{`{"a":"x\u0000y"}`, 7},
		{`{"k\u0000":1}`, 3},
		{`["\\u0000"]`, -1},
		{`["\\\u0000"]`, 4},
		{`["\u0001"]`, -1},
		{`["\u00000"]`, 2},
		{`{"deep":[[[{"x":["\u0000"]}]]]}`, 18},
	}
	for _, c := range cases {
		err := CheckStored([]byte(c.body))
		if err := Check([]byte(c.body)); err != nil {
			t.Fatalf("%s: Check refuses it: %v", c.body, err)
		}
		var got int64 = -1
		if se, ok := err.(*SyntaxError); ok && se.Problem == ProblemNUL {
			got = se.Offset
		} else if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got != c.at {
			t.Errorf("%s: refused at %d (%v), want %d", c.body, got, err, c.at)
		}
		if at := NULAt([]byte(c.body)); int64(at) != c.at {
			t.Errorf("%s: NULAt %d, want %d", c.body, at, c.at)
		}
	}
	err := CheckStored([]byte(`["\u0000"]`))
	if err == nil || err.Error() != `body holds U+0000 (\u0000) at byte 2; the broker cannot store it` {
		t.Fatalf("%v", err)
	}
	// Split anywhere, the escape is found at the same offset.
	body := []byte(`{"a":"xy\u0000"}`)
	for split := 0; split <= len(body); split++ {
		c := Checker{RefuseNUL: true}
		err := c.Write(body[:split])
		if err == nil {
			err = c.Write(body[split:])
		}
		if se, ok := err.(*SyntaxError); !ok || se.Problem != ProblemNUL || se.Offset != 8 {
			t.Fatalf("split at %d: %v", split, err)
		}
	}
	if at := NULAt([]byte("not json \x00 at all")); at != 9 {
		t.Fatalf("raw NUL at %d", at)
	}
	if at := NULAt([]byte("a\\u0000 then \x00")); at != 1 {
		t.Fatalf("escape before a raw NUL at %d", at)
	}
}

func TestStringChars(t *testing.T) {
	cases := map[string]int{
		`""`:                              0,
		`"abc"`:                           3,
		`"\u00e9\n\""`:                    3,
		`"\ud83d\ude00"`:                  1,
		`"\uD83D\uDE00x"`:                 2,
		"\"caf\xc3\xa9\xf0\x9f\x98\x80\"": 5,
		`"\\u0000"`:                       6,
	}
	for v, want := range cases {
		if got := StringChars([]byte(v)); got != want {
			t.Errorf("%s: %d characters, want %d", v, got, want)
		}
	}
}

// checkStoredAgrees holds CheckStored, NULAt and StringChars against
// encoding/json's decoding of a body Check accepted (checkErr nil).
func checkStoredAgrees(t *testing.T, body []byte, checkErr error) {
	t.Helper()
	stored := CheckStored(body)
	if checkErr != nil {
		// Refused too: for the same reason, or for a \u0000 before it.
		se, _ := stored.(*SyntaxError)
		ce, _ := checkErr.(*SyntaxError)
		if se == nil || ce == nil || (se.Error() != ce.Error() && (se.Problem != ProblemNUL || se.Offset > ce.Offset)) {
			t.Fatalf("%q: CheckStored %v, Check %v", body, stored, checkErr)
		}
		return
	}
	hasNUL := false
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if s, ok := tok.(string); ok {
			hasNUL = hasNUL || strings.ContainsRune(s, 0)
		}
	}
	if (stored != nil) != hasNUL {
		t.Fatalf("%q: CheckStored %v, decoded strings hold U+0000: %v", body, stored, hasNUL)
	}
	if (NULAt(body) >= 0) != hasNUL {
		t.Fatalf("%q: NULAt %d, decoded strings hold U+0000: %v", body, NULAt(body), hasNUL)
	}
	// Every string value's character count, as decoded.
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		end := StringEnd(body, i)
		var s string
		if err := json.Unmarshal(body[i:end], &s); err != nil {
			t.Fatalf("%q: string at %d: %v", body, i, err)
		}
		if got := StringChars(body[i:end]); got != utf8.RuneCountInString(s) {
			t.Fatalf("%q: StringChars %d, decoded %d", body[i:end], got, utf8.RuneCountInString(s))
		}
		i = end - 1
	}
}

// FuzzUnquote holds Unquote to Check and to encoding/json: it refuses
// exactly what Check refuses, and decodes the rest as encoding/json does;
// UnescapedIs agrees with that text.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{``, `abc`, `a\"b`, `\\u0071`, `\u0071ueen`, `\ud83d\ude00`, `\ud83d`, `\ude00`,
		`\u00e9t\u00E9`, "caf\u00e9", `\b\f\n\r\t\/`, `\x`, `\u12`, "\xff", "a\x01", `\u0000`} {
		f.Add([]byte(s), "queen")
	}
	f.Fuzz(func(t *testing.T, raw []byte, word string) {
		quoted := append(append([]byte{'"'}, raw...), '"')
		got, ok := Unquote(raw, nil)
		valid := Check(quoted) == nil
		if ok != valid {
			t.Fatalf("%q: Unquote ok %v, Check accepts %v", raw, ok, valid)
		}
		if !ok {
			return // UnescapedIs takes checked text only
		}
		var want string
		if err := json.Unmarshal(quoted, &want); err != nil {
			t.Fatalf("%q: encoding/json refuses what Check accepts: %v", raw, err)
		}
		if string(got) != want {
			t.Fatalf("%q: Unquote %q, encoding/json %q", raw, got, want)
		}
		if is := UnescapedIs(raw, word); is != (want == word) {
			t.Fatalf("%q: UnescapedIs(%q) %v, want %v", raw, word, is, want == word)
		}
		if is := UnescapedIs(raw, want); !is {
			t.Fatalf("%q: UnescapedIs of its own text %q is false", raw, want)
		}
	})
}
