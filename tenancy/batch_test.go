package tenancy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/wire"
)

type bodyCase struct {
	name string
	body string
	want bool
}

func runBodyCases(t *testing.T, fn func([]byte) bool, fnName string, cases []bodyCase) {
	t.Helper()
	for _, c := range cases {
		if got := fn([]byte(c.body)); got != c.want {
			t.Errorf("%s: %s(%s) = %v, want %v", c.name, fnName, c.body, got, c.want)
		}
	}
}

func TestKVBatchIsCarveOut(t *testing.T) {
	runBodyCases(t, kvBatchIsCarveOut, "kvBatchIsCarveOut", []bodyCase{
		// Kafka facade.
		{"kafka put, bare array", `[{"ns":"queen-kafka","op":"put","key":"qk:offsets/orders/0","value":"42"}]`, true},
		{"kafka ops object", `{"operations":[{"ns":"queen-kafka","op":"getMany","keys":["qk:a","qk:b"]},{"ns":"queen-kafka","op":"delete","key":"qk:a"}]}`, true},
		{"kafka getPrefix", `[{"ns":"queen-kafka","op":"getPrefix","prefix":"qk:group/"}]`, true},
		{"kafka prefix equal to the reserved prefix", `[{"ns":"queen-kafka","op":"getPrefix","prefix":"qk:"}]`, true},
		{"whitespace around", " \n\t[{\"ns\":\"queen-kafka\",\"op\":\"put\",\"key\":\"qk:x\"}]\r\n", true},
		{"extra top-level fields", `{"atomic":true,"operations":[{"ns":"queen-kafka","op":"put","key":"qk:x"}]}`, true},
		{"kafka get is not allowed", `[{"ns":"queen-kafka","op":"get","key":"qk:x"}]`, false},
		{"kafka putIfAbsent is not allowed", `[{"ns":"queen-kafka","op":"putIfAbsent","key":"qk:x"}]`, false},
		// S3 sink.
		{"s3 get", `[{"ns":"queen-s3","op":"get","key":"s3:bucket/object"}]`, true},
		{"s3 all ops", `{"operations":[
			{"ns":"queen-s3","op":"get","key":"s3:a"},
			{"ns":"queen-s3","op":"getMany","keys":["s3:a","s3:b"]},
			{"ns":"queen-s3","op":"getPrefix","prefix":"s3:a/"},
			{"ns":"queen-s3","op":"put","key":"s3:a","value":{"etag":"x"}},
			{"ns":"queen-s3","op":"putIfAbsent","key":"s3:lock"},
			{"ns":"queen-s3","op":"delete","key":"s3:a"}]}`, true},
		{"s3 incr is not allowed", `[{"ns":"queen-s3","op":"incr","key":"s3:n"}]`, false},
		// One key space per batch.
		{"kafka and s3 mixed", `[{"ns":"queen-kafka","op":"put","key":"qk:x"},{"ns":"queen-s3","op":"put","key":"s3:x"}]`, false},
		{"kafka ns with s3 prefix", `[{"ns":"queen-kafka","op":"put","key":"s3:x"}]`, false},
		{"s3 ns with kafka prefix", `[{"ns":"queen-s3","op":"put","key":"qk:x"}]`, false},
		// Namespace must match exactly.
		{"wrong ns", `[{"ns":"sessions","op":"put","key":"qk:x"}]`, false},
		{"ns differs in case", `[{"ns":"Queen-Kafka","op":"put","key":"qk:x"}]`, false},
		{"ns with trailing space", `[{"ns":"queen-kafka ","op":"put","key":"qk:x"}]`, false},
		{"ns missing", `[{"op":"put","key":"qk:x"}]`, false},
		{"ns not a string", `[{"ns":["queen-kafka"],"op":"put","key":"qk:x"}]`, false},
		{"ns key in other case", `[{"NS":"queen-kafka","op":"put","key":"qk:x"}]`, false},
		// Op must be a string in the closed list.
		{"op missing", `[{"ns":"queen-kafka","key":"qk:x"}]`, false},
		{"op not a string", `[{"ns":"queen-kafka","op":1,"key":"qk:x"}]`, false},
		{"op null", `[{"ns":"queen-kafka","op":null,"key":"qk:x"}]`, false},
		{"op differs in case", `[{"ns":"queen-kafka","op":"PUT","key":"qk:x"}]`, false},
		// One foreign operation spoils the batch.
		{"foreign op in batch", `[{"ns":"queen-kafka","op":"put","key":"qk:x"},{"ns":"sessions","op":"put","key":"user:1"}]`, false},
		{"non-object op", `[{"ns":"queen-kafka","op":"put","key":"qk:x"},"put"]`, false},
		{"null op", `[null]`, false},
		// Key fields.
		{"no key field", `[{"ns":"queen-kafka","op":"put","value":"x"}]`, false},
		{"key without prefix", `[{"ns":"queen-kafka","op":"put","key":"offsets"}]`, false},
		{"key prefix in other case", `[{"ns":"queen-kafka","op":"put","key":"QK:x"}]`, false},
		{"key not a string", `[{"ns":"queen-kafka","op":"put","key":7}]`, false},
		{"key null", `[{"ns":"queen-kafka","op":"put","key":null}]`, false},
		{"keys empty", `[{"ns":"queen-kafka","op":"getMany","keys":[]}]`, false},
		{"keys one without prefix", `[{"ns":"queen-kafka","op":"getMany","keys":["qk:a","b"]}]`, false},
		{"keys non-string element", `[{"ns":"queen-kafka","op":"getMany","keys":["qk:a",1]}]`, false},
		{"keys not an array", `[{"ns":"queen-kafka","op":"getMany","keys":"qk:a"}]`, false},
		{"keys null", `[{"ns":"queen-kafka","op":"getMany","keys":null}]`, false},
		{"short prefix q", `[{"ns":"queen-kafka","op":"getPrefix","prefix":"q"}]`, false},
		{"short prefix qk", `[{"ns":"queen-kafka","op":"getPrefix","prefix":"qk"}]`, false},
		{"empty prefix", `[{"ns":"queen-kafka","op":"getPrefix","prefix":""}]`, false},
		{"s3 short prefix", `[{"ns":"queen-s3","op":"getPrefix","prefix":"s3"}]`, false},
		{"good key, bad prefix", `[{"ns":"queen-kafka","op":"getPrefix","key":"qk:x","prefix":"q"}]`, false},
		{"good key, bad keys", `[{"ns":"queen-kafka","op":"getMany","key":"qk:x","keys":["x"]}]`, false},
		{"all key fields good", `[{"ns":"queen-kafka","op":"getMany","key":"qk:x","keys":["qk:y"],"prefix":"qk:z"}]`, true},
		{"escaped prefix in key", `[{"ns":"queen-kafka","op":"put","key":"\u0071k:x"}]`, true},
		// Shapes that are not a batch.
		{"empty array", `[]`, false},
		{"empty operations", `{"operations":[]}`, false},
		{"operations null", `{"operations":null}`, false},
		{"operations not an array", `{"operations":{"ns":"queen-kafka","op":"put","key":"qk:x"}}`, false},
		{"operations key in other case", `{"Operations":[{"ns":"queen-kafka","op":"put","key":"qk:x"}]}`, false},
		{"single op object", `{"ns":"queen-kafka","op":"put","key":"qk:x"}`, false},
		{"empty body", ``, false},
		{"null body", `null`, false},
		{"unparsable", `[{"ns":"queen-kafka","op":"put","key":"qk:x"}`, false},
		{"trailing garbage", `[{"ns":"queen-kafka","op":"put","key":"qk:x"}] x`, false},
		{"two documents", `[{"ns":"queen-kafka","op":"put","key":"qk:x"}][]`, false},
		{"byte-order mark", "\xef\xbb\xbf[{\"ns\":\"queen-kafka\",\"op\":\"put\",\"key\":\"qk:x\"}]", false},
		{"invalid UTF-8 in a key", "[{\"ns\":\"queen-kafka\",\"op\":\"put\",\"key\":\"qk:\xff\"}]", false},
		{"half a surrogate pair", `[{"ns":"queen-kafka","op":"put","key":"qk:\ud800"}]`, false},
	})
}

func TestBatchGrows(t *testing.T) {
	runBodyCases(t, batchGrows, "batchGrows", []bodyCase{
		{"reads and deletes", `[{"ns":"s","op":"get","key":"a"},{"ns":"s","op":"getPrefix","prefix":"a"},{"ns":"s","op":"delete","key":"a"}]`, false},
		{"timer cancel", `{"operations":[{"op":"cancel","queue":"orders","key":"reminder-42"}]}`, false},
		{"put", `[{"ns":"s","op":"get","key":"a"},{"ns":"s","op":"put","key":"a","value":1}]`, true},
		{"putIfAbsent", `[{"ns":"s","op":"putIfAbsent","key":"a","value":1}]`, true},
		{"incr", `{"operations":[{"ns":"s","op":"incr","key":"n"}]}`, true},
		{"schedule", `{"operations":[{"op":"schedule","queue":"orders","key":"r","at":"2031-01-01T00:00:00Z"}]}`, true},
		{"reschedule", `[{"op":"reschedule","queue":"orders","key":"r"}]`, true},
		{"getMany is not in the non-growing set", `[{"ns":"s","op":"getMany","keys":["a"]}]`, true},
		{"unknown op", `[{"op":"frobnicate"}]`, true},
		{"missing op", `[{"ns":"s","key":"a"}]`, true},
		{"non-string op", `[{"op":["get"]}]`, true},
		{"null op", `[{"op":null}]`, true},
		{"op in other case", `[{"op":"GET"}]`, true},
		{"op key in other case", `[{"OP":"get"}]`, true},
		{"non-object element", `[{"op":"get"},42]`, true},
		{"null element", `[null]`, true},
		{"empty array", `[]`, false},
		{"empty operations", `{"operations":[]}`, false},
		// What is not a batch, or not readable, grows: the push block
		// refuses it rather than guess how the broker reads it.
		{"operations absent", `{"ops":[{"op":"put"}]}`, true},
		{"operations not an array", `{"operations":{"op":"put"}}`, true},
		{"empty body", ``, true},
		{"unparsable", `[{"op":"put"`, true},
		{"string body", `"put"`, true},
		{"number body", `1`, true},
		{"byte-order mark, kv", "\xef\xbb\xbf[{\"ns\":\"s\",\"op\":\"put\",\"key\":\"a\",\"value\":1}]", true},
		{"byte-order mark, timers", "\xef\xbb\xbf{\"operations\":[{\"op\":\"schedule\",\"queue\":\"q\",\"key\":\"r\"}]}", true},
		{"byte-order mark before a read", "\xef\xbb\xbf[{\"ns\":\"s\",\"op\":\"get\",\"key\":\"a\"}]", true},
		{"deeper than the gateway reads", `[{"op":"get","key":"a","x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}]`, true},
	})
}

func TestCycleGrows(t *testing.T) {
	runBodyCases(t, cycleGrows, "cycleGrows", []bodyCase{
		{"one item", `{"query_id":"q1","push_items":[{"queue":"sink","payload":{"n":1}}]}`, true},
		{"items with empty queue still grow", `{"push_items":[{"queue":""},{"queue":""}]}`, true},
		{"non-object items still grow", `{"push_items":[1]}`, true},
		{"whitespace", "\n {\"push_items\" : [ {} ] }\n", true},
		{"empty push_items", `{"push_items":[],"acks":[{"id":"x"}]}`, false},
		{"push_items absent", `{"acks":[{"id":"x"}],"state":{"k":"v"}}`, false},
		{"push_items null", `{"push_items":null}`, false},
		{"push_items object", `{"push_items":{"queue":"sink"}}`, true},
		{"push_items string", `{"push_items":"[1]"}`, true},
		{"push_items in other case", `{"Push_Items":[{"queue":"sink"}]}`, false},
		{"array body", `[{"push_items":[1]}]`, false},
		{"null body", `null`, false},
		// The verdict does not depend on refusals the push block comes
		// before: an item's, the consumer group's, U+0000's.
		{"a refused item", `{"push_items":[{"queue":"sink","traceId":"not a uuid"}]}`, true},
		{"U+0000 in an item", `{"push_items":[{"queue":"sink","payload":"\u0000"}]}`, true},
		{"U+0000 beside no items", `{"push_items":[],"consumer_group":"\u0000"}`, false},
		{"a consumer group too long", `{"push_items":[],"consumer_group":"` + strings.Repeat("g", 256) + `"}`, false},
		// Unreadable cycles grow: the push block refuses them.
		{"empty body", ``, true},
		{"unparsable", `{"push_items":[1]`, true},
		{"broken item", `{"push_items":[{"queue":}]}`, true},
		{"trailing garbage", `{"push_items":[1]}}`, true},
		{"byte-order mark", "\xef\xbb\xbf{\"push_items\":[{\"queue\":\"sink\"}]}", true},
	})
}

// FuzzReadBatch checks ReadBatch's verdicts, and limits.ReadCycle's, against a
// plain model built on a generic JSON decoding. The seed corpus lives in
// testdata/fuzz/FuzzReadBatch.
func FuzzReadBatch(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		carve, grows, cycle := kvBatchIsCarveOut(body), batchGrows(body), cycleGrows(body)
		// What the gateway does not read (not JSON, not UTF-8, a
		// byte-order mark, or refused by wire.Check for its depth or a
		// half surrogate pair) must fail closed.
		if !json.Valid(body) || !utf8.Valid(body) || bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) || wire.Check(body) != nil {
			if carve || !grows || !cycle {
				t.Fatalf("unread body %q: carve-out %v, grows %v, cycle grows %v", body, carve, grows, cycle)
			}
			return
		}
		v := decodeGeneric(t, body)
		// A batch is refused only for what the broker cannot store
		// (U+0000), else read whole: one item an operation.
		b := ReadBatch(body)
		ops, isBatch := modelOps(v)
		if stored := wire.CheckStored(body) == nil; (b.Err == nil) != (stored && isBatch) {
			t.Fatalf("ReadBatch(%s) refuses with %v; stored %v, a batch %v", body, b.Err, stored, isBatch)
		} else if b.Err == nil && b.Items.Items != len(ops) {
			t.Fatalf("ReadBatch(%s) counts %d items, the model %d operations", body, b.Items.Items, len(ops))
		}
		b.Items.Release()
		if want := modelCarveOut(v); carve != want {
			t.Fatalf("kvBatchIsCarveOut(%s) = %v, model says %v", body, carve, want)
		}
		if size, ok := kvCarveOut(body); ok != carve {
			t.Fatalf("kvCarveOut(%s) is %v, kvBatchIsCarveOut %v", body, ok, carve)
		} else if ok {
			checkCarveOutSize(t, body, v, size)
		}
		if want := modelBatchGrows(v); grows != want {
			t.Fatalf("batchGrows(%s) = %v, model says %v", body, grows, want)
		}
		if want := modelCycleGrows(v); cycle != want {
			t.Fatalf("limits.ReadCycle(%s) grows %v, model says %v", body, cycle, want)
		}
		if jsonKind(body) == '[' {
			wrapped := append(append([]byte(`{"operations":`), body...), '}')
			if kvBatchIsCarveOut(wrapped) != carve || batchGrows(wrapped) != grows {
				t.Fatalf("%s answers differently wrapped in an operations object", body)
			}
		}
	})
}

// checkCarveOutSize checks a carve-out's counted size against the model:
// one operation per element, the heaviest value the first of the largest
// raw values (the model re-encodes nothing: it reads each value's raw
// text with a decoder of its own).
func checkCarveOutSize(t *testing.T, body []byte, v any, size CarveOutBatch) {
	t.Helper()
	ops, _ := modelOps(v)
	if size.Ops != len(ops) {
		t.Fatalf("kvCarveOut(%s) counts %d operations, the model %d", body, size.Ops, len(ops))
	}
	var arr []json.RawMessage
	if jsonKind(body) == '[' {
		_ = json.Unmarshal(body, &arr)
	} else {
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(body, &obj)
		_ = json.Unmarshal(obj["operations"], &arr)
	}
	index, heaviest := 0, 0
	for i, raw := range arr {
		var op map[string]json.RawMessage
		_ = json.Unmarshal(raw, &op)
		if val, ok := op["value"]; ok && len(bytes.TrimSpace(val)) > heaviest {
			index, heaviest = i, len(bytes.TrimSpace(val))
		}
	}
	if size.Heaviest.Index != index || size.Heaviest.Bytes != heaviest {
		t.Fatalf("kvCarveOut(%s): heaviest %+v, the model says %d bytes at %d", body, size.Heaviest, heaviest, index)
	}
}

func decodeGeneric(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers out of float64 range are still valid JSON
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("json.Valid accepted %q but decoding failed: %v", body, err)
	}
	return v
}

func modelOps(v any) ([]any, bool) {
	if arr, ok := v.([]any); ok {
		return arr, true
	}
	if obj, ok := v.(map[string]any); ok {
		arr, ok := obj["operations"].([]any)
		return arr, ok
	}
	return nil, false
}

func modelCarveOut(v any) bool {
	ops, ok := modelOps(v)
	if !ok || len(ops) == 0 {
		return false
	}
	all := func(ns, prefix string, allowed ...string) bool {
		for _, o := range ops {
			if !modelInSpace(o, ns, prefix, allowed) {
				return false
			}
		}
		return true
	}
	return all("queen-kafka", "qk:", "put", "delete", "getMany", "getPrefix") ||
		all("queen-s3", "s3:", "get", "getMany", "getPrefix", "put", "putIfAbsent", "delete")
}

func modelInSpace(o any, ns, prefix string, allowed []string) bool {
	obj, ok := o.(map[string]any)
	if !ok || obj["ns"] != ns {
		return false
	}
	name, ok := obj["op"].(string)
	if !ok || !slices.Contains(allowed, name) {
		return false
	}
	hasPrefix := func(x any) bool {
		s, ok := x.(string)
		return ok && strings.HasPrefix(s, prefix)
	}
	fields := 0
	for _, f := range []string{"key", "prefix"} {
		if x, ok := obj[f]; ok {
			fields++
			if !hasPrefix(x) {
				return false
			}
		}
	}
	if x, ok := obj["keys"]; ok {
		fields++
		keys, ok := x.([]any)
		if !ok || len(keys) == 0 {
			return false
		}
		for _, k := range keys {
			if !hasPrefix(k) {
				return false
			}
		}
	}
	return fields > 0
}

func modelBatchGrows(v any) bool {
	ops, isBatch := modelOps(v)
	if !isBatch {
		return true
	}
	for _, o := range ops {
		obj, _ := o.(map[string]any)
		switch obj["op"] {
		case "get", "getPrefix", "delete", "cancel":
		default:
			return true
		}
	}
	return false
}

func modelCycleGrows(v any) bool {
	obj, _ := v.(map[string]any)
	raw, present := obj["push_items"]
	if !present || raw == nil {
		return false
	}
	items, isArray := raw.([]any)
	return !isArray || len(items) > 0
}

// kvCarveOut is ReadBatch's carve-out and whether the body earns one.
func kvCarveOut(body []byte) (CarveOutBatch, bool) {
	b := ReadBatch(body)
	return b.CarveOut, b.CarveOut.Ops > 0
}

// kvBatchIsCarveOut is ReadBatch's carve-out verdict alone.
func kvBatchIsCarveOut(body []byte) bool {
	_, ok := kvCarveOut(body)
	return ok
}

// cycleGrows is limits.ReadCycle's push-block verdict alone.
func cycleGrows(body []byte) bool {
	_, grows, _ := limits.ReadCycle(body)
	return grows
}

// batchGrows is ReadBatch's push-block verdict alone.
func batchGrows(body []byte) bool { return ReadBatch(body).Grows }

// jsonKind returns the first byte of a JSON value after any leading
// whitespace, or 0 when there is none.
func jsonKind(raw []byte) byte {
	if i := wire.SkipSpace(raw, 0); i < len(raw) {
		return raw[i]
	}
	return 0
}
