package tenancy

import (
	"bytes"
	"strings"
)

// Every name the isolation probe gives the broker (its queue, the queue's
// namespace and task) starts with ProbeQueuePrefix. A tenant that could
// name them could delete or recreate the probe's queue between the probe's
// reads and so move the verdict (issue 21), so no client request may name
// them: a request whose path, query or body mentions the prefix, in any
// case and in any spelling the broker decodes to it, is refused before it
// reaches the cell.
//
// The check is deliberately broader than any one field the broker reads:
// it looks at every byte, so a payload that merely contains the prefix is
// refused too. That costs a tenant nothing it needs, and leaves no field
// the gateway might have forgotten.
//
// The broker turns other bytes into the prefix's letters in two ways:
// percent escapes in a path or query ("%71" is "q"), and \u escapes in a
// JSON string ("\u0071" is "q"). Only text holding one of those goes
// through the slow, decoding reader; everything else is searched as it is.

// ReservedNameMessage says why a request that names a probe name is
// refused.
const ReservedNameMessage = "names containing \"" + ProbeQueuePrefix + "\" (in any case or spelling) are reserved for the gateway's isolation probe"

// BodyNamesReserved reports whether a request body mentions the probe's
// reserved prefix, literally or through JSON \u escapes (or percent
// escapes), in any letter case.
func BodyNamesReserved(body []byte) bool {
	// The broker does not percent-decode JSON, so only \u escapes make a
	// body take the slow path.
	if bytes.Contains(body, []byte(`\u`)) {
		return mentionsReservedDecoded(body)
	}
	return bytesMentionPrefix(body)
}

// URLNamesReserved reports whether a raw path or query mentions the
// probe's reserved prefix, literally or through percent escapes (or JSON
// \u escapes), in any letter case.
func URLNamesReserved(raw string) bool {
	if strings.IndexByte(raw, '%') >= 0 || strings.Contains(raw, `\u`) {
		return mentionsReservedDecoded(raw)
	}
	return stringMentionsPrefix(raw)
}

// anchorAt is where the fast path's anchor letter stands in the prefix:
// the first "g" of "queengate", a letter neither the keys of a push body
// ("queue", "partition", "payload", "transactionId", "traceId") nor a
// uuid's hex digits hold, so the SIMD byte search rarely stops.
const anchorAt = 5

// bytesMentionPrefix is the fast path: a case-insensitive search anchored
// on a rare letter of the prefix.
func bytesMentionPrefix(b []byte) bool {
	for _, anchor := range [2]byte{'g', 'G'} {
		for from := anchorAt; from < len(b); {
			i := bytes.IndexByte(b[from:], anchor)
			if i < 0 {
				break
			}
			at := from + i - anchorAt
			if at+len(ProbeQueuePrefix) > len(b) {
				break
			}
			if bytes.EqualFold(b[at:at+len(ProbeQueuePrefix)], []byte(ProbeQueuePrefix)) {
				return true
			}
			from += i + 1
		}
	}
	return false
}

func stringMentionsPrefix(s string) bool {
	for _, anchor := range [2]byte{'g', 'G'} {
		for from := anchorAt; from < len(s); {
			i := strings.IndexByte(s[from:], anchor)
			if i < 0 {
				break
			}
			at := from + i - anchorAt
			if at+len(ProbeQueuePrefix) > len(s) {
				break
			}
			if strings.EqualFold(s[at:at+len(ProbeQueuePrefix)], ProbeQueuePrefix) {
				return true
			}
			from += i + 1
		}
	}
	return false
}

// mentionsReservedDecoded is the slow path: from every position it reads
// characters as the broker could decode them (a plain byte, "%XX", or
// "\uXXXX") and compares them, folded to lower case, with the prefix. It
// over-reads on purpose ("\\u0071" is a backslash and "u0071" to a JSON
// reader, "q" here): reading too much refuses a request, reading too
// little would let one through.
func mentionsReservedDecoded[T ~string | ~[]byte](s T) bool {
	for start := 0; start < len(s); start++ {
		// Only these bytes can begin a decoded "q".
		if c := s[start]; c != 'q' && c != 'Q' && c != '%' && c != '\\' {
			continue
		}
		if prefixAt(s, start) {
			return true
		}
	}
	return false
}

// prefixAt reports whether the decoded characters from s[start] spell the
// prefix.
func prefixAt[T ~string | ~[]byte](s T, start int) bool {
	i := start
	for k := 0; k < len(ProbeQueuePrefix); k++ {
		c, n := decodedChar(s, i)
		if n == 0 || foldASCII(c) != ProbeQueuePrefix[k] {
			return false
		}
		i += n
	}
	return true
}

// decodedChar returns the character at s[i] and how many bytes spell it;
// a \u escape of a character beyond ASCII yields 0xFF, which no prefix
// letter matches. n is 0 at the end of s.
func decodedChar[T ~string | ~[]byte](s T, i int) (c byte, n int) {
	if i >= len(s) {
		return 0, 0
	}
	switch s[i] {
	case '%':
		if i+2 < len(s) {
			hi, ok1 := hexValue(s[i+1])
			lo, ok2 := hexValue(s[i+2])
			if ok1 && ok2 {
				return hi<<4 | lo, 3
			}
		}
	case '\\':
		if i+5 < len(s) && s[i+1] == 'u' {
			var v uint16
			ok := true
			for j := i + 2; j < i+6; j++ {
				d, good := hexValue(s[j])
				ok = ok && good
				v = v<<4 | uint16(d)
			}
			if ok {
				if v > 0x7f {
					return 0xFF, 6
				}
				return byte(v), 6
			}
		}
	}
	return s[i], 1
}

func foldASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
