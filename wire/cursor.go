package wire

// The cursor of a one-pass reader: a reader that checks a body and reads
// it in the same pass walks the containers it looks into with these, and
// hands every value it does not look into to SkipValid, which checks it
// and ends it. Those that move through the text (FirstIn, NextIn,
// MemberName) do not trust it: each returns -1 where the text is not what
// the grammar allows there, and the reader then asks CheckStored where
// the first bad byte is.

// At is b[i], or 0 (which starts no JSON token) past the end.
func At(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// FirstIn moves past the '{' or '[' at b[i], whose closing bracket is
// closing: more is false for an empty container, and next is then just
// past it.
func FirstIn(b []byte, i int, closing byte) (next int, more bool) {
	i++
	if c := At(b, i); c <= ' ' {
		i = SkipSpace(b, i)
	}
	if At(b, i) == closing {
		return i + 1, false
	}
	return i, true
}

// NextIn moves past the value of a container that ended at b[i]: more is
// true after a comma (next is then the next member or element), false
// after the closing bracket (next is then just past it); next is -1 when
// neither follows.
func NextIn(b []byte, i int, closing byte) (next int, more bool) {
	if c := At(b, i); c <= ' ' {
		i = SkipSpace(b, i)
	}
	switch At(b, i) {
	case ',':
		i++
		if c := At(b, i); c <= ' ' {
			i = SkipSpace(b, i)
		}
		return i, true
	case closing:
		return i + 1, false
	}
	return -1, false
}

// CommaThen reports whether b[i] is a comma with c right after it: the
// next member ('"') or object element ('{') as the SDKs write them, which
// a reader takes without calling NextIn. It is small enough to be inlined.
func CommaThen(b []byte, i int, c byte) bool {
	return i+1 < len(b) && b[i] == ',' && b[i+1] == c
}

// MemberName checks the member name at b[i] and the colon after it, and
// returns the name's raw text (between the quotes, escapes intact),
// whether it holds an escape, and where the member's value starts; at is
// -1 when the text there is not a name and a colon.
func MemberName(b []byte, i int) (name []byte, escaped bool, at int) {
	end, escaped := SkipValidString(b, i, true)
	if end < 0 {
		return nil, false, -1
	}
	name = b[i+1 : end-1]
	if At(b, end) != ':' {
		end = SkipSpace(b, end)
		if At(b, end) != ':' {
			return nil, false, -1
		}
	}
	at = end + 1
	if c := At(b, at); c <= ' ' {
		at = SkipSpace(b, at)
	}
	return name, escaped, at
}

// NameIs reports whether a member name MemberName read is word.
func NameIs(name []byte, escaped bool, word string) bool {
	if escaped {
		return UnescapedIs(name, word)
	}
	return string(name) == word
}

// PushItemMembers are the members of a push item the gateway reads, by
// the index PushItemMember returns.
var PushItemMembers = [...]string{"queue", "partition", "transactionId", "payload", "traceId"}

// PushItemMember recognises, by their bytes, the members of a push item
// as the SDKs write them (a name without escapes and a colon right after
// it) and returns the member's index in PushItemMembers and where its
// value starts; at is -1 for any other text there, which MemberName then
// reads.
func PushItemMember(b []byte, i int) (member, at int) {
	rest := b[i:]
	if len(rest) < 16 {
		return -1, -1
	}
	switch rest[1] {
	case 'q':
		if string(rest[:8]) == `"queue":` {
			return 0, i + 8
		}
	case 'p':
		if string(rest[:12]) == `"partition":` {
			return 1, i + 12
		}
		if string(rest[:10]) == `"payload":` {
			return 3, i + 10
		}
	case 't':
		if string(rest[:16]) == `"transactionId":` {
			return 2, i + 16
		}
		if string(rest[:10]) == `"traceId":` {
			return 4, i + 10
		}
	}
	return -1, -1
}

// PushItemMemberNamed is the index in PushItemMembers of the member a
// name MemberName read names, or -1.
func PushItemMemberNamed(name []byte, escaped bool) int {
	for k, word := range PushItemMembers {
		if NameIs(name, escaped, word) {
			return k
		}
	}
	return -1
}
