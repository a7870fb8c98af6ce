package meter

import (
	"fmt"
	"strings"
)

// Answers shaped as the broker 0.15.1 writes them (testdata/broker: S5,
// S11, C86): compact, members in sorted order, UUIDv7 ids. They feed the
// benchmarks and the allocation tests.

// pushAnswer is the answer to a push of n items.
func pushAnswer(n int) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d,"message_id":"01a22ac0-cdd3-7%03x-910d-254e7a04a860","partition_id":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","queueName":"sdk-orders","status":"queued","trace_id":null,"transaction_id":"01a22ac0-cdd0-739c-987b-5766b13d%04x"}`, i, i%4096, i%65536)
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// txnAnswer is the answer to a committed transaction of one ack and n
// pushes.
func txnAnswer(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"job-1","type":"ack"}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"index":%d,"messageId":"01a22ac0-db5a-7%03x-92ec-d418c71ee565","partitionId":"f99829c2-c92b-42c8-b255-daee389965cb","queueName":"sdk-orders-out","success":true,"transactionId":"38e679c0-a999-469e-bf02-eca031bd%04x","type":"push"}`, i+1, i%4096, i%65536)
	}
	b.WriteString(`],"success":true,"transactionId":"bf34ae70-a720-4565-bb8b-3ee176b92365"}`)
	return []byte(b.String())
}

// payload returns a message's data of about size bytes: an order, as an
// SDK producer would send it (the recorded pops carry small ASCII objects:
// S8, C34), padded by a delivery note. The 1 KB order also names its
// customer past ASCII and quotes in its note, so that the slower paths of
// the reader take their share.
func payload(i, size int) string {
	head := fmt.Sprintf(`{"customer":"cust-%06d","note":"`, i)
	tail := fmt.Sprintf(`","orderId":%d,"total":139.9}`, 1000+i)
	note := `deliver to the back door, ring twice; leave it with the neighbour at no. 12 if nobody answers. `
	if size >= 400 {
		head = fmt.Sprintf(`{"customer":{"id":"cust-%06d","name":"Zoë Müller","tier":"gold"},"items":[{"qty":2,"sku":"A-%d","unit":9.95},{"qty":1,"sku":"B-7","unit":120}],"note":"ask for \"Zoë\" – `, i, i%97)
		tail = fmt.Sprintf(`","orderId":%d,"paid":true,"total":139.9}`, 1000+i)
	}
	pad := max(0, size-len(head)-len(tail))
	text := strings.Repeat(note, pad/len(note)+1)[:pad]
	return head + text + tail
}

// popAnswerBody is the answer to a pop that delivered n messages whose data
// is about size bytes each.
func popAnswerBody(n, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"consumerGroup":"worker","leaseId":"01a22ac0-db68-7000-95a9-8adf68ece548","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"consumerGroup":"worker","createdAt":"2026-11-30T04:40:08.409175Z","data":%s,"id":"01a22ac0-cdd3-7%03x-9f54-11a670d52b36","leaseId":"01a22ac0-db68-7000-95a9-8adf68ece548","partition":"customer-7","partitionId":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","producerSub":null,"traceId":null,"transactionId":"01a22ac0-cdd0-739c-987b-5766b13d%04x"}`, payload(i, size), i%4096, i%65536)
	}
	b.WriteString(`],"partition":"customer-7","partitionId":"10a61e7c-1734-4d0b-96ce-2b1c46e052e0","queue":"sdk-orders","success":true}`)
	return []byte(b.String())
}
