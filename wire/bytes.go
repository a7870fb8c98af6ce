package wire

import "encoding/binary"

// The byte-level tests the grammar and the readers over it are made of,
// each written once. A reader elsewhere that needs one calls it here
// rather than keeping a copy, so a rule is exact in one place.

// SpecialBytes has the high bit of every byte lane of w that holds a
// quote, a backslash, a control byte or a byte past ASCII: the bytes a
// string's text may not pass without a look. Lanes above the lowest marked
// one may be marked wrongly (a borrow crosses lanes); the lowest is always
// exact, and w has no mark at all exactly when none of its bytes is
// special, so callers use the lowest mark, or ask whether there is one.
func SpecialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// A lane is a quote or a backslash when it is zero after the xor, and
	// subtracting one then sets its high bit. So does it for a lane past
	// ASCII (the usual &^x guarding against that is not needed: such a
	// lane is marked by w itself), and a borrow comes only out of a lane
	// that is itself marked.
	q := w ^ (ones * '"')
	s := w ^ (ones * '\\')
	// Grouped in pairs: the two halves are computed side by side, one
	// step shorter than a chain of ors (this look is on the loop's
	// critical path).
	return (((q - ones) | (s - ones)) | ((w - ones*0x20) | w)) & highs
}

// PlainRun reports whether b[i:j] (j-i at least 8, inside b) holds no
// byte SpecialBytes marks, a word at a time. It runs SpecialBytes' tests
// without their mask: when no byte of a word is special no subtraction
// borrows and no lane gets its high bit; when one is, the lowest special
// lane gets it. That answers yes or no for the run, not where.
func PlainRun(b []byte, i, j int) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var seen uint64
	for ; i+8 <= j; i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q, s := w^(ones*'"'), w^(ones*'\\')
		seen |= (q - ones) | (s - ones) | (w - ones*0x20) | w
	}
	w := binary.LittleEndian.Uint64(b[j-8:])
	q, s := w^(ones*'"'), w^(ones*'\\')
	seen |= (q - ones) | (s - ones) | (w - ones*0x20) | w
	return seen&highs == 0
}

// PlainByte marks the bytes a string's text passes without a second look:
// printable ASCII but the quote and the backslash.
var PlainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// HexDigit is a hex digit's value, 0xFF for any other byte.
var HexDigit = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
		t[c-'a'+'A'] = byte(c-'a') + 10
	}
	return t
}()

// Hex4 is the value of the four hex digits at b[i], or -1.
func Hex4(b []byte, i int) int {
	if len(b)-i < 4 {
		return -1
	}
	d0, d1, d2, d3 := HexDigit[b[i]], HexDigit[b[i+1]], HexDigit[b[i+2]], HexDigit[b[i+3]]
	if (d0|d1|d2|d3)&0x80 != 0 {
		return -1
	}
	return int(d0)<<12 | int(d1)<<8 | int(d2)<<4 | int(d3)
}

// CanonicalUUID reports whether s is a uuid in its usual 8-4-4-4-12 form,
// hex digits in either case (the form every SDK sends, which the broker's
// uuid columns take): a shortcut the schema's rules try before their own
// reading of a uuid, its 32 digits looked at eight at a time.
func CanonicalUUID(s []byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	le := binary.LittleEndian
	return hexWord(le.Uint64(s[0:8])) &&
		hexWord(uint64(le.Uint32(s[9:13]))|uint64(le.Uint32(s[14:18]))<<32) &&
		hexWord(uint64(le.Uint32(s[19:23]))|uint64(le.Uint32(s[24:28]))<<32) &&
		hexWord(le.Uint64(s[28:36]))
}

// hexWord reports whether all eight bytes of w are hex digits: below 0x80
// and at least 0x20, and, with the letter case bit set, in '0'–'9' or
// 'a'–'f' (no lane carries into the next, since every lane is below 0x80).
func hexWord(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	if w&highs != 0 || (w-ones*0x20)&highs != 0 {
		return false
	}
	x := w | ones*0x20
	digit := (x + ones*(0x80-'0')) &^ (x + ones*(0x80-'9'-1))
	letter := (x + ones*(0x80-'a')) &^ (x + ones*(0x80-'f'-1))
	return (digit|letter)&highs == highs
}

// RuneStart reads the first byte of a multi-byte UTF-8 sequence: how many
// continuation bytes follow, and the bounds of the first of them (the
// others are 0x80–0xBF). The bounds refuse overlong forms, surrogates and
// values past U+10FFFF, as utf8.Valid does; ok is false for a byte that
// starts no sequence.
func RuneStart(b byte) (left, lo, hi byte, ok bool) {
	switch {
	case b >= 0xC2 && b <= 0xDF:
		return 1, 0x80, 0xBF, true
	case b == 0xE0:
		return 2, 0xA0, 0xBF, true
	case b == 0xED:
		return 2, 0x80, 0x9F, true
	case b >= 0xE1 && b <= 0xEF:
		return 2, 0x80, 0xBF, true
	case b == 0xF0:
		return 3, 0x90, 0xBF, true
	case b >= 0xF1 && b <= 0xF3:
		return 3, 0x80, 0xBF, true
	case b == 0xF4:
		return 3, 0x80, 0x8F, true
	}
	return 0, 0, 0, false
}

// Surrogate classifies the code unit of a \u escape given whether the one
// before it was a high surrogate: it returns whether the next escape must
// be a low surrogate, and ok false when the pair is broken (a high half
// not followed by a low one, or a low half alone).
func Surrogate(v uint16, afterHigh bool) (wantLow, ok bool) {
	high, low := v >= 0xD800 && v < 0xDC00, v >= 0xDC00 && v < 0xE000
	switch {
	case high && !afterHigh:
		return true, true
	case low && afterHigh:
		return false, true
	case high, low, afterHigh:
		return afterHigh, false
	}
	return false, true
}
