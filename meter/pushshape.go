package meter

import "github.com/queengate/queengate/wire"

// The items of one push answer are written alike: the same members, and
// strings of the same lengths (uuids, the queue's name), so the item
// before says where each long string of the next one ends. Such a string
// is read first at that length: it is taken when the byte at its
// predicted end is a quote and no byte before it is special (a quote, a
// backslash, a control or a non-ASCII byte), every word of it checked
// without a branch per word. That is exactly where the general reading
// ends it, its first special byte being that quote. Any other string is
// measured as matchShape measures it, and gives the next item its length.

// pushLengths is, per member of a shape, the length of the string the
// last item read in it held there (0 until one did).
type pushLengths [maxShapeMembers]int32

// matchPushShape is matchShape for a shape of strings and scalars only
// (the push shapes: none nested), guessing the strings' lengths from lens
// and leaving there the lengths it found. It returns the index past the
// item's closing brace, or -1 (having read nothing: lens may then hold
// other guesses, which only costs the next item a measure).
func matchPushShape(sh *answerShape, lens *pushLengths, p []byte, i int, vals *shapeValues) int {
	for k := range sh.heads {
		head := &sh.heads[k]
		if len(p)-i <= len(head.text) || !head.is(p, i) {
			return -1
		}
		i += len(head.text)
		if p[i] != '"' {
			end := scalarEnd(p, i)
			if end == 0 {
				return -1
			}
			vals[k] = shapeValue{p[i], int32(i), int32(end)}
			i = end
			continue
		}
		text := i + 1
		end := text + int(lens[k])
		if !plainAsGuessed(p, text, end) {
			end = plainEnd(p, text)
			if end >= len(p) || p[end] != '"' {
				return -1
			}
			lens[k] = int32(end - text)
		}
		vals[k] = shapeValue{'"', int32(text), int32(end)}
		i = end + 1
	}
	if i >= len(p) || p[i] != '}' {
		return -1
	}
	return i + 1
}

// plainAsGuessed reports whether p[text:end] is plain string text of at
// least a word and p[end] a quote.
func plainAsGuessed(p []byte, text, end int) bool {
	if end-text < 8 || end >= len(p) || p[end] != '"' {
		return false
	}
	return wire.PlainRun(p, text, end)
}
