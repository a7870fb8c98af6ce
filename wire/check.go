package wire

import (
	"strconv"
	"unicode/utf8"
)

// Checker is a strict, incremental JSON checker: it reads one JSON text
// (RFC 8259) in pieces of any size, in one pass and without recursion, and
// says whether it is well formed. It is the gate in front of every reading
// of a body: a body the gateway acts on must pass it, so that the walkers
// in this package, which trust their input, read exactly what the broker's
// JSON library reads. It is stricter than encoding/json where the broker is:
//
//   - text must be valid UTF-8 (encoding/json replaces bad bytes with U+FFFD;
//     the broker 0.15.1 crashes on them);
//   - a \u escape must not leave half of a surrogate pair (encoding/json
//     replaces it; the broker's library refuses it);
//   - a leading UTF-8 byte-order mark is refused (the broker's library skips
//     one; refusing is simpler than agreeing on every reader);
//   - nesting deeper than MaxDepth is refused (the checker itself has no
//     limit, but the gateway refuses what it will not promise to read).
//
// A Watcher, when set, is told about containers and strings as they pass,
// which lets a caller read a document as it streams by without keeping it.
type Checker struct {
	// MaxDepth is the deepest nesting accepted; 0 means DefaultMaxDepth.
	MaxDepth int
	// Watch, when not nil, is told about containers and strings.
	Watch Watcher
	// RefuseNUL refuses the escape \u0000 in any string, key or value:
	// PostgreSQL holds U+0000 in neither text nor jsonb, so a body bound to
	// be stored that carries one fails at the broker's insert (CheckStored).
	RefuseNUL bool

	off  int64   // bytes consumed so far
	top  uint8   // before, inside or after the top-level value
	scan scanner // the grammar's state inside the value
	err  *SyntaxError
}

// DefaultMaxDepth is the nesting the gateway accepts in a body: far more
// than any message needs, and a bound the broker's recursive encoder is
// known to survive.
const DefaultMaxDepth = 1000

// Watcher is told what a Checker passes. Depth is the number of containers
// open around the event (1 inside the top-level array or object).
type Watcher interface {
	// Open is called when a container opens; depth counts it.
	Open(depth int, kind byte)
	// Close is called when the container at depth closes.
	Close(depth int)
	// StringStart is called at a string's opening quote; key tells an
	// object member's name from a value. (A Stream's watcher, which hears
	// of a plain name only when its filter lets it through, hears of a
	// name later: at its end, or at its first byte that is not plain.)
	StringStart(depth int, key bool)
	// StringPart gets the string's raw text (escapes intact, no quotes),
	// in one or more pieces.
	StringPart(raw []byte)
	// StringEnd is called at the closing quote.
	StringEnd()
	// Scalar is called where a number or a literal starts; first is its
	// first byte ('t', 'f', 'n', '-' or a digit), which tells true from
	// false from null.
	Scalar(depth int, first byte)
}

// Problem tells what was wrong with a text.
type Problem uint8

// The problems a Checker reports.
const (
	ProblemSyntax Problem = iota + 1
	ProblemUTF8
	ProblemBOM
	ProblemDepth
	ProblemEmpty
	ProblemTruncated
	ProblemNUL
)

// SyntaxError is a text the Checker refused: what, and at which byte
// (counted from 0).
type SyntaxError struct {
	Problem Problem
	Offset  int64
	Detail  string // for ProblemSyntax: what was found or expected
}

func (e *SyntaxError) Error() string {
	at := strconv.FormatInt(e.Offset, 10)
	switch e.Problem {
	case ProblemUTF8:
		return "body is not valid UTF-8 at byte " + at
	case ProblemBOM:
		return "body starts with a UTF-8 byte-order mark; send the JSON without it"
	case ProblemDepth:
		return "body nests deeper than " + e.Detail + " levels at byte " + at
	case ProblemEmpty:
		return "request body is empty; a JSON body is required"
	case ProblemTruncated:
		return "body is not valid JSON: it ends before the value is complete (byte " + at + ")"
	case ProblemNUL:
		return "body holds U+0000 (\\u0000) at byte " + at + "; the broker cannot store it"
	}
	return "body is not valid JSON: " + e.Detail + " at byte " + at
}

// Check reports whether b is exactly one well-formed JSON text (surrounding
// whitespace allowed) within DefaultMaxDepth.
func Check(b []byte) error { return checkWhole(b, false) }

// CheckStored is Check for a body whose strings the broker stores: it
// refuses the escape \u0000 as well (raw control bytes, U+0000 among them,
// are invalid JSON already).
func CheckStored(b []byte) error { return checkWhole(b, true) }

// checkWhole is a Checker over one piece, on the Go stack: a whole body
// is read without allocating.
func checkWhole(b []byte, refuseNUL bool) error {
	c := Checker{RefuseNUL: refuseNUL}
	if err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

// Where a Checker is in the text.
const (
	topStart uint8 = iota // before the value: space only so far
	topIn                 // in the value: scan reads
	topEnd                // after the value: space only may follow
)

// Write checks the next piece of the text. After an error every call
// returns the same error.
func (c *Checker) Write(p []byte) error {
	if c.err != nil {
		return c.err
	}
	i := 0
	if c.top == topStart {
		if i = SkipSpace(p, 0); i == len(p) {
			c.off += int64(len(p))
			return nil
		}
		if c.off == 0 && i == 0 && p[0] == 0xEF {
			return c.fail(ProblemBOM, 0, "")
		}
		c.top = topIn
		// The Watcher hears of everything, at every depth: none passes
		// the limit.
		c.scan.limit, c.scan.nul, c.scan.watch = c.maxDepth(), c.RefuseNUL, c.Watch
		c.scan.wd, c.scan.every = c.maxDepth(), true
	}
	if c.top == topIn {
		c.scan.base = c.off
		i = c.scan.scan(p, i)
		switch c.scan.state {
		case rFail:
			return c.refused()
		case rDone:
			c.top = topEnd
		}
	}
	if c.top == topEnd {
		if i = SkipSpace(p, i); i < len(p) {
			return c.fail(ProblemSyntax, c.off+int64(i), why[whyTrailing])
		}
	}
	c.off += int64(len(p))
	return nil
}

// Close reports whether the text written so far is one complete value.
func (c *Checker) Close() error {
	switch {
	case c.err != nil:
		return c.err
	case c.top == topStart:
		return c.fail(ProblemEmpty, c.off, "")
	case c.top == topIn && c.scan.state == rNum && c.scan.d == 0 && c.scan.num.Complete():
		c.top = topEnd // a number the text's end ends
	case c.top == topIn:
		return c.fail(ProblemTruncated, c.off, "")
	}
	return nil
}

// Offset is the number of bytes written so far.
func (c *Checker) Offset() int64 { return c.off }

func (c *Checker) maxDepth() int {
	if c.MaxDepth > 0 {
		return c.MaxDepth
	}
	return DefaultMaxDepth
}

func (c *Checker) fail(p Problem, at int64, detail string) error {
	c.err = &SyntaxError{Problem: p, Offset: at, Detail: detail}
	return c.err
}

// refused turns what scan refused into the Checker's error.
func (c *Checker) refused() error {
	s := &c.scan
	switch s.why {
	case whyUTF8:
		return c.fail(ProblemUTF8, s.at, "")
	case whyDepth:
		return c.fail(ProblemDepth, s.at, strconv.Itoa(c.maxDepth()))
	case whyNUL:
		return c.fail(ProblemNUL, s.at, "")
	case whyValue, whyKey, whyColon, whyAfter, whyMismatch:
		return c.fail(ProblemSyntax, s.at, why[s.why]+describe(s.found))
	}
	return c.fail(ProblemSyntax, s.at, why[s.why])
}

// why words a refusal; one that names a byte ends where its name follows.
var why = [...]string{
	whyValue:     "expected a value, found ",
	whyKey:       "expected a member name, found ",
	whyColon:     "expected ':', found ",
	whyAfter:     "expected ',' or a closing bracket, found ",
	whyMismatch:  "a mismatched ",
	whyControl:   "a control character inside a string",
	whyEscape:    "an invalid escape in a string",
	whyHex:       "an invalid \\u escape",
	whySurrogate: "a \\u escape leaves half of a surrogate pair",
	whyNumber:    "an invalid number",
	whyLiteral:   "an invalid literal",
	whyTrailing:  "data after the JSON value",
}

func describe(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return "'" + string(rune(b)) + "'"
	}
	return "byte 0x" + strconv.FormatUint(uint64(b), 16)
}

// InvalidUTF8 returns the offset of the first byte of b that does not start
// a valid UTF-8 sequence, or -1 when b is valid UTF-8.
func InvalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}
