package tenancy

import (
	"strings"
	"testing"
)

func TestKVCarveOutSize(t *testing.T) {
	cases := []struct {
		name, body           string
		ok                   bool
		ops, index, heaviest int
	}{
		{"values", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":1},{"ns":"queen-kafka","op":"put","key":"qk:b","value": {"o" : 12} },{"ns":"queen-kafka","op":"put","key":"qk:c","value":{"o":13}}]`, true, 3, 1, 10},
		{"no values", `{"operations":[{"ns":"queen-s3","op":"getMany","keys":["s3:a"]},{"ns":"queen-s3","op":"delete","key":"s3:b"}]}`, true, 2, 0, 0},
		{"a string value counts its quotes and escapes as sent", `[{"ns":"queen-s3","op":"put","key":"s3:a","value":"\u00e9"}]`, true, 1, 0, 8},
		{"duplicate value keys: the last one counts", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":"long value","value":1}]`, true, 1, 0, 1},
		{"not a carve-out", `[{"ns":"app","op":"put","key":"k","value":1}]`, false, 0, 0, 0},
		{"not JSON", `[{"ns":"queen-kafka"`, false, 0, 0, 0},
	}
	for _, c := range cases {
		b, ok := kvCarveOut([]byte(c.body))
		if ok != c.ok || b.Ops != c.ops || b.Heaviest.Index != c.index || b.Heaviest.Bytes != c.heaviest {
			t.Errorf("%s: ReadBatch carve-out = %+v, %v; want ops %d, heaviest %d at %d, %v", c.name, b, ok, c.ops, c.heaviest, c.index, c.ok)
		}
		if kvBatchIsCarveOut([]byte(c.body)) != ok {
			t.Errorf("%s: kvBatchIsCarveOut disagrees with kvCarveOut", c.name)
		}
	}
}

// TestReadBatchDecidesDespiteUPlus0000 holds ReadBatch to one reading for
// every step: a batch refused only for U+0000 is still judged by its
// operations (the carve-out, the push block), so which step refuses it
// does not depend on where the U+0000 is; one that is not read at all
// earns nothing and grows.
func TestReadBatchDecidesDespiteUPlus0000(t *testing.T) {
	cases := []struct {
		name, body string
		carveOps   int
		grows      bool
		refusal    string // a piece of Err's message, "" for none
	}{
		{"a carve-out", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":"x"}]`, 1, true, ""},
		{"a carve-out holding U+0000", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":"\u0000"}]`, 1, true, "U+0000"},
		{"reads holding U+0000", `{"x":"\u0000","operations":[{"ns":"s","op":"get","key":"a"}]}`, 0, false, "U+0000"},
		{"U+0000, then not JSON", `[{"ns":"queen-kafka","op":"put","key":"qk:a","value":"\u0000"}`, 0, true, "U+0000"},
		{"not a batch", `{"operations":{"op":"get"}}`, 0, true, "a batch must be"},
		{"not a batch, holding U+0000", `{"operations":"\u0000"}`, 0, true, "U+0000"},
		{"not JSON", `[{"op":"get"}`, 0, true, "not valid JSON"},
	}
	for _, c := range cases {
		b := ReadBatch([]byte(c.body))
		msg := ""
		if b.Err != nil {
			msg = b.Err.Error()
		}
		if b.CarveOut.Ops != c.carveOps || b.Grows != c.grows || (c.refusal == "") != (b.Err == nil) || !strings.Contains(msg, c.refusal) {
			t.Errorf("%s: ReadBatch = carve-out %d ops, grows %v, refusal %q; want %d, %v, %q", c.name, b.CarveOut.Ops, b.Grows, msg, c.carveOps, c.grows, c.refusal)
		}
		b.Items.Release()
	}
}
