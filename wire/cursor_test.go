package wire

import (
	"strings"
	"testing"
)

// cursorWalk reads the value at b[i], with outer containers open around
// it, as a one-pass reader does: the containers of its first levels with
// the cursor, every other value with SkipValid. It returns the index just
// past the value, or -1. Where a member name starts, it holds
// PushItemMember to MemberName.
func cursorWalk(t *testing.T, b []byte, i, outer int) int {
	c := At(b, i)
	if c != '{' && c != '[' || outer >= 3 {
		return SkipValid(b, i, outer, true)
	}
	closing := byte(']')
	if c == '{' {
		closing = '}'
	}
	for j, more := FirstIn(b, i, closing); ; {
		if !more {
			return j
		}
		at := j
		if c == '{' {
			var name []byte
			var escaped bool
			if name, escaped, at = MemberName(b, j); at < 0 {
				return -1
			}
			k := PushItemMemberNamed(name, escaped)
			if k >= 0 && !NameIs(name, escaped, PushItemMembers[k]) {
				t.Fatalf("%q at %d: PushItemMemberNamed says %s", b, j, PushItemMembers[k])
			}
			if known, knownAt := PushItemMember(b, j); knownAt >= 0 && (known != k || SkipSpace(b, knownAt) != at) {
				t.Fatalf("%q at %d: PushItemMember says member %d at %d, MemberName %d at %d", b, j, known, knownAt, k, at)
			}
		}
		end := cursorWalk(t, b, at, outer+1)
		if end < 0 {
			return -1
		}
		if CommaThen(b, end, At(b, end+1)) != (At(b, end) == ',' && end+1 < len(b)) {
			t.Fatalf("%q at %d: CommaThen disagrees with the bytes", b, end)
		}
		if j, more = NextIn(b, end, closing); j < 0 {
			return -1
		}
	}
}

// cursorAccepts reports whether the cursor and SkipValid read b whole.
func cursorAccepts(t *testing.T, b []byte) bool {
	i := SkipSpace(b, 0)
	end := cursorWalk(t, b, i, 0)
	return end >= 0 && SkipSpace(b, end) == len(b)
}

var cursorSeeds = []string{
	`{"queue":"q","partition":"p","transactionId":"t","payload":{"a":[1,2]},"traceId":null}`,
	` { "queue" : "q" , "items" : [ { } , [ ] , 1 ] } `,
	`{"\u0071ueue":"q","p\u0061yload":1}`,
	`[{"queue":1},{"queue" :2},{"queue": 3}]`,
	`{"queue":"q",}`, `{"queue":"q"`, `{"queue" "q"}`, `{,}`, `[,1]`, `[1,]`, `[1 2]`,
	`{"a":1}x`, `{}`, `[]`, ``, ` `, `"s"`, `1`, `{"a":"\u0000"}`, "{\"a\":\"\xff\"}",
	"\xef\xbb\xbf{}", `{"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"}`,
	`{"a":` + strings.Repeat("[", DefaultMaxDepth-1) + strings.Repeat("]", DefaultMaxDepth-1) + `}`,
	`{"a":` + strings.Repeat("[", DefaultMaxDepth) + strings.Repeat("]", DefaultMaxDepth) + `}`,
}

// FuzzCursorAgrees holds the cursor, with SkipValid for what it does not
// walk, to CheckStored: a one-pass reader made of them reads exactly the
// texts the checker accepts.
func FuzzCursorAgrees(f *testing.F) {
	for _, s := range cursorSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := cursorAccepts(t, b), CheckStored(b) == nil; got != want {
			t.Fatalf("%q: the cursor accepts %v, CheckStored %v", b, got, want)
		}
	})
}

func TestCursorSeedsAgree(t *testing.T) {
	for _, s := range cursorSeeds {
		if got, want := cursorAccepts(t, []byte(s)), CheckStored([]byte(s)) == nil; got != want {
			t.Errorf("%q: the cursor accepts %v, CheckStored %v", s, got, want)
		}
	}
}

func TestMemberName(t *testing.T) {
	for _, c := range []struct {
		text, name string
		escaped    bool
		at         int
	}{
		{`"queue":1`, "queue", false, 8},
		{`"queue" : 1`, "queue", false, 10},
		{`"q\u0075eue":1`, `q\u0075eue`, true, 13},
		{`"queue" 1`, "", false, -1},
		{`queue:1`, "", false, -1},
		{`"que`, "", false, -1},
	} {
		name, escaped, at := MemberName([]byte(c.text), 0)
		if string(name) != c.name || escaped != c.escaped || at != c.at {
			t.Errorf("%s: %q %v %d, want %q %v %d", c.text, name, escaped, at, c.name, c.escaped, c.at)
		}
	}
	if !NameIs([]byte(`q\u0075eue`), true, "queue") || NameIs([]byte(`q\u0075eue`), false, "queue") {
		t.Error("NameIs does not unescape exactly when told the name is escaped")
	}
}

func TestFirstAndNextIn(t *testing.T) {
	b := []byte(`[ ] [ 1 , 2 ]`)
	if next, more := FirstIn(b, 0, ']'); more || next != 3 {
		t.Errorf("an empty array: %d %v", next, more)
	}
	if next, more := FirstIn(b, 4, ']'); !more || next != 6 {
		t.Errorf("the first element: %d %v", next, more)
	}
	if next, more := NextIn(b, 7, ']'); !more || next != 10 {
		t.Errorf("after a comma: %d %v", next, more)
	}
	if next, more := NextIn(b, 11, ']'); more || next != 13 {
		t.Errorf("at the closing bracket: %d %v", next, more)
	}
	if next, _ := NextIn(b, 11, '}'); next != -1 {
		t.Errorf("a bracket of the other kind: %d", next)
	}
	if At(b, len(b)) != 0 || !CommaThen([]byte(`1,{`), 1, '{') || CommaThen([]byte(`1,`), 1, '{') {
		t.Error("At or CommaThen past the end")
	}
}
