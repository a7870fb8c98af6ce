package wire

// Members and Elements walk a container of valid JSON text in place, in
// one pass: a caller that reads a value where it lies tells them where it
// ended, so no value is scanned twice to find its end first (as Object and
// Array must, to hand out slices). They trust their input: run Check first.

// Members walks the object whose '{' is at b[i]. For each member it calls
// fn with the key's raw text (between the quotes, escapes intact) and the
// index where the value starts; fn returns the index just past the value
// (ValueEnd(b, at) for a value it skips). Members returns the index just
// past the object.
func Members(b []byte, i int, fn func(key []byte, at int) int) int {
	i = SkipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		kEnd := StringEnd(b, i)
		key := b[i+1 : kEnd-1]
		at := SkipSpace(b, SkipSpace(b, kEnd)+1) // past the ':'
		if at >= len(b) {
			return len(b)
		}
		i = SkipSpace(b, fn(key, at))
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
	return min(i+1, len(b)) // past the '}'
}

// Elements walks the array whose '[' is at b[i], calling fn with the index
// where each element starts; fn returns the index just past it. Elements
// returns the index just past the array.
func Elements(b []byte, i int, fn func(at int) int) int {
	i = SkipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		i = SkipSpace(b, fn(i))
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
	return min(i+1, len(b)) // past the ']'
}

// MemberValues walks the checked object whose '{' is at b[i] once, sets
// into[k] to the raw text of the value of its member named names[k]
// (compared unescaped and exactly, case included; the last one when a name
// repeats, as the broker's parser keeps it; nil when absent), and returns
// the index just past the object. A value's text starts and ends with the
// value itself, no space around it.
func MemberValues(b []byte, i int, names []string, into [][]byte) int {
	return Members(b, i, func(k []byte, at int) int {
		e := ValueEnd(b, at)
		for n, name := range names {
			if UnescapedIs(k, name) {
				into[n] = b[at:e]
				break
			}
		}
		return e
	})
}

// TopMembers reads the named top-level members of an answer, by the rules
// of answers: the text must pass Check and be an object; into[k] is then
// the raw text of the last member named exactly names[k] (nil when
// absent), and ok is true.
func TopMembers(b []byte, names []string, into [][]byte) (ok bool) {
	if Check(b) != nil {
		return false
	}
	i := SkipSpace(b, 0)
	if b[i] != '{' {
		return false
	}
	MemberValues(b, i, names, into)
	return true
}
