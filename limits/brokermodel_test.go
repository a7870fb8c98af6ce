package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

// A model of how the broker (Queen 0.15.1) reads produce bodies, written
// from its recorded behaviour (fixtures C14–C33, C86–C91, C170, S30) and
// the bodies below that it was seen to read differently from the gateway,
// on encoding/json into generic values: keys match
// exactly, the last of duplicated keys wins, values are kept as sent. It
// shares no code with the gateway's parsers, which the fuzz target below
// holds against it.

// brokerJSON is the broker's JSON library taking a body: it skips a
// byte-order mark, reads one value of any depth, and refuses invalid text,
// half surrogate pairs included. gatewayOnly marks a body the broker takes
// but the gateway refuses on purpose (a byte-order mark; nesting past
// wire.DefaultMaxDepth). sure is false when the model cannot tell a
// half surrogate pair from a real U+FFFD.
func brokerJSON(body []byte) (text []byte, ok, gatewayOnly, sure bool) {
	text, hadBOM := bytes.CutPrefix(body, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(text)) == 0 || !utf8.Valid(text) || !json.Valid(text) {
		// Invalid UTF-8 is not "refused" by the broker: it crashes. Either
		// way the gateway must not forward it.
		return nil, false, false, true
	}
	depth, deepest, replaced, nul := 0, 0, false, false
	dec := json.NewDecoder(bytes.NewReader(text))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
				deepest = max(deepest, depth)
			} else {
				depth--
			}
		case string:
			replaced = replaced || strings.ContainsRune(v, utf8.RuneError)
			// PostgreSQL stores U+0000 in neither text nor jsonb: the
			// broker's insert fails and the body poisons its buffer.
			nul = nul || strings.ContainsRune(v, 0)
		}
	}
	if nul {
		return nil, false, false, true
	}
	if replaced {
		lower := bytes.ToLower(text)
		if bytes.Contains(lower, []byte(`\ufffd`)) || bytes.Contains(text, []byte("\xef\xbf\xbd")) {
			return text, true, hadBOM || deepest > wire.DefaultMaxDepth, false
		}
		return nil, false, false, true // a half surrogate pair: refused
	}
	return text, true, hadBOM || deepest > wire.DefaultMaxDepth, true
}

func modelTop(body []byte) (map[string]json.RawMessage, bool) {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, false
	}
	return top, true
}

func modelObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false
	}
	return m, true
}

func modelArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, false
	}
	return a, true
}

func modelString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// modelPushItem is one push item as the broker validates and stores it
// (C26–C28): queue a string, partition a string (absent or null:
// "Default"), transactionId a string or absent, payload any value and
// absent meaning the empty object the broker stores.
func modelPushItem(raw json.RawMessage) (ProduceItem, bool) {
	m, ok := modelObject(raw)
	if !ok {
		return ProduceItem{}, false
	}
	q, ok := modelString(m["queue"])
	if !ok {
		return ProduceItem{}, false
	}
	it := ProduceItem{Queue: q, Partition: DefaultPartition, PayloadBytes: len("{}")}
	if payload, present := m["payload"]; present {
		it.PayloadBytes = len(payload)
	}
	if p, present := m["partition"]; present && string(p) != "null" {
		s, ok := modelString(p)
		if !ok {
			return ProduceItem{}, false
		}
		it.Partition = s
	}
	if txn, present := m["transactionId"]; present && string(txn) != "null" {
		if _, ok := modelString(txn); !ok {
			return ProduceItem{}, false
		}
	}
	if !modelStorable(m, it) {
		return ProduceItem{}, false
	}
	return it, true
}

// modelStorable is the broker's schema taking an item: queues.name,
// partitions.name and messages.transaction_id are varchar(255), counted
// in characters; messages.trace_id is a uuid, cast from the text of
// traceId unless it is absent, null or empty.
func modelStorable(m map[string]json.RawMessage, it ProduceItem) bool {
	if utf8.RuneCountInString(it.Queue) > 255 || utf8.RuneCountInString(it.Partition) > 255 {
		return false
	}
	if txn, ok := modelString(m["transactionId"]); ok && utf8.RuneCountInString(txn) > 255 {
		return false
	}
	raw, present := m["traceId"]
	if !present || string(raw) == "null" {
		return true
	}
	tr, ok := modelString(raw)
	return ok && (tr == "" || modelUUID.MatchString(tr))
}

// modelUUID is PostgreSQL's uuid input: 32 hex digits, a hyphen allowed
// after each group of four but the last, the whole optionally in braces.
var modelUUID = regexp.MustCompile(`^(\{[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}|[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7})$`)

// modelPush is POST /api/v1/push: the items it stores, or ok false for a
// body it refuses (C25, C29, C30).
func modelPush(text []byte) ([]ProduceItem, bool) {
	top, ok := modelTop(text)
	if !ok {
		return nil, false
	}
	arr, ok := modelArray(top["items"])
	if !ok {
		return nil, false
	}
	out := []ProduceItem{}
	for _, raw := range arr {
		it, ok := modelPushItem(raw)
		if !ok {
			return nil, false
		}
		out = append(out, it)
	}
	return out, true
}

// modelTransaction is POST /api/v1/transaction: "operations" must be a
// non-empty array (C89, C90); ack operations store nothing; a push
// operation stores its items, or the operation itself in the flat form.
func modelTransaction(text []byte) ([]ProduceItem, bool) {
	top, ok := modelTop(text)
	if !ok {
		return nil, false
	}
	ops, ok := modelArray(top["operations"])
	if !ok || len(ops) == 0 {
		return nil, false
	}
	out := []ProduceItem{}
	for _, raw := range ops {
		op, ok := modelObject(raw)
		if !ok {
			continue
		}
		t, _ := modelString(op["type"])
		if t == "ack" {
			continue
		}
		if t == "positions" || t == "position" {
			return nil, false // a position written as an operation: refused on purpose
		}
		if items, ok := modelArray(op["items"]); ok {
			for _, r := range items {
				it, ok := modelPushItem(r)
				if !ok {
					return nil, false
				}
				out = append(out, it)
			}
			continue
		}
		if _, flat := op["queue"]; !flat {
			continue
		}
		it, ok := modelPushItem(raw)
		if !ok {
			return nil, false
		}
		out = append(out, it)
	}
	if raw, present := top["positions"]; present && !modelPositions(raw) {
		return nil, false
	}
	return out, true
}

// modelPositions is the raft-storage broker's receiver taking a
// transaction's positions (server/src/rsm/planner/positions.rs in
// queen-mq/queen, parse_position_ops): an array of at most 16384 objects,
// each with a non-empty string queue and consumerGroup, an offset that is
// null or an unsigned integer below 2^63, and a metadata absent, null or a
// string of at most 4096 bytes.
func modelPositions(raw json.RawMessage) bool {
	ps, ok := modelArray(raw)
	if !ok || len(ps) > 16384 {
		return false
	}
	for _, r := range ps {
		p, ok := modelObject(r)
		if !ok {
			return false
		}
		if q, _ := modelString(p["queue"]); q == "" {
			return false
		}
		if g, _ := modelString(p["consumerGroup"]); g == "" {
			return false
		}
		off, present := p["offset"]
		if !present {
			return false
		}
		if string(off) != "null" {
			var u uint64
			d := json.NewDecoder(bytes.NewReader(off))
			d.UseNumber()
			var num json.Number
			if d.Decode(&num) != nil || strings.ContainsAny(string(num), "-.eE") {
				return false
			}
			if err := json.Unmarshal([]byte(num), &u); err != nil || u > 1<<63-1 {
				return false
			}
		}
		if m, present := p["metadata"]; present && string(m) != "null" {
			text, ok := modelString(m)
			if !ok || len(text) > 4096 {
				return false
			}
		}
	}
	return true
}

// modelCycle is the sink items of POST /streams/v1/cycle with their
// positions; ok is false when push_items is neither absent, null nor an
// array.
func modelCycle(text []byte) ([]ProduceItem, []int, bool) {
	top, ok := modelTop(text)
	if !ok {
		return nil, []int{}, true
	}
	if g, ok := modelString(top["consumer_group"]); ok && utf8.RuneCountInString(g) > 255 {
		return nil, nil, false // partition_consumers.consumer_group varchar(255)
	}
	raw, present := top["push_items"]
	if !present || string(raw) == "null" {
		return nil, []int{}, true
	}
	arr, ok := modelArray(raw)
	if !ok {
		return nil, nil, false
	}
	var items []ProduceItem
	pos := []int{}
	for i, raw := range arr {
		m, ok := modelObject(raw)
		if !ok {
			continue
		}
		q, ok := modelString(m["queue"])
		if !ok || q == "" {
			continue
		}
		p, ok := modelString(m["partition"])
		if !ok || p == "" {
			p = DefaultPartition
		}
		size := 0
		if v, present := m["payload"]; present {
			size = len(v)
		} else if v, present := m["data"]; present {
			size = len(v)
		}
		it := ProduceItem{Queue: q, Partition: p, PayloadBytes: size}
		if !modelStorable(m, it) {
			return nil, nil, false
		}
		items = append(items, it)
		pos = append(pos, i)
	}
	return items, pos, true
}

// modelStateValue is the largest value a cycle's state_ops upsert (the
// last "value" of each object op, as stored), as (position, size); -1 when
// none.
func modelStateValue(text []byte) (int, int) {
	top, ok := modelTop(text)
	if !ok {
		return -1, 0
	}
	ops, ok := modelArray(top["state_ops"])
	if !ok {
		return -1, 0
	}
	at, size := -1, 0
	for i, raw := range ops {
		m, ok := modelObject(raw)
		if !ok {
			continue
		}
		if v, present := m["value"]; present && len(v) > size {
			at, size = i, len(v)
		}
	}
	return at, size
}

func modelEphemeral(text []byte) (int, bool) {
	top, ok := modelTop(text)
	if !ok {
		return 0, false
	}
	arr, ok := modelArray(top["messages"])
	if !ok {
		return 0, false
	}
	return len(arr), true
}

// modelOperations is a KV or timers batch as the gateway caps it: a bare
// array of operations or an object's "operations" array; each operation an
// item sized by its largest member (the whole element when it is not an
// object).
func modelOperations(text []byte) ([]ProduceItem, bool) {
	var ops []json.RawMessage
	if arr, ok := modelArray(json.RawMessage(bytes.TrimLeft(text, " \t\r\n"))); ok {
		ops = arr
	} else if top, ok := modelTop(text); ok {
		if ops, ok = modelArray(top["operations"]); !ok {
			return nil, false
		}
	} else {
		return nil, false
	}
	items := []ProduceItem{}
	for _, raw := range ops {
		size := len(raw)
		if _, ok := modelObject(raw); ok {
			size = modelLargestMember(raw)
		}
		items = append(items, ProduceItem{PayloadBytes: size})
	}
	return items, true
}

// modelLargestMember is the length of the longest member value of the
// object raw as sent, a duplicated member's discarded values included (the
// gateway caps every value an operation carries, whichever one the broker
// keeps).
func modelLargestMember(raw json.RawMessage) int {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return 0
	}
	largest := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return largest
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return largest
		}
		largest = max(largest, len(v))
	}
	return largest
}

// modelTrace is record_trace taking a POST /api/v1/traces body: an object
// whose transactionId, consumerGroup and workerId fit varchar(255) and
// eventType varchar(100), in characters; sized by its data ("{}" when
// absent).
func modelTrace(text []byte) (int, bool) {
	m, ok := modelTop(text)
	if !ok {
		return 0, false
	}
	for field, limit := range map[string]int{"transactionId": 255, "consumerGroup": 255, "workerId": 255, "eventType": 100} {
		if s, ok := modelString(m[field]); ok && utf8.RuneCountInString(s) > limit {
			return 0, false
		}
	}
	if d, present := m["data"]; present {
		return len(d), true
	}
	return len("{}"), true
}

// compareModel checks a parsed batch against the model's items.
func compareModel(t *testing.T, what string, got ProduceBatch, items []ProduceItem, positions []int) {
	t.Helper()
	var want []QueuePartition
	seen := map[QueuePartition]bool{}
	var total int64
	hIdx, hBytes := -1, 0
	for i, it := range items {
		qp := QueuePartition{it.Queue, it.Partition}
		if !seen[qp] {
			seen[qp] = true
			want = append(want, qp)
		}
		total += int64(it.PayloadBytes)
		idx := i
		if positions != nil {
			idx = positions[i]
		}
		if hIdx < 0 || it.PayloadBytes > hBytes {
			hIdx, hBytes = idx, it.PayloadBytes
		}
	}
	if got.Items != len(items) || got.PayloadBytes != total || got.Heaviest.Index != hIdx || got.Heaviest.Bytes != hBytes {
		t.Fatalf("%s: got items=%d bytes=%d heaviest=%+v; model items=%d bytes=%d heaviest=(%d,%d)",
			what, got.Items, got.PayloadBytes, got.Heaviest, len(items), total, hIdx, hBytes)
	}
	if len(got.Pairs) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.Pairs, want)) {
		t.Fatalf("%s: pairs %q, model %q", what, got.Pairs, want)
	}
	if positions != nil {
		return
	}
	// The first item over a cap is the one CheckProduce names.
	for _, c := range []int{0, 1, 3, 7, 20, 100} {
		lim := AllUnlimited()
		lim.MaxPayloadBytes = Cap(c)
		var wantMsg string
		for i, it := range items {
			if it.PayloadBytes > c {
				wantMsg = fmt.Sprintf("item %d: payload %d bytes exceeds max_payload_bytes (%d)", i, it.PayloadBytes, c)
				break
			}
		}
		r := CheckProduce(got, lim, 1<<30)
		gotMsg := ""
		if r != nil {
			gotMsg = r.Message
		}
		if gotMsg != wantMsg {
			t.Fatalf("%s cap %d: %q, model %q", what, c, gotMsg, wantMsg)
		}
	}
}

// compareOperations checks a parsed KV or timers batch against the model:
// its count and the first operation over each payload cap.
func compareOperations(t *testing.T, got ProduceBatch, items []ProduceItem) {
	t.Helper()
	if got.Items != len(items) || len(got.Pairs) != 0 {
		t.Fatalf("operations: %d items, %d pairs; model %d items", got.Items, len(got.Pairs), len(items))
	}
	for _, c := range []int{0, 1, 3, 7, 20, 100} {
		lim := AllUnlimited()
		lim.MaxPayloadBytes = Cap(c)
		want := ""
		for i, it := range items {
			if it.PayloadBytes > c {
				want = fmt.Sprintf("item %d: payload %d bytes exceeds max_payload_bytes (%d)", i, it.PayloadBytes, c)
				break
			}
		}
		gotMsg := ""
		if r := CheckProduce(got, lim, 1<<30); r != nil {
			gotMsg = r.Message
		}
		if gotMsg != want {
			t.Fatalf("operations cap %d: %q, model %q", c, gotMsg, want)
		}
	}
}

// agree checks the fail-closed rule for one reader: what the gateway reads
// the broker reads the same way; what the broker takes the gateway reads,
// unless it refuses it on purpose; and every refusal explains itself.
func agree(t *testing.T, what string, gwErr error, brokerOK, gatewayOnly, sure bool) bool {
	t.Helper()
	if gwErr != nil {
		var be *BodyError
		var se *wire.SyntaxError
		if !errors.As(gwErr, &be) && !errors.As(gwErr, &se) {
			t.Fatalf("%s: refusal of an unknown kind: %v", what, gwErr)
		}
		if gwErr.Error() == "" {
			t.Fatalf("%s: a refusal without a message", what)
		}
	}
	switch {
	case !sure:
		return false
	case gwErr == nil && (!brokerOK || gatewayOnly):
		t.Fatalf("%s: the gateway read a body the broker would not read the same way (broker ok=%v, refused on purpose=%v)", what, brokerOK, gatewayOnly)
	case gwErr != nil && brokerOK && !gatewayOnly:
		t.Fatalf("%s: the gateway refused a body the broker takes: %v", what, gwErr)
	}
	return gwErr == nil
}

// issue14Examples are bodies the gateway once read differently from the
// broker: an item without a payload (in a batch, first, beside other
// queues, in a transaction), a payload nested too deep, invalid UTF-8 or
// a lone surrogate, a leading byte-order mark (the large ones at a size a
// fuzz seed can hold). The seed corpus under
// testdata/fuzz/FuzzParseProduce holds each one under its name, in the
// go test fuzz v1 format with the body quoted as by %q.
func issue14Examples() map[string]string {
	manyItems := func(n int, withoutPayload int) string {
		var sb strings.Builder
		sb.WriteString(`{"items":[`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			if i == withoutPayload {
				fmt.Fprintf(&sb, `{"queue":"q","transactionId":"t%d"}`, i)
				continue
			}
			fmt.Fprintf(&sb, `{"queue":"q","payload":{"i":%d}}`, i)
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	manyQueues := func(n int) string {
		var sb strings.Builder
		sb.WriteString(`{"items":[{"queue":"q0"}`)
		for i := 1; i < n; i++ {
			fmt.Fprintf(&sb, `,{"queue":"q%d","payload":1}`, i)
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	deep := strings.Repeat(`{"a":`, 1200) + "1" + strings.Repeat("}", 1200)
	return map[string]string{
		"f1-missing-payload-batch-cap": manyItems(1001, 500),
		"f1-missing-payload-first":     manyItems(30, 0),
		"f1-missing-payload-queues":    manyQueues(45),
		"f1-missing-payload-big":       `{"items":[{"queue":"q"},{"queue":"q","payload":"` + strings.Repeat("x", 4096) + `"}]}`,
		"f1-deep-payload":              `{"items":[{"queue":"q","payload":` + deep + `}]}`,
		"f1-deep-payload-at-limit":     `{"items":[{"queue":"q","payload":` + strings.Repeat("[", wire.DefaultMaxDepth-2) + strings.Repeat("]", wire.DefaultMaxDepth-2) + `}]}`,
		"f1-transaction-missing":       `{"operations":[{"type":"push","items":[{"queue":"q"},{"queue":"q","payload":1}]}]}`,
		"f1-transaction-flat":          `{"operations":[{"type":"ack","transactionId":"t","partitionId":"p"},{"type":"push","queue":"q"}]}`,
		"f3-invalid-utf8":              "{\"items\":[{\"queue\":\"u\",\"payload\":\"\xff\xfe\"}]}",
		"f3-invalid-utf8-queue":        "{\"items\":[{\"queue\":\"\xc3\",\"payload\":1}]}",
		"f3-invalid-utf8-transaction":  "{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"u\",\"payload\":\"\xed\xa0\x80\"}]}]}",
		"f3-half-surrogate":            `{"items":[{"queue":"u","payload":"\ud800"}]}`,
		"f5-bom-kv":                    "\xef\xbb\xbf[{\"op\":\"put\",\"ns\":\"n\",\"key\":\"k\",\"value\":1}]",
		"f5-bom-timers":                "\xef\xbb\xbf{\"operations\":[{\"op\":\"schedule\",\"key\":\"k\"}]}",
		"f5-bom-cycle":                 "\xef\xbb\xbf{\"partition_id\":\"p\",\"push_items\":[{\"queue\":\"sink\",\"payload\":1}]}",
		"f5-bom-push":                  "\xef\xbb\xbf{\"items\":[{\"queue\":\"q\",\"payload\":1}]}",
	}
}

func TestIssue14ExamplesAreSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseProduce")
	for name, body := range issue14Examples() {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("seed %s: %v", name, err)
			continue
		}
		want := "go test fuzz v1\n[]byte(" + fmt.Sprintf("%q", body) + ")\n"
		if string(raw) != want {
			t.Errorf("seed %s does not hold the example", name)
		}
	}
}

// FuzzParseProduce holds the gateway's reading of every produce body
// against the broker model.
func FuzzParseProduce(f *testing.F) {
	for _, s := range []string{
		`{"items": [{"queue": "cat-orders", "partition": "p1", "payload": {"orderId": 1, "amount": 9.5}, "transactionId": "tx-1"}]}`,
		`{"items":[{"queue":"a","queue":"b","payload":1},{"queue":"c","partition":null,"payload":"x"}]}`,
		`{"items":[{"payload":1}],"items":[{"queue":"b","payload":22}]}`,
		`{"items": [{"queue": "cat-orders", "payload": {}, "transactionId": 99}]}`,
		`{"operations": [{"type": "ack", "transactionId": "tx-9"}, {"type": "push", "items": [{"queue": "cat-next", "partition": "Default", "payload": {"processed": 9}}]}], "requiredLeases": ["x"]}`,
		`{"operations":[{"items":[{"queue":"a","payload":1}],"type":"ack"},{"queue":"q","partition":"p","payload":[1]}]}`,
		`{"operations":[]}`,
		`{"operations":[{"type":"push","items":[{"queue":"q","payload":1}]}],"positions":[{"queue":"q","partition":"p","consumerGroup":"g","offset":42,"metadata":"m"},{"queue":"q","consumerGroup":"g","offset":null}]}`,
		`{"positions":[{"queue":"q","consumerGroup":"g","offset":-1}],"operations":[{"queue":"q","payload":1}]}`,
		`{"operations":[{"type":"positions","queue":"q","consumerGroup":"g","offset":3}]}`,
		`{"push_items":[1,{"queue":""},{"queue":"a","payload":"xx"},{"queue":"a","partition":"","data":[1,2]}]}`,
		`{"queue":"q","messages":[1,{"a":[1,2]},"x",null]}`,
		"{\"items\":[{\"\\u0071ueue\":\"q\\u00e9\",\"payload\":1}]}",
		`{"items":[]} x`,
		`[{"op":"put","ns":"n","key":"k","value":{"a":[1,2]}},5,{"op":"get","key":"k","key":"kk"}]`,
		`{"operations":[{"op":"schedule","payload":"xx"}],"operations":[{"op":"cancel"},{}]}`,
		`[1,2,3]`,
		`{"consumerGroup":"` + strings.Repeat("g", 256) + `","acknowledgments":[]}`,
		`{"partition_id":"p","consumer_group":"g","state_ops":[{"type":"upsert","key":"k","value":{"sum":12}},7,{"type":"delete","key":"k"},{"value":[1,2,3,4,5],"value":1}],"state_ops":[{"value":"xyz"}]}`,
		`{"transactionId":"tx-1","partitionId":"9827ba6f-7345-4942-8385-39c3bcb79254","traceNames":["order-1"],"eventType":"info","data":{"text":"charged card"}}`,
		`{"transactionId":"t","eventType":"` + strings.Repeat("e", 101) + `","data":1}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		text, ok, gatewayOnly, sure := brokerJSON(body)

		got, err := ParsePush(body)
		items, pushOK := modelPush(text)
		if agree(t, "push", err, ok && pushOK, gatewayOnly, sure) {
			compareModel(t, "push", got, items, nil)
		}

		got, err = ParseTransaction(body)
		items, txnOK := modelTransaction(text)
		if agree(t, "transaction", err, ok && txnOK, gatewayOnly, sure) {
			compareModel(t, "transaction", got, items, nil)
		}

		got, err = parseCycle(body)
		citems, pos, cycleOK := modelCycle(text)
		if agree(t, "cycle", err, ok && cycleOK, gatewayOnly, sure) {
			compareModel(t, "cycle", got, citems, pos)
			if at, size := modelStateValue(text); got.stateHeaviest != (sizeRecord{at, size}) {
				t.Fatalf("cycle state value %+v, model (%d, %d)", got.stateHeaviest, at, size)
			}
		}

		eph, err := ParseEphemeral(body)
		want, ephOK := modelEphemeral(text)
		if agree(t, "ephemeral", err, ok && ephOK, gatewayOnly, sure) && eph.Items != want {
			t.Fatalf("ephemeral %d, model %d", eph.Items, want)
		}
		got, err = parseOperations(body)
		ops, opsOK := modelOperations(text)
		if agree(t, "operations", err, ok && opsOK, gatewayOnly, sure) {
			compareOperations(t, got, ops)
		}
		// An ack: ack_messages_v2 stores its consumerGroup in
		// messages_consumed.consumer_group varchar(255).
		// (A body the gateway refuses anyway, for U+0000 or on purpose, is
		// not measured.)
		ackTooLong := false
		if top, isObj := modelTop(text); isObj && ok && !gatewayOnly {
			g, isString := modelString(top["consumerGroup"])
			ackTooLong = isString && utf8.RuneCountInString(g) > 255
		}
		if err := AckNamesError(body); sure && (err != nil) != ackTooLong {
			t.Fatalf("ack: %v, model too long=%v", err, ackTooLong)
		}
		tr, err := ParseTrace(body)
		size, traceOK := modelTrace(text)
		if agree(t, "trace", err, ok && traceOK, gatewayOnly, sure) && (tr.Items != 1 || tr.Heaviest.Bytes != size) {
			t.Fatalf("trace: %d items of %d bytes, model one of %d", tr.Items, tr.Heaviest.Bytes, size)
		}
		if !bytes.Equal(body, orig) {
			t.Fatal("the body was modified")
		}
	})
}
