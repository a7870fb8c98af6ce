package limits

import (
	"bytes"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// pairs is shorthand for a pair list in expectations.
func pairs(qp ...string) []QueuePartition {
	var out []QueuePartition
	for i := 0; i+1 < len(qp); i += 2 {
		out = append(out, QueuePartition{qp[i], qp[i+1]})
	}
	return out
}

type batchWant struct {
	items    int
	pairs    []QueuePartition
	bytes    int64
	heaviest [2]int // index, bytes
}

func checkBatch(t *testing.T, name string, got ProduceBatch, want batchWant) {
	t.Helper()
	if got.Items != want.items || got.PayloadBytes != want.bytes ||
		got.Heaviest.Index != want.heaviest[0] || got.Heaviest.Bytes != want.heaviest[1] {
		t.Errorf("%s: items=%d bytes=%d heaviest=(%d,%d), want items=%d bytes=%d heaviest=(%d,%d)", name,
			got.Items, got.PayloadBytes, got.Heaviest.Index, got.Heaviest.Bytes,
			want.items, want.bytes, want.heaviest[0], want.heaviest[1])
	}
	if len(got.Pairs) != len(want.pairs) || (len(want.pairs) > 0 && !reflect.DeepEqual(got.Pairs, want.pairs)) {
		t.Errorf("%s: pairs=%v, want %v", name, got.Pairs, want.pairs)
	}
}

func TestParsePushShapes(t *testing.T) {
	cases := []struct {
		name string
		body string
		ok   bool
		want batchWant
	}{
		// Recorded broker traffic (fixtures C14, C15, C16, C22, C23, C24).
		{"fixture single item", `{"items": [{"queue": "cat-orders", "partition": "p1", "payload": {"orderId": 1, "amount": 9.5}, "transactionId": "tx-1"}]}`,
			true, batchWant{1, pairs("cat-orders", "p1"), 29, [2]int{0, 29}}},
		{"fixture three mixed", `{"items": [{"queue": "cat-orders", "partition": "p1", "payload": {"orderId": 2}, "transactionId": "tx-2"}, {"queue": "cat-orders", "partition": "p2", "payload": {"orderId": 3}, "transactionId": "tx-3"}, {"queue": "cat-orders", "partition": "p2", "payload": {"orderId": 4}}]}`,
			true, batchWant{3, pairs("cat-orders", "p1", "cat-orders", "p2"), 42, [2]int{0, 14}}},
		{"no partition is Default", `{"items": [{"queue": "cat-orders", "payload": {"orderId": 5}, "transactionId": "tx-5"}]}`,
			true, batchWant{1, pairs("cat-orders", "Default"), 14, [2]int{0, 14}}},
		{"string payload counts quotes", `{"items":[{"queue":"q","payload":"hello"}]}`,
			true, batchWant{1, pairs("q", "Default"), 7, [2]int{0, 7}}},
		{"payload types", `{"items": [{"queue": "a", "payload": null}, {"queue": "a", "payload": 12345}, {"queue": "a", "payload": [1, "two", {"three": 3}]}]}`,
			true, batchWant{3, pairs("a", "Default"), 4 + 5 + 24, [2]int{2, 24}}},
		{"empty items", `{"items": []}`, true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"null partition is Default", `{"items":[{"queue":"q","partition":null,"payload":1}]}`,
			true, batchWant{1, pairs("q", "Default"), 1, [2]int{0, 1}}},
		{"empty partition kept", `{"items":[{"queue":"q","partition":"","payload":1}]}`,
			true, batchWant{1, pairs("q", ""), 1, [2]int{0, 1}}},
		{"escaped names", `{"items":[{"queue":"q\u00e9\"x","partition":"p\/1","payload":1}]}`,
			true, batchWant{1, pairs("qé\"x", "p/1"), 1, [2]int{0, 1}}},
		{"escaped key", `{"items":[{"\u0071ueue":"q","payload":1}]}`,
			true, batchWant{1, pairs("q", "Default"), 1, [2]int{0, 1}}},
		{"whitespace around payload not counted", "{\"items\":[{\"queue\":\"q\",\"payload\" :  \n {\"a\" : 1}  }]}",
			true, batchWant{1, pairs("q", "Default"), 9, [2]int{0, 9}}},
		{"trailing whitespace", "{\"items\":[]}\n\t ", true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"other fields ignored", `{"x":{"items":5},"items":[{"traceId":"0190b4c8-9a5e-7c3d-8f21-5b6a7c8d9e0f","queue":"q","payload":{},"extra":[1,{"queue":"z"}]}],"y":[]}`,
			true, batchWant{1, pairs("q", "Default"), 2, [2]int{0, 2}}},
		{"item without payload is an empty object", `{"items":[{"queue":"q","payload":1},{"queue":"q"}]}`,
			true, batchWant{2, pairs("q", "Default"), 1 + 2, [2]int{1, 2}}},
		{"null transactionId", `{"items":[{"queue":"q","transactionId":null,"payload":1}]}`,
			true, batchWant{1, pairs("q", "Default"), 1, [2]int{0, 1}}},
		{"empty queue counted", `{"items":[{"queue":"","payload":1}]}`,
			true, batchWant{1, pairs("", "Default"), 1, [2]int{0, 1}}},
		{"deep payload within the limit", `{"items":[{"queue":"q","payload":` + strings.Repeat("[", 900) + strings.Repeat("]", 900) + `}]}`,
			true, batchWant{1, pairs("q", "Default"), 1800, [2]int{0, 1800}}},
		{"last duplicate items wins", `{"items":[{"payload":1}],"items":[{"queue":"b","payload":22}]}`,
			true, batchWant{1, pairs("b", "Default"), 2, [2]int{0, 2}}},
		{"last duplicate queue wins", `{"items":[{"queue":"a","queue":"b","payload":1}]}`,
			true, batchWant{1, pairs("b", "Default"), 1, [2]int{0, 1}}},
		{"keys are case sensitive", `{"items":[{"queue":"a","Queue":"b","payload":1}]}`,
			true, batchWant{1, pairs("a", "Default"), 1, [2]int{0, 1}}},
		{"heaviest is the first largest", `{"items":[{"queue":"a","payload":1},{"queue":"a","payload":333},{"queue":"a","payload":"x"}]}`,
			true, batchWant{3, pairs("a", "Default"), 1 + 3 + 3, [2]int{1, 3}}},

		// Refused shapes: the broker answers these with its own 400.
		{"fixture items missing", `{"nope": 1}`, false, batchWant{}},
		{"fixture item without queue", `{"items": [{"payload": {}}]}`, false, batchWant{}},
		{"fixture partition not a string", `{"items": [{"queue": "cat-orders", "partition": 7, "payload": {}}]}`, false, batchWant{}},
		{"fixture invalid JSON", `not json`, false, batchWant{}},
		{"fixture empty body", ``, false, batchWant{}},
		{"fixture transactionId not a string", `{"items": [{"queue": "cat-orders", "payload": {}, "transactionId": 99}]}`, false, batchWant{}},
		{"byte order mark", "\xef\xbb\xbf{\"items\":[{\"queue\":\"q\",\"payload\":1}]}", false, batchWant{}},
		{"invalid UTF-8", "{\"items\":[{\"queue\":\"u\",\"payload\":\"\xff\xfe\"}]}", false, batchWant{}},
		{"half a surrogate pair", `{"items":[{"queue":"\ud800","payload":1}]}`, false, batchWant{}},
		{"too deep", `{"items":[{"queue":"q","payload":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}]}`, false, batchWant{}},
		{"queue not a string", `{"items":[{"queue":1,"payload":1}]}`, false, batchWant{}},
		{"queue null", `{"items":[{"queue":null,"payload":1}]}`, false, batchWant{}},
		{"item not an object", `{"items":[1]}`, false, batchWant{}},
		{"items not an array", `{"items":{"queue":"q","payload":1}}`, false, batchWant{}},
		{"items null", `{"items":null}`, false, batchWant{}},
		{"last duplicate items invalid", `{"items":[{"queue":"b","payload":1}],"items":[{"payload":1}]}`, false, batchWant{}},
		{"last duplicate items not array", `{"items":[{"queue":"b","payload":1}],"items":3}`, false, batchWant{}},
		{"top-level array", `[{"queue":"q","payload":1}]`, false, batchWant{}},
		{"trailing garbage", `{"items":[]} x`, false, batchWant{}},
		{"two values", `{"items":[]}{"items":[]}`, false, batchWant{}},
		{"truncated", `{"items":[{"queue":"q","payload":{"a":`, false, batchWant{}},
		{"trailing comma", `{"items":[{"queue":"q","payload":1},]}`, false, batchWant{}},
	}
	for _, c := range cases {
		got, err := ParsePush([]byte(c.body))
		if ok := err == nil; ok != c.ok {
			t.Errorf("%s: ok=%v, want %v", c.name, ok, c.ok)
			continue
		}
		if err == nil {
			checkBatch(t, c.name, got, c.want)
		}
	}
}

func TestParsePushManyPairs(t *testing.T) {
	// More pairs than the linear search handles: the index map takes over
	// and first-seen order is kept.
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	var want []QueuePartition
	for i := 0; i < 50; i++ {
		for rep := 0; rep < 2; rep++ {
			if i > 0 || rep > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"queue":"q%d","partition":"p%d","payload":%d}`, i%7, i, i)
		}
		want = append(want, QueuePartition{fmt.Sprintf("q%d", i%7), fmt.Sprintf("p%d", i)})
	}
	sb.WriteString(`]}`)
	b, err := ParsePush([]byte(sb.String()))
	if err != nil || b.Items != 100 || !reflect.DeepEqual(b.Pairs, want) {
		t.Fatalf("err=%v items=%d pairs=%v", err, b.Items, b.Pairs)
	}
}

func TestParseTransaction(t *testing.T) {
	cases := []struct {
		name string
		body string
		ok   bool
		want batchWant
	}{
		{"fixture ack + push", `{"operations": [{"type": "ack", "transactionId": "tx-9", "partitionId": "e2e25fb6-3992-491d-bc97-e488082bce43", "status": "completed"}, {"type": "push", "items": [{"queue": "cat-next", "partition": "Default", "payload": {"processed": 9}, "transactionId": "tx-n9"}]}], "requiredLeases": ["01a22ac1-1857-7000-b13e-11121ff4f283"]}`,
			true, batchWant{1, pairs("cat-next", "Default"), 16, [2]int{0, 16}}},
		{"fixture push only", `{"operations": [{"type": "push", "items": [{"queue": "cat-next", "partition": "tx-only", "payload": {"n": 1}}]}]}`,
			true, batchWant{1, pairs("cat-next", "tx-only"), 8, [2]int{0, 8}}},
		{"fixture empty operations", `{"operations": []}`, false, batchWant{}},
		{"fixture operations missing", `{}`, false, batchWant{}},
		{"fixture invalid JSON", `[`, false, batchWant{}},
		{"flat form", `{"operations":[{"type":"push","queue":"q","payload":"abc"},{"queue":"q","partition":"p","payload":1}]}`,
			true, batchWant{2, pairs("q", "Default", "q", "p"), 6, [2]int{0, 5}}},
		{"items win over flat", `{"operations":[{"queue":"z","payload":1,"items":[{"queue":"a","payload":22}]}]}`,
			true, batchWant{1, pairs("a", "Default"), 2, [2]int{0, 2}}},
		{"items not an array falls back to flat", `{"operations":[{"queue":"z","payload":1,"items":{}}]}`,
			true, batchWant{1, pairs("z", "Default"), 1, [2]int{0, 1}}},
		{"ack with items skipped, type after items", `{"operations":[{"items":[{"queue":"a","payload":1}],"type":"ack"},{"items":[{"queue":"b","payload":1}]}]}`,
			true, batchWant{1, pairs("b", "Default"), 1, [2]int{0, 1}}},
		{"ack-shaped and malformed ops skipped", `{"operations":[{"transactionId":"t","partitionId":"p"},3,"x",null,[],{"payload":1}]}`,
			true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"flat op without payload is an empty object", `{"operations":[{"type":"push","queue":"q"}]}`,
			true, batchWant{1, pairs("q", "Default"), 2, [2]int{0, 2}}},
		{"nested item without payload is an empty object", `{"operations":[{"type":"push","items":[{"queue":"a","payload":1},{"queue":"a"}]}]}`,
			true, batchWant{2, pairs("a", "Default"), 3, [2]int{1, 2}}},
		{"flat op queue not a string", `{"operations":[{"queue":5,"payload":1}]}`, false, batchWant{}},
		{"byte order mark", "\xef\xbb\xbf{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"q\"}]}]}", false, batchWant{}},
		{"items numbered across ops", `{"operations":[{"items":[{"queue":"a","payload":1},{"queue":"a","payload":1}]},{"queue":"b","payload":4444}]}`,
			true, batchWant{3, pairs("a", "Default", "b", "Default"), 6, [2]int{2, 4}}},
		{"non-ack type with items counted", `{"operations":[{"type":7,"items":[{"queue":"a","payload":1}]}]}`,
			true, batchWant{1, pairs("a", "Default"), 1, [2]int{0, 1}}},
		{"nested invalid item fails", `{"operations":[{"type":"push","items":[{"payload":1}]}]}`, false, batchWant{}},
		{"nested invalid item in ack is ignored", `{"operations":[{"type":"ack","items":[{"payload":1}]}]}`,
			true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"flat bad partition fails", `{"operations":[{"queue":"q","partition":1,"payload":1}]}`, false, batchWant{}},
		{"operations not an array", `{"operations":{}}`, false, batchWant{}},
		{"positions rider adds nothing", `{"operations":[{"type":"push","items":[{"queue":"a","payload":1}]}],"positions":[{"queue":"a","partition":"p","consumerGroup":"g","offset":42,"metadata":"m"},{"queue":"a","consumerGroup":"g","offset":null,"partition":7}]}`,
			true, batchWant{1, pairs("a", "Default"), 1, [2]int{0, 1}}},
		{"positions before operations", `{"positions":[{"queue":"a","consumerGroup":"g","offset":0}],"operations":[{"type":"ack","transactionId":"t"}]}`,
			true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"positions not an array", `{"operations":[{"type":"ack"}],"positions":{}}`, false, batchWant{}},
		{"positions null", `{"operations":[{"type":"ack"}],"positions":null}`, false, batchWant{}},
		{"position without offset", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g"}]}`, false, batchWant{}},
		{"position negative offset", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g","offset":-1}]}`, false, batchWant{}},
		{"position offset past 2^63-1", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g","offset":9223372036854775808}]}`, false, batchWant{}},
		{"position offset 2^63-1", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g","offset":9223372036854775807}]}`,
			true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"position empty queue", `{"operations":[{"type":"ack"}],"positions":[{"queue":"","consumerGroup":"g","offset":1}]}`, false, batchWant{}},
		{"position without group", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","offset":1}]}`, false, batchWant{}},
		{"position metadata not a string", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g","offset":1,"metadata":5}]}`, false, batchWant{}},
		{"position metadata too long", `{"operations":[{"type":"ack"}],"positions":[{"queue":"a","consumerGroup":"g","offset":1,"metadata":"` + strings.Repeat("m", 4097) + `"}]}`, false, batchWant{}},
		{"last duplicate positions wins", `{"operations":[{"type":"ack"}],"positions":[5],"positions":[{"queue":"a","consumerGroup":"g","offset":1}]}`,
			true, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"position typed operation refused", `{"operations":[{"type":"positions","queue":"a","consumerGroup":"g","offset":1}]}`, false, batchWant{}},
		{"position typed operation with items refused", `{"operations":[{"type":"position","items":[{"queue":"a","payload":1}]}]}`, false, batchWant{}},
		{"last duplicate operations wins", `{"operations":[{"queue":"a","payload":1}],"operations":[{"queue":"b","payload":1}]}`,
			true, batchWant{1, pairs("b", "Default"), 1, [2]int{0, 1}}},
	}
	for _, c := range cases {
		got, err := ParseTransaction([]byte(c.body))
		if ok := err == nil; ok != c.ok {
			t.Errorf("%s: ok=%v (%v), want %v", c.name, ok, err, c.ok)
			continue
		}
		if err == nil {
			checkBatch(t, c.name, got, c.want)
		}
	}
}

func TestParseEphemeral(t *testing.T) {
	const refused = -1
	cases := map[string]int{
		`{"queue":"q","messages":[1,{"a":[1,2]},"x",null]}`: 4,
		`{"queue":"q","partition":"p","messages":[]}`:       0,
		`{"queue":"q"}`:                       refused,
		`{"messages":{"a":1}}`:                refused,
		`{"messages":[1,2],"messages":[1]}`:   1,
		`[1,2,3]`:                             refused,
		`{"messages":[1,2,3]`:                 refused,
		``:                                    refused,
		"\xef\xbb\xbf{\"messages\":[1,2]}":    refused,
		`{"messages":[1,2]} {"messages":[1]}`: refused,
		`{"x":{"messages":[1,2,3]},"messages":[[1],[2],[3]]}`: 3,
		`{"messages":null}`: refused,
		`{"messages":[{"payload":{"deep":[[[[[]]]]]}},true]}`: 2,
	}
	for body, want := range cases {
		b, err := ParseEphemeral([]byte(body))
		got := b.Items
		if err != nil {
			got = refused
		}
		if got != want {
			t.Errorf("%q: %d (%v), want %d", body, got, err, want)
		}
	}
}

func TestReadCycle(t *testing.T) {
	cases := []struct {
		name string
		body string
		want batchWant
	}{
		{"fixture", `{"query_id": "81d10ed0", "partition_id": "03324d96", "consumer_group": "streams.cat.totals", "state_ops": [{"type": "upsert", "key": "total:acct-1", "value": {"sum": 12, "count": 2}}], "push_items": [{"queue": "cat-sink", "partition": "acct-1", "payload": {"acct": "acct-1", "sum": 12}}], "ack": {"transactionId": "st-2", "status": "completed", "count": 2}}`,
			batchWant{1, pairs("cat-sink", "acct-1"), 29, [2]int{0, 29}}},
		{"no push items", `{"query_id":"x","state_ops":[]}`, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"null push items", `{"push_items":null}`, batchWant{0, nil, 0, [2]int{-1, 0}}},
		{"bad elements skipped, positions kept", `{"push_items":[1,{"queue":""},{"queue":"a","payload":"xx"},{"partition":"p"},{"queue":"a","partition":"","data":[1,2]},{"queue":"b","partition":"p","payload":7,"data":"ignored"},{"queue":3}]}`,
			batchWant{3, pairs("a", "Default", "b", "p"), 4 + 5 + 1, [2]int{4, 5}}},
		{"data alias", `{"push_items":[{"queue":"a","data":{"k":"v"}}]}`, batchWant{1, pairs("a", "Default"), 9, [2]int{0, 9}}},
		{"no payload counts zero", `{"push_items":[{"queue":"a"}]}`, batchWant{1, pairs("a", "Default"), 0, [2]int{0, 0}}},
		{"non-string partition is Default", `{"push_items":[{"queue":"a","partition":9,"payload":1}]}`, batchWant{1, pairs("a", "Default"), 1, [2]int{0, 1}}},
		{"not an object", `[{"push_items":[]}]`, batchWant{0, nil, 0, [2]int{-1, 0}}},
	}
	for _, c := range cases {
		got, err := parseCycle([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		checkBatch(t, c.name, got, c.want)
	}
	for _, refused := range []string{
		`{"push_items":[{"queue":"a","payload":1}`,
		`{"push_items":{"queue":"a","payload":1}}`,
		`{"push_items":"x"}`,
		"\xef\xbb\xbf{\"push_items\":[{\"queue\":\"a\"}]}",
	} {
		if _, err := parseCycle([]byte(refused)); err == nil {
			t.Errorf("%q was read", refused)
		}
	}
}

func TestCheckProduce(t *testing.T) {
	lim := AllUnlimited()
	body := `{"items":[{"queue":"a","payload":"12"},{"queue":"a","payload":"1234"},{"queue":"a","payload":"123456"},{"queue":"a","payload":"12345678"}]}`
	b, err := ParsePush([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r := CheckProduce(b, lim, 0); r != nil {
		t.Fatalf("unlimited: %v", r.Message)
	}
	// Payload sizes are 4, 6, 8, 10: the first item over the cap is named,
	// not the heaviest.
	lim.MaxPayloadBytes = 5
	if r := CheckProduce(b, lim, 0); r == nil || r.Message != "item 1: payload 6 bytes exceeds max_payload_bytes (5)" {
		t.Fatalf("payload cap: %+v", r)
	}
	lim.MaxPayloadBytes = 8
	if r := CheckProduce(b, lim, 0); r == nil || r.Message != "item 3: payload 10 bytes exceeds max_payload_bytes (8)" {
		t.Fatalf("payload cap: %+v", r)
	}
	lim.MaxPayloadBytes = 10 // equal is allowed
	if r := CheckProduce(b, lim, 0); r != nil {
		t.Fatalf("at cap: %v", r.Message)
	}
	// Batch cap: plan, else the gateway default, else 10 000. The payload
	// cap is checked first.
	lim.MaxBatchItems = 3
	if r := CheckProduce(b, lim, 100); r == nil || r.Message != "batch of 4 items exceeds max_batch_items (3)" {
		t.Fatalf("batch cap: %+v", r)
	}
	lim.MaxPayloadBytes = 1
	if r := CheckProduce(b, lim, 100); r == nil || !strings.HasPrefix(r.Message, "item 0: payload 4 bytes") {
		t.Fatalf("payload first: %+v", r)
	}
	lim = AllUnlimited()
	if r := CheckProduce(b, lim, 4); r != nil {
		t.Fatalf("default at cap: %v", r.Message)
	}
	if r := CheckProduce(b, lim, 2); r == nil || r.Message != "batch of 4 items exceeds max_batch_items (2)" {
		t.Fatalf("default cap: %+v", r)
	}
	big := ProduceBatch{Items: DefaultMaxBatchItems + 1}
	if r := CheckProduce(big, lim, 0); r == nil || r.Message != "batch of 10001 items exceeds max_batch_items (10000)" {
		t.Fatalf("built-in default: %+v", r)
	}
	if r := CheckProduce(ProduceBatch{Items: DefaultMaxBatchItems}, lim, 0); r != nil {
		t.Fatalf("built-in default at cap: %v", r.Message)
	}
	// Zero items: nothing to refuse.
	empty, _ := ParsePush([]byte(`{"items":[]}`))
	if empty.Items != 0 {
		t.Fatalf("empty push counted %d", empty.Items)
	}
	lim.MaxPayloadBytes, lim.MaxBatchItems = 0, 0
	if r := CheckProduce(empty, lim, 0); r != nil {
		t.Fatalf("empty: %v", r.Message)
	}
}

func TestCheckCycle(t *testing.T) {
	b, _ := parseCycle([]byte(`{"push_items":[{"queue":""},{"queue":"a","payload":"1234"},{"queue":"a","payload":"123456"},{"queue":"a","payload":"12"}]}`))
	lim := AllUnlimited()
	if r := CheckCycle(b, lim, 0); r != nil {
		t.Fatal(r.Message)
	}
	lim.MaxPayloadBytes = 5
	if r := CheckCycle(b, lim, 0); r == nil || r.Message != "push_items[2]: payload 8 bytes exceeds max_payload_bytes (5)" {
		t.Fatalf("%+v", r)
	}
	lim.MaxPayloadBytes = 8
	if r := CheckCycle(b, lim, 0); r != nil {
		t.Fatal(r.Message)
	}
	lim.MaxPayloadBytes = 0
	if empty, _ := parseCycle([]byte(`{"push_items":[]}`)); CheckCycle(empty, lim, 0) != nil {
		t.Fatal("an empty cycle was refused")
	}
}

// realisticPush is a 100-item push as the SDKs send it: UUIDv7-like
// transaction ids, an explicit partition, a small JSON object payload, over a
// few partitions of one queue.
func realisticPush(n int) []byte {
	var sb bytes.Buffer
	sb.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"queue":"orders","partition":"customer-%d","payload":{"orderId":%d,"customer":"customer-%d","amount":%d.95,"currency":"EUR","items":[{"sku":"SKU-%04d","qty":%d}],"note":"standard delivery"},"transactionId":"01a22ac0-e963-7%03d-986d-86e1125b%04d"}`,
			i%4, 1000+i, i%4, 10+i, i, 1+i%3, i, i)
	}
	sb.WriteString(`]}`)
	return sb.Bytes()
}

func BenchmarkParsePush100(b *testing.B) {
	body := realisticPush(100)
	lim := AllUnlimited()
	lim.MaxPayloadBytes, lim.MaxBatchItems = 65536, 1000
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch, err := ParsePush(body)
		if err != nil || batch.Items != 100 || len(batch.Pairs) != 4 {
			b.Fatal("parse")
		}
		if CheckProduce(batch, lim, 0) != nil {
			b.Fatal("refused")
		}
	}
}

func TestParsePushDoesNotCopyLargeBodies(t *testing.T) {
	// 12 items of 1 MiB each: the body is checked and walked in place, so
	// parsing allocates next to nothing, never a second copy of the 12 MiB
	// body.
	const items, size = 12, 1 << 20
	var sb bytes.Buffer
	sb.WriteString(`{"items":[`)
	for i := 0; i < items; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"queue":"big","partition":"p%d","payload":"%s"}`, i%3, strings.Repeat("x", size))
	}
	sb.WriteString(`]}`)
	body := sb.Bytes()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b, err := ParsePush(body)
	runtime.ReadMemStats(&after)
	if err != nil || b.Items != items || b.PayloadBytes != items*(size+2) {
		t.Fatalf("err=%v items=%d bytes=%d", err, b.Items, b.PayloadBytes)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(body))/2 {
		t.Fatalf("parsing a %d-byte body allocated %d bytes", len(body), alloc)
	} else {
		t.Logf("parsing a %d-byte body allocated %d bytes", len(body), alloc)
	}
}

func TestReadCycleCountsItemsPerGroup(t *testing.T) {
	b, _ := parseCycle([]byte(`{"push_items":[
		{"queue":"a","payload":1},{"queue":"b","partition":"p","payload":2},
		{"queue":"a","payload":3},"skipped",{"queue":"a","partition":"Default","data":4}]}`))
	if len(b.Pairs) != 2 || len(b.PairItems) != 2 || b.PairItems[0] != 3 || b.PairItems[1] != 1 {
		t.Fatalf("pairs %v items %v, want a/Default 3 and b/p 1", b.Pairs, b.PairItems)
	}
	many := `{"items":[`
	for i := range 20 {
		if i > 0 {
			many += ","
		}
		many += fmt.Sprintf(`{"queue":"q%d","payload":1},{"queue":"q%d","payload":2}`, i%10, i%10)
	}
	p, err := ParsePush([]byte(many + `]}`))
	if err != nil || len(p.Pairs) != 10 {
		t.Fatalf("push pairs %d", len(p.Pairs))
	}
	for i, n := range p.PairItems {
		if n != 4 {
			t.Fatalf("pair %d counted %d items, want 4", i, n)
		}
	}
}

// A push's pairs name the default partition without a copy of its own:
// one item costs its size record, the pair list, its counts and the queue
// name, whether the partition is named or left out.
func TestParsePushAllocations(t *testing.T) {
	for _, body := range []string{
		`{"items":[{"queue":"orders","partition":"Default","payload":{"n":1}}]}`,
		`{"items":[{"queue":"orders","payload":{"n":1}}]}`,
	} {
		b := []byte(body)
		allocs := testing.AllocsPerRun(100, func() {
			batch, err := ParsePush(b)
			if err != nil || batch.Pairs[0].Partition != DefaultPartition {
				t.Fatalf("%s: %v %+v", body, err, batch)
			}
		})
		if allocs > 5 {
			t.Errorf("%s: %v allocations", body, allocs)
		}
	}
}

// Identified counts the push items whose transactionId is a non-empty
// string, whichever reader took the body (the SDK's shape, another
// member order, escapes, whitespace).
func TestParsePushCountsIdentifiedItems(t *testing.T) {
	for _, tc := range []struct {
		body       string
		items, ids int
	}{
		{`{"items":[{"queue":"q","partition":"p","payload":1,"transactionId":"t1","traceId":null},{"queue":"q","partition":"p","payload":2,"transactionId":"t2","traceId":null}]}`, 2, 2},
		{`{"items":[{"queue":"q","payload":1,"transactionId":"t1"},{"queue":"q","payload":2}]}`, 2, 1},
		{`{"items":[{"transactionId":"t\u0031","queue":"q"},{ "queue" : "q" , "transactionId" : "x" }]}`, 2, 2},
		{`{"items":[{"queue":"q","transactionId":""},{"queue":"q","transactionId":null}]}`, 2, 0},
		{`{"items":[{"queue":"q","transactionId":"a","transactionId":""}]}`, 1, 0},
	} {
		b, err := ParsePush([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if b.Items != tc.items || b.Identified != tc.ids {
			t.Errorf("%s: %d items, %d identified; want %d, %d", tc.body, b.Items, b.Identified, tc.items, tc.ids)
		}
		b.Release()
	}
}
