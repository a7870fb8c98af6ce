package wire

// NumState is how far the text of a number has got, for a reader that
// takes a number a byte at a time (one cut by the end of a piece).
type NumState uint8

// The number grammar's states; the order is fixed (the Checker counts on it).
const (
	NumStart    NumState = iota // before the first byte
	NumMinus                    // after '-'
	NumZero                     // a leading 0
	NumInt                      // integer digits
	NumDot                      // after '.'
	NumFrac                     // fraction digits
	NumExp                      // after 'e' or 'E'
	NumExpSign                  // after the exponent's sign
	NumExpDigit                 // exponent digits
)

// NumberStep is one step of RFC 8259's number grammar: the state after c,
// and ok false when c does not continue the number (the number then ends
// before c, if its state is Complete, and is refused otherwise).
func NumberStep(s NumState, c byte) (NumState, bool) {
	digit := '0' <= c && c <= '9'
	switch s {
	case NumStart:
		switch {
		case c == '-':
			return NumMinus, true
		case c == '0':
			return NumZero, true
		case digit:
			return NumInt, true
		}
	case NumMinus:
		switch {
		case c == '0':
			return NumZero, true
		case digit:
			return NumInt, true
		}
	case NumZero, NumInt:
		switch {
		case digit && s == NumInt:
			return NumInt, true
		case c == '.':
			return NumDot, true
		case c == 'e' || c == 'E':
			return NumExp, true
		}
	case NumDot, NumFrac:
		switch {
		case digit:
			return NumFrac, true
		case s == NumFrac && (c == 'e' || c == 'E'):
			return NumExp, true
		}
	case NumExp:
		switch {
		case c == '+' || c == '-':
			return NumExpSign, true
		case digit:
			return NumExpDigit, true
		}
	case NumExpSign, NumExpDigit:
		if digit {
			return NumExpDigit, true
		}
	}
	return s, false
}

// Complete reports whether a number may end in state s.
func (s NumState) Complete() bool {
	return s == NumZero || s == NumInt || s == NumFrac || s == NumExpDigit
}
