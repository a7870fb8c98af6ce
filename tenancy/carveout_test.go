package tenancy

import "testing"

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
		b, ok := KVCarveOut([]byte(c.body))
		if ok != c.ok || b.Ops != c.ops || b.Heaviest.Index != c.index || b.Heaviest.Bytes != c.heaviest {
			t.Errorf("%s: KVCarveOut = %+v, %v; want ops %d, heaviest %d at %d, %v", c.name, b, ok, c.ops, c.heaviest, c.index, c.ok)
		}
		if KVBatchIsCarveOut([]byte(c.body)) != ok {
			t.Errorf("%s: KVBatchIsCarveOut disagrees with KVCarveOut", c.name)
		}
	}
}
