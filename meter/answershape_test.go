package meter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// shapedAnswers are answers whose elements have the shapes the element
// readers know, and the same with one message of the pop not in shape.
func shapedAnswers() map[string][]byte {
	return map[string][]byte{
		"push":         pushAnswer(2),
		"push dup":     []byte(`[{"index":0,"message_id":"m","queueName":"q","status":"duplicate","transaction_id":"t"},{"index":1,"message_id":"m","queueName":"q","status":"buffered","transaction_id":"t"}]`),
		"transaction":  txnAnswer(2),
		"pop":          popAnswerBody(2, 100),
		"pop 1 KB":     popAnswerBody(1, 400),
		"pop keys":     []byte(`{"consumerGroup":"g","messages":[{"consumerGroup":null,"createdAt":"c","data":[1,{"a":"b"}],"id":"i","leaseId":null,"partition":"p","partitionId":null,"producerSub":null,"traceId":"t","transactionId":"x"},{"consumerGroup":"h","createdAt":"c","data":"d","id":"","leaseId":"l","partition":"p","partitionId":"pp","producerSub":null,"traceId":null,"transactionId":""}]}`),
		"txn dup":      []byte(`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"j","type":"ack"},{"index":1,"messageId":"m","partitionId":"p","queueName":"q","success":true,"transactionId":"t","type":"push"},{"duplicate":true,"index":2,"type":"push"}],"success":true,"transactionId":"t"}`),
		"push in pop":  []byte(`{"messages":[{"index":0,"message_id":"m","queueName":"q","status":"queued","transaction_id":"t"}]}`),
		"pop in push":  []byte(`[{"consumerGroup":"g","createdAt":"c","data":{"a":1},"id":"i","leaseId":"l","partition":"p","partitionId":"pp","producerSub":null,"traceId":null,"transactionId":"x"}]`),
		"pop empty":    []byte(`{"consumerGroup":null,"leaseId":null,"messages":[],"partition":"p","partitionId":"pp","partitionsClaimed":1,"queue":"q","success":true}`),
		"pop claimed":  []byte(`{"consumerGroup":"g","leaseId":"l","messages":[{"consumerGroup":"g","createdAt":"c","data":{"a":1},"id":"i","leaseId":"l","partition":"p","partitionId":"pp","producerSub":null,"traceId":null,"transactionId":"x"}],"partition":"p","partitionId":"pp","partitionsClaimed":2,"queue":"q","success":true}`),
		"txn 1":        txnAnswer(1),
		"txn empty":    []byte(`{"results":[],"success":true,"transactionId":"bf34ae70-a720-4565-bb8b-3ee176b92365"}`),
		"txn failed":   []byte(`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"job-1","type":"ack"}],"success":false,"transactionId":"bf34ae70-a720-4565-bb8b-3ee176b92365"}  `),
		"nested items": []byte(`[[{"index":0,"message_id":"m","queueName":"q","status":"queued","transaction_id":"t"}]]`),
	}
}

// edits are the one-byte changes made at every offset of the shaped
// answers: each byte replaced by one of these, removed, or one inserted.
var edits = []byte{'"', '\\', 'x', 'Q', '1', '-', '.', 'e', ' ', '{', '}', '[', ']', ',', ':', 'n', 't', 0x00, 0x1f, 0x80, 0xc3, 0xed}

// TestShapedElementsReadAsTheOracle: an answer of the known shapes, and
// every one-byte edit of it (replaced, removed or inserted at each
// offset), is billed by each tally as by its oracle, whole and in pieces
// (so that elements are cut at every place).
func TestShapedElementsReadAsTheOracle(t *testing.T) {
	checked := 0
	for name, body := range shapedAnswers() {
		variants := [][]byte{body}
		// Under the race detector (CI's core pass, twice) a sample of the
		// offsets: the test is single-threaded, and the plain pass edits
		// every offset.
		stride := 1
		if underRace {
			stride = 19
		}
		for at := 0; at < len(body); at += stride {
			variants = append(variants, slices.Delete(slices.Clone(body), at, at+1))
			for _, c := range edits {
				replaced := slices.Clone(body)
				replaced[at] = c
				variants = append(variants, replaced, slices.Insert(slices.Clone(body), at, c))
			}
		}
		for _, v := range variants {
			checkAgainstOracles(t, name, v)
			checked++
		}
	}
	t.Logf("%d answers checked", checked)
}

func checkAgainstOracles(t *testing.T, name string, body []byte) {
	t.Helper()
	oldPush := oldNewPushTally()
	_, _ = oldPush.Write(body)
	oldTxn := oldNewTxnTally()
	_, _ = oldTxn.Write(body)
	oldCount := oldNewPopCount()
	_, _ = oldCount.Write(body)
	for _, piece := range []int{len(body) + 1, 7} {
		push := NewPushTally()
		writeInPieces(push, body, piece)
		if got, want := push.Outcome(200), oldPush.Outcome(200); got != want {
			t.Fatalf("%s: push tally of %q in pieces of %d: %+v, the oracle %+v", name, body, piece, got, want)
		}
		txn := NewTxnTally()
		writeInPieces(txn, body, piece)
		if got, want := txn.Billed(200, 9), oldTxn.Billed(200, 9); got != want {
			t.Fatalf("%s: transaction tally of %q in pieces of %d: %d, the oracle %d", name, body, piece, got, want)
		}
		count := NewPopKeys()
		writeInPieces(count, body, piece)
		if got, _ := count.Result(200); got != oldCount.Messages(200) {
			t.Fatalf("%s: pop count of %q in pieces of %d: %d, the oracle %d", name, body, piece, got, oldCount.Messages(200))
		}
	}
	checkBillPop(t, name, body)
	checkPopAnswer(t, body)
}

// TestShapedElementsKeepTheDepthLimit: a message's data read on its own
// is held to the nesting limit of the whole answer (1,000, the message
// at depth 3), as the general reader holds it: past it, the answer is
// unreadable and bills nothing, as an answer wire.Check refuses.
func TestShapedElementsKeepTheDepthLimit(t *testing.T) {
	for _, depth := range []int{996, 997, 998} {
		for _, open := range []string{"[", `{"a":`} {
			close := "]"
			if open != "[" {
				close = "}"
			}
			data := strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth)
			body := []byte(`{"consumerGroup":"g","messages":[{"consumerGroup":"g","createdAt":"c","data":` + data + `,"id":"i","leaseId":"l","partition":"p","partitionId":"pp","producerSub":null,"traceId":null,"transactionId":"x"}]}`)
			checkAgainstOracles(t, fmt.Sprintf("data %d deep", depth), body)
			want := int64(0)
			if depth <= 997 {
				want = 1
			}
			count := NewPopKeys()
			_, _ = count.Write(body)
			if n, _ := count.Result(200); n != want {
				t.Errorf("data of %s nested %d deep: PopKeys %d, want %d", open, depth, n, want)
			}
			if _, _, ok := scanPopBilling(body); ok != (want == 1) {
				t.Errorf("data of %s nested %d deep: BillPop's reader answers %v", open, depth, ok)
			}
		}
	}
}
