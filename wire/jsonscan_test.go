package wire

import "testing"

func TestWalk(t *testing.T) {
	body := []byte(` { "a" : [1, {"b":"x\"y"}, null] , "c\"d":"e" , "f": -1.5e3}`)
	var keys []string
	var vals []string
	Members(body, SkipSpace(body, 0), func(k []byte, at int) int {
		end := ValueEnd(body, at)
		keys, vals = append(keys, string(k)), append(vals, string(body[at:end]))
		return end
	})
	if len(keys) != 3 || keys[1] != `c\"d` || vals[0] != `[1, {"b":"x\"y"}, null]` || vals[2] != "-1.5e3" {
		t.Fatalf("keys %q values %q", keys, vals)
	}
	var elems []string
	for it := Array([]byte(vals[0])); ; {
		e, more := it.Next()
		if !more {
			break
		}
		elems = append(elems, string(e))
	}
	if len(elems) != 3 || elems[1] != `{"b":"x\"y"}` || elems[2] != "null" {
		t.Fatalf("elements %q", elems)
	}
}
