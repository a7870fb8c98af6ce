package limits

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

// fastProduceSeeds are bodies at the one-pass reader's edges: member order,
// repeated members, escaped names, nesting at the limit at every level the
// reader tracks by hand, space everywhere, refusals of every kind, and the
// operations that make it start over.
var fastProduceSeeds = []string{
	`{"items":[{"queue":"q","partition":"p","payload":{"a":1},"transactionId":"t","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"}]}`,
	` { "items" : [ { "queue" : "q" , "payload" : [ 1 , 2 ] } , { "queue" : "r" } ] , "x" : { } } `,
	`{"items":[{"queue":"q","queue":"r","payload":1,"payload":"xx"}]}`,
	`{"items":[{"queue":1,"queue":"r"}]}`,
	`{"items":[{"queue":"r","queue":1}]}`,
	`{"items":[{"\u0071ueue":"q"}]}`,
	`{"\u0069tems":[{"queue":"q"}]}`,
	`{"items":[{"queue":"q\u00e9","partition":"\u0070"}]}`,
	`{"items":[{"queue":"q"}],"items":[]}`,
	`{"items":{},"items":[{"queue":"q"}]}`,
	`{"items":[{"queue":"q"},1]}`,
	`{"items":[{"queue":"q","traceId":"bad"}]}`,
	`{"items":[{"queue":"q","traceId":null,"transactionId":null,"partition":null}]}`,
	`{"items":[{"queue":"q","payload":1}]}x`,
	`{"items":[{"queue":"q","payload":1}]`,
	`{"items":[{"queue":"q","payload":1},]}`,
	`{"items":[{"queue":"q","payload":"\u0000"}]}`,
	`{"items":[]}`, `{}`, `[]`, `{"items":[{}]}`,
	`{"items":[{"queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-3) + strings.Repeat("]", wire.DefaultMaxDepth-3) + `}]}`,
	`{"items":[{"queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-2) + strings.Repeat("]", wire.DefaultMaxDepth-2) + `}]}`,
	`{"x":` + strings.Repeat("[", wire.DefaultMaxDepth-1) + strings.Repeat("]", wire.DefaultMaxDepth-1) + `,"items":[]}`,
	`{"x":` + strings.Repeat("[", wire.DefaultMaxDepth) + strings.Repeat("]", wire.DefaultMaxDepth) + `,"items":[]}`,
	`{"operations":[{"type":"push","items":[{"queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-5) + strings.Repeat("]", wire.DefaultMaxDepth-5) + `}]}]}`,
	`{"operations":[{"type":"push","items":[{"queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-4) + strings.Repeat("]", wire.DefaultMaxDepth-4) + `}]}]}`,
	`{"operations":[{"type":"push","queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-3) + strings.Repeat("]", wire.DefaultMaxDepth-3) + `}]}`,
	`{"operations":[{"type":"push","queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-2) + strings.Repeat("]", wire.DefaultMaxDepth-2) + `}]}`,
	`{"operations":[` + strings.Repeat("[", wire.DefaultMaxDepth-2) + strings.Repeat("]", wire.DefaultMaxDepth-2) + `]}`,
	`{"operations":[` + strings.Repeat("[", wire.DefaultMaxDepth-1) + strings.Repeat("]", wire.DefaultMaxDepth-1) + `]}`,
	`{"operations":[{"type":"push","items":[{"queue":"a","payload":1}]},{"type":"ack","items":[{"payload":1}]}]}`,
	`{"operations":[{"items":[{"queue":"a","payload":1}],"type":"ack"},{"items":[{"queue":"b"}],"type":"push"}]}`,
	`{"operations":[{"type":"push","items":[{"queue":"a"}],"type":"ack"}]}`,
	`{"operations":[{"type":"ack","type":"push","items":[{"queue":"a"}]}]}`,
	`{"operations":[{"type":"push","items":[{"queue":"a"}],"items":[]}]}`,
	`{"operations":[{"type":"\u0061ck","items":[{"queue":"a"}]}]}`,
	`{"operations":[{"type":"push","items":{},"queue":"z","partition":"p","payload":[1]}]}`,
	`{"operations":[{"queue":"z","type":7}]}`,
	`{"operations":[1,"x",null,[],{}]}`,
	`{"operations":[{"type":"push","items":[{"queue":"q"}]}],"operations":[]}`,
	`{"operations":[]}`,
	`{"items":[{"queue":"q","partition":"p","payload":{"a":[1,"x"]},"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"},{"queue":"q","partition":"p2","payload":7,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d","queue":"r"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"},{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","partition":"z"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3F1C2B9A-5D4E-4A6B-9C8D-7E6F5A4B3C2D"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"not-a-uuid-not-a-uuid-not-a-uuid-xxxx"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":""}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":[1,,2],"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":"\u0000","transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}]}`,
	`{"items":[{"queue":"q","partition":null,"payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}]}`,
	`{"items":[{"queue":"q\u0071","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b\""}]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5" }]}`,
	`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"}`,
	`{"operations":[{"type":"push","items":[{"queue":"q","partition":"p","payload":{"n":1},"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"}]}]}`,
	"\xef\xbb\xbf{\"items\":[{\"queue\":\"q\"}]}",
	"{\"items\":[{\"queue\":\"q\",\"payload\":\"\xed\xa0\x80\"}]}",
	"{\"items\":[{\"queue\":\"q\xff\"}]}",
	"{\"items\":[{\"queue\":\"q\"}]}\xc3",
	"{\"items\":[{\"queue\":\"q\",\"payload\":\"\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80\"}]}",
}

// FuzzFastProduceAgrees holds the one-pass reader to the two-pass reading
// (producereference_test.go) on every input: the same verdict, the same
// refusal, the same counts, pairs and size records.
func FuzzFastProduceAgrees(f *testing.F) {
	for _, s := range fastProduceSeeds {
		f.Add([]byte(s))
	}
	for _, s := range issue14Examples() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fastProduceAgrees(t, body) })
}

func TestFastProduceSeedsAgree(t *testing.T) {
	for _, s := range fastProduceSeeds {
		fastProduceAgrees(t, []byte(s))
	}
	for _, s := range issue14Examples() {
		fastProduceAgrees(t, []byte(s))
	}
}

func fastProduceAgrees(t *testing.T, body []byte) {
	t.Helper()
	orig := bytes.Clone(body)
	for _, r := range []struct {
		what           string
		parse, reading func([]byte) (ProduceBatch, error)
	}{
		{"push", ParsePush, parsePushReference},
		{"transaction", ParseTransaction, parseTransactionReference},
	} {
		got, err := r.parse(body)
		want, wantErr := r.reading(body)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%s %q: %v, the two-pass reading %v", r.what, body, err, wantErr)
		}
		sameBatch(t, r.what, body, got, want)
		// The gateway skips its text check for a body the reader accepts:
		// the reader accepts no other text.
		if err == nil {
			if textErr := wire.TextError(body); textErr != nil {
				t.Fatalf("%s %q: accepted a body whose text is refused: %v", r.what, body, textErr)
			}
		}
		// Handed back, the rooms carry these pairs' names to the next
		// reading, which must take them only for the same names.
		got.Release()
		want.Release()
	}
	if !bytes.Equal(body, orig) {
		t.Fatal("the body was modified")
	}
}

func sameBatch(t *testing.T, what string, body []byte, got, want ProduceBatch) {
	t.Helper()
	describe := func(b ProduceBatch) string {
		return fmt.Sprintf("items=%d bytes=%d heaviest=%+v pairs=%q counts=%v records=%v", b.Items, b.PayloadBytes,
			b.Heaviest, b.Pairs, b.PairItems, b.records)
	}
	if got.Items != want.Items || got.PayloadBytes != want.PayloadBytes || got.Heaviest != want.Heaviest ||
		len(got.Pairs) != len(want.Pairs) || (len(got.Pairs) > 0 && !reflect.DeepEqual(got.Pairs, want.Pairs)) ||
		!reflect.DeepEqual(append([]int{}, got.PairItems...), append([]int{}, want.PairItems...)) ||
		!reflect.DeepEqual(append([]sizeRecord{}, got.records...), append([]sizeRecord{}, want.records...)) {
		t.Fatalf("%s %q:\n got  %s\n want %s", what, body, describe(got), describe(want))
	}
}

// The bodies producers send are read in one pass: a transaction whose
// operations name their type before their items never starts over.
func TestSDKTransactionsAreReadOnce(t *testing.T) {
	for _, body := range []string{
		`{"operations": [{"type": "ack", "transactionId": "tx-9", "partitionId": "e2e25fb6-3992-491d-bc97-e488082bce43", "status": "completed"}, {"type": "push", "items": [{"queue": "cat-next", "partition": "Default", "payload": {"processed": 9}, "transactionId": "tx-n9"}]}], "requiredLeases": ["01a22ac1-1857-7000-b13e-11121ff4f283"]}`,
		`{"operations":[{"items":[{"queue":"a","payload":1}],"type":"push"},{"type":"push","queue":"q","payload":"abc"}]}`,
	} {
		var r produceReader
		r.b.reset()
		if err := r.transactionPass([]byte(body)); err != nil || r.startOver {
			t.Errorf("%s: %v, started over %v", body, err, r.startOver)
		}
		r.b.Release()
	}
	// A type repeated after the items it counted does start over, and
	// the last type decides.
	body := []byte(`{"operations":[{"type":"push","items":[{"queue":"a"}],"type":"ack"},{"type":"push","queue":"q"}]}`)
	var r produceReader
	r.b.reset()
	if err := r.transactionPass(body); err != nil || !r.startOver {
		t.Fatalf("%s: %v, started over %v", body, err, r.startOver)
	}
	r.b.Release()
	got, err := ParseTransaction(body)
	if err != nil || got.Items != 1 || got.Pairs[0].Queue != "q" {
		t.Fatalf("%s: %+v, %v; want the flat item of queue q only", body, got, err)
	}
}
