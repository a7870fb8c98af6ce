package tenancy

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/queengate/queengate/wire"
)

// Every name the isolation probe gives the broker (its queue, the queue's
// namespace and task) starts with ProbeQueuePrefix. A tenant that could
// name them could delete or recreate the probe's queue between the probe's
// reads and so move the verdict on whether the cell isolates tenants, so no client request may name
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

// bytesMentionPrefix is the fast path: a case-insensitive search for the
// prefix anchored on a rare letter of it (anchorAt), which the byte search
// finds 16 or 32 bytes at a time. A body that makes it stop often (more
// than once in 256 bytes once it has stopped 16 times: payloads of prose,
// or one written to slow the search) is searched by sampledMentionsPrefix
// instead, whose cost does not depend on the text.
func bytesMentionPrefix(b []byte) bool {
	for _, anchor := range [2]byte{'g', 'G'} {
		stops := 0
		for from := anchorAt; from < len(b); {
			i := bytes.IndexByte(b[from:], anchor)
			if i < 0 {
				break
			}
			at := from + i - anchorAt
			if at+len(ProbeQueuePrefix) > len(b) {
				break
			}
			// The letters either side of the anchor first, in one look:
			// they rule out nearly every g of other text.
			if b[at+anchorAt-1]|0x20 == ProbeQueuePrefix[anchorAt-1] && b[at+anchorAt+1]|0x20 == ProbeQueuePrefix[anchorAt+1] &&
				bytes.EqualFold(b[at:at+len(ProbeQueuePrefix)], []byte(ProbeQueuePrefix)) {
				return true
			}
			// A stop costs what sampling some 200 bytes does: past a few,
			// a text that stops the search more often than that is sampled.
			if stops++; stops > 16 && stops*256 > from {
				return sampledMentionsPrefix(b)
			}
			from += i + 1
		}
	}
	return false
}

// anchorAt is where the fast paths' anchor letter stands in the prefix:
// the first "g" of "queengate", a letter neither the keys of a push body
// ("queue", "partition", "payload", "transactionId", "traceId") nor a
// uuid's hex digits nor a route's path words hold, so the byte search
// rarely stops.
const anchorAt = 5

// sampledMentionsPrefix is the same search at a cost set by the length
// alone: it looks at one word of eight bytes in every strideWords. An
// occurrence of the prefix (26 bytes) holds a whole word at every offset
// from its start to 18 bytes in, so at least one of the sampled words, and
// that word is then one of the prefix's own words, in some letter case.
// Every byte of the prefix has the case bit (0x20) set, so a word of it
// in any case, with that bit set in every byte, is the prefix's word
// exactly; the sampled word is folded so and looked up among them, and a
// hit is confirmed by comparing the whole prefix there.
func sampledMentionsPrefix(b []byte) bool {
	n := len(b)
	if n < len(ProbeQueuePrefix) {
		return false
	}
	j := 0
	// Four samples a round, so that their loads, hashes and lookups
	// overlap; a round that finds none of its words in the table (nearly
	// every one) costs one branch.
	le := binary.LittleEndian
	for ; j+3*strideWords+8 <= n; j += 4 * strideWords {
		s := b[j : j+3*strideWords+8]
		w0 := le.Uint64(s[0:8]) | caseBits
		w1 := le.Uint64(s[strideWords:strideWords+8]) | caseBits
		w2 := le.Uint64(s[2*strideWords:2*strideWords+8]) | caseBits
		w3 := le.Uint64(s[3*strideWords:3*strideWords+8]) | caseBits
		e0 := &prefixWords[(w0*prefixHashMul)>>(64-prefixHashBits)]
		e1 := &prefixWords[(w1*prefixHashMul)>>(64-prefixHashBits)]
		e2 := &prefixWords[(w2*prefixHashMul)>>(64-prefixHashBits)]
		e3 := &prefixWords[(w3*prefixHashMul)>>(64-prefixHashBits)]
		if (e0.word^w0)&(e1.word^w1)&(e2.word^w2)&(e3.word^w3) == 0 &&
			(prefixAtWord(b, j, e0, w0) || prefixAtWord(b, j+strideWords, e1, w1) ||
				prefixAtWord(b, j+2*strideWords, e2, w2) || prefixAtWord(b, j+3*strideWords, e3, w3)) {
			return true
		}
	}
	for ; j+8 <= n; j += strideWords {
		w := le.Uint64(b[j:j+8]) | caseBits
		if e := &prefixWords[(w*prefixHashMul)>>(64-prefixHashBits)]; e.word == w && prefixAtWord(b, j, e, w) {
			return true
		}
	}
	return false
}

// prefixAtWord reports whether the word w sampled at b[j] is the prefix's
// word e and the whole prefix stands around it, in any letter case. An
// empty slot holds no word, and a sampled word is never 0 (every byte has
// the case bit set), so an empty slot never matches.
func prefixAtWord(b []byte, j int, e *prefixWord, w uint64) bool {
	if e.word != w {
		return false
	}
	at := j - int(e.start-1)
	return at >= 0 && at+len(ProbeQueuePrefix) <= len(b) &&
		bytes.EqualFold(b[at:at+len(ProbeQueuePrefix)], []byte(ProbeQueuePrefix))
}

const (
	// strideWords is how far apart bytesMentionPrefix samples words: an
	// occurrence holds a whole word starting at any of its first
	// len(ProbeQueuePrefix)-7 offsets.
	strideWords = len(ProbeQueuePrefix) - 7
	caseBits    = 0x2020202020202020
	// The table of the prefix's words is indexed by a multiplicative
	// hash; prefixHashMul is one under which no two of them share a slot
	// (prefixWordTable checks it at start).
	prefixHashBits = 8
	prefixHashMul  = 0x9e3779b97f4a7c17
)

// prefixWord is one slot of prefixWords: a word of the prefix and where it
// starts in it, plus one (0 marks an empty slot).
type prefixWord struct {
	word  uint64
	start uint8
}

// prefixWords holds every word of the prefix at offsets up to
// strideWords-1, each in the slot its hash names.
var prefixWords = prefixWordTable()

func prefixWordTable() (t [1 << prefixHashBits]prefixWord) {
	p := []byte(ProbeQueuePrefix)
	for o := 0; o < strideWords; o++ {
		w := binary.LittleEndian.Uint64(p[o:]) | caseBits
		e := &t[(w*prefixHashMul)>>(64-prefixHashBits)]
		if e.start != 0 {
			panic("tenancy: two words of the probe prefix share a slot of prefixWords; choose another prefixHashMul")
		}
		*e = prefixWord{word: w, start: uint8(o + 1)}
	}
	return t
}

// stringMentionsPrefix is the fast path for a path or query (short text):
// a case-insensitive search anchored on a rare letter of the prefix.
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
			if hi, lo := wire.HexDigit[s[i+1]], wire.HexDigit[s[i+2]]; hi|lo <= 0xF {
				return hi<<4 | lo, 3
			}
		}
	case '\\':
		if i+5 < len(s) && s[i+1] == 'u' {
			if v := wire.Hex4([]byte(s[i+2:i+6]), 0); v >= 0 {
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
