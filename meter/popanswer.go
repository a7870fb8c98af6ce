package meter

import "sync"

// PopAnswer is BillPop's reading of one pop answer, kept until the
// redelivery filter has taken its keys. The keys are spelled on demand,
// one at a time, from where their parts lie in the answer (AppendKey),
// so a pop costs no key strings and no list of them: the gateway bills
// every pop answer it keeps whole through it (one past MaxBilledBody is
// counted as it streams, by PopKeys). It is pooled: Release gives it back.
type PopAnswer struct {
	biller   popBiller
	body     []byte
	messages int64
	keyed    []int32 // the messages with a key, by index in biller.watch.msgs
	shaped   bool
	indexed  bool // keyed is filled
}

var popAnswers = sync.Pool{New: func() any { return new(PopAnswer) }}

// ReadPopAnswer reads a pop answer as BillPop does. body must stay
// unchanged until the answer is released: the keys are read from it.
func ReadPopAnswer(status int, body []byte) *PopAnswer {
	a := popAnswers.Get().(*PopAnswer)
	a.body = body
	if !is2xx(status) {
		return a
	}
	ok, shaped := a.biller.read(body)
	if !ok {
		a.biller.watch.msgs = a.biller.watch.msgs[:0] // an unreadable answer has no keys
		return a
	}
	a.messages, a.shaped = int64(len(a.biller.watch.msgs)), shaped
	return a
}

// index lists the messages with a key, once, when the keys are asked for
// one at a time (BillPop spells them all at once, without it).
func (a *PopAnswer) index() {
	if a.indexed {
		return
	}
	a.indexed = true
	w := &a.biller.watch
	for i := range w.msgs {
		if _, _, _, ok := w.msgs[i].key(w.group, w.groupBad); ok {
			a.keyed = append(a.keyed, int32(i))
		}
	}
}

// maxPooledKeyed bounds the keyed list a pooled answer keeps.
const maxPooledKeyed = 1 << 16

// Release gives the answer back to the pool; it must not be used after.
func (a *PopAnswer) Release() {
	a.biller.clear()
	keyed := a.keyed[:0]
	if cap(keyed) > maxPooledKeyed {
		keyed = nil
	}
	a.body, a.messages, a.keyed = nil, 0, keyed
	a.shaped, a.indexed = false, false
	popAnswers.Put(a)
}

// Messages is BillPop's count: the billable messages of the answer.
func (a *PopAnswer) Messages() int64 { return a.messages }

// BrokerShaped reports that a 2xx answer was read as the broker's pop
// envelope, whole: then its top-level members are exactly the envelope's
// (consumerGroup, leaseId, messages and the tail's partition,
// partitionId, partitionsClaimed, queue, success), plainly spelled, and
// it is well-formed JSON. It has no "error" member, so no error text.
func (a *PopAnswer) BrokerShaped() bool { return a.shaped }

// Keys is how many redelivery keys the answer has (len of BillPop's ids).
func (a *PopAnswer) Keys() int {
	a.index()
	return len(a.keyed)
}

// AppendKey appends the i-th redelivery key (BillPop's ids[i]) to dst.
func (a *PopAnswer) AppendKey(dst []byte, i int) []byte {
	a.index()
	w := &a.biller.watch
	head, tail, group, _ := w.msgs[a.keyed[i]].key(w.group, w.groupBad)
	return appendKey(dst, a.body, head, tail, group)
}
