package wire

// TextError refuses what no reader of a request body may see, whatever the
// body is: text that is not valid UTF-8, or that starts with a byte-order
// mark. It returns nil for any other body. Check and CheckStored refuse both
// as well, so a body either of them accepts passes TextError.
func TextError(b []byte) error {
	if len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF {
		return &SyntaxError{Problem: ProblemBOM}
	}
	if at := InvalidUTF8(b); at >= 0 {
		return &SyntaxError{Problem: ProblemUTF8, Offset: int64(at)}
	}
	return nil
}
