package meter

import "github.com/queengate/queengate/wire"

// PopKeys reads a pop answer as it streams past, without keeping it: one
// too large to keep (over MaxBilledBody), and one cut short, whose kept
// start is read through it too. It counts the messages (the elements of
// the top-level object's "messages" array, the last member of that name)
// and takes the redelivery key of each, as BillPop spells them, so that
// the redelivery filter sees an oversized pop as it sees any other. The
// gateway bills a pop from its kept answer (BillPop) up to MaxBilledBody;
// past that, a pop of many large messages would otherwise be billed no
// delivery and take nothing from the message bucket.
//
// It reads by the same rules as BillPop (doc.go) and fails closed alike: a
// message whose key it cannot read exactly (a field whose last value is
// neither a plain string nor null: escaped, of another type, longer than
// maxPopKeyField, or longer than 64 bytes and cut by the end of a piece;
// or a message that is not an object) gets no key,
// and a message without a key is billed as a first delivery and not
// remembered. Only the first maxStreamedPopKeys messages are keyed; the
// rest are billed as first deliveries too. What it keeps is the keying
// members' texts, in one buffer of at most maxPopKeyText bytes, never the
// payloads.
type PopKeys struct {
	scan  wire.Stream
	watch popWatch
}

const (
	// maxPopKeyField is the longest id, partition id, transaction id or
	// consumer group a key is built from; the broker's are UUIDs and short
	// names. (A string cut by the end of a piece is carried only up to 64
	// bytes, wire.Stream's bound for what a watcher hears.)
	maxPopKeyField = 512
	// maxPopKeyText bounds the texts one oversized pop keeps for its keys.
	maxPopKeyText = 32 << 20
	// maxStreamedPopKeys bounds the messages one oversized pop keys.
	maxStreamedPopKeys = 1 << 17
)

// NewPopKeys returns a reader ready for the first piece of an answer. It
// is BillPop's reader (popWatch over wire.Stream, with the broker's
// message shape) told to copy what it keeps, since the pieces are not.
func NewPopKeys() *PopKeys {
	p := &PopKeys{}
	p.watch.streamed = true
	p.scan.Reset(&p.watch, 3, popNames)
	p.scan.ReadElements(&p.watch, 2)
	return p
}

// Write takes the next piece of the answer; it never fails.
func (p *PopKeys) Write(b []byte) (int, error) {
	p.scan.Feed(b)
	return len(b), nil
}

// Result is how many messages the whole answer delivered, for an upstream
// status, and the redelivery keys of those it could key (at most one per
// message, in their order; len(keys) ≤ messages), spelled by BillPop's
// popKeys. An answer that is not one well-formed JSON object, or whose
// "messages" is not an array, bills nothing.
func (p *PopKeys) Result(status int) (messages int64, keys []string) {
	w := &p.watch
	if !is2xx(status) || !p.scan.OK() || !w.isObject {
		return 0, nil
	}
	return w.count, popKeys(w.text, w.msgs, w.group, w.groupBad)
}

// Begun is how many messages a pop answer cut short had begun before its
// end, for an upstream status: the answer read so far is a well-formed
// start of one JSON object, and each element of its "messages" array that
// started counts, the one the cut fell in too (when it is an object or an
// array, as the broker's messages are; a string or another scalar counts
// once whole). The broker sent at least these, so a pop whose answer broke
// off is billed them; a start that is not well-formed JSON, or not an
// object, counts 0, as Result does. None is keyed (the one the cut fell in
// may have lost part of its key), so each is billed a first delivery.
func (p *PopKeys) Begun(status int) int64 {
	if !is2xx(status) || p.scan.Failed() || !p.watch.isObject {
		return 0
	}
	return p.watch.count
}
