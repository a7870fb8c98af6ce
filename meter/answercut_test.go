package meter

import (
	"strings"
	"testing"
)

// An element of a shape the element reader does not know, after ones it
// reads whole, opens as any other object; cut by a piece's end right
// after its bracket (or anywhere else), the member reader must hand on to
// the general reader, not read past the piece. A gateway panicked here on
// a transaction answer of a few MB before this test.
func TestUnknownElementAfterShapedOnesAtEveryCut(t *testing.T) {
	odd := func(s string) string { return strings.Replace(s, `{"index"`, `{ "index"`, 1) }
	push := string(pushAnswer(6))
	push = `[{"status":"queued","index":9},` + push[1:len(push)-1] + `,{"status":"queued","index":6}` + `,` + odd(string(pushAnswer(1))[1:])
	txn := string(txnAnswer(6))
	txn = strings.Replace(txn, `{"results":[`, `{"results":[{"type":"push","success":true,"index":8},`, 1)
	cut := strings.Index(txn, `],"success"`)
	txn = txn[:cut] + `,{"type":"push","success":true,"index":7}` + `,{}` + txn[cut:]
	pop := string(popAnswerBody(4, 100))
	pop = strings.Replace(pop, `"messages":[`, `"messages":[{"data":1,"id":"x"},`, 1)
	cut = strings.Index(pop, `],"partition"`)
	pop = pop[:cut] + `,{"id":"01a22ac0-cdd3-7fff-9f54-11a670d52b36","data":{"a":1}}` + `,{ "data":null}` + pop[cut:]

	pushTally, txnTally := NewPushTally(), NewTxnTally()
	for at := 0; at <= len(push); at++ {
		want := oldNewPushTally()
		_, _ = want.Write([]byte(push))
		pushTally.Reset()
		_, _ = pushTally.Write([]byte(push[:at]))
		_, _ = pushTally.Write([]byte(push[at:]))
		if got, w := pushTally.Outcome(200), want.Outcome(200); got != w {
			t.Fatalf("push cut at %d: %+v, the oracle %+v", at, got, w)
		}
	}
	for at := 0; at <= len(txn); at++ {
		want := oldNewTxnTally()
		_, _ = want.Write([]byte(txn))
		txnTally.Reset()
		_, _ = txnTally.Write([]byte(txn[:at]))
		_, _ = txnTally.Write([]byte(txn[at:]))
		if got, w := txnTally.Billed(200, 10), want.Billed(200, 10); got != w {
			t.Fatalf("transaction cut at %d: %d, the oracle %d", at, got, w)
		}
	}
	for at := 0; at <= len(pop); at++ {
		want := oldNewPopCount()
		_, _ = want.Write([]byte(pop))
		got := NewPopKeys()
		_, _ = got.Write([]byte(pop[:at]))
		_, _ = got.Write([]byte(pop[at:]))
		if g, _ := got.Result(200); g != want.Messages(200) {
			t.Fatalf("pop cut at %d: %d, the oracle %d", at, g, want.Messages(200))
		}
	}
	if n := want(t, txn); n != 10 {
		t.Fatalf("the transaction answer bills %d by the oracle, want 10 (the test's answer is not what it means to be)", n)
	}
}

func want(t *testing.T, txn string) int64 {
	t.Helper()
	o := oldNewTxnTally()
	_, _ = o.Write([]byte(txn))
	return o.Billed(200, 10)
}
